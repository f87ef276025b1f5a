"""Mechanisms and advice in Atlas A2/A3 terms: a failing op the precision plan reads as HF32, or computes
in bf16, is ``hf32_rounding`` / ``bf16_rounding`` (an fp32 op after it carries it), and the advice is
that SoC's switch (allow_hf32) or fp32, never fp16's remedies."""

from __future__ import annotations

from ascendpipe.compare import advisor, mechanism


def _row(index, op, op_type, failed=True, **extra):
    return {"index": index, "op_name": op, "op_type": op_type, "tensor": f"{op}:0", "failed": failed,
            "overflow": None, "golden_abs_max": 3.0, "side": "both", "reasons": ["cosine 0.98 < 0.99"], **extra}


def _plan(**nodes):
    return {"nodes": nodes, "precision_mode_v2": "origin"}


def test_hf32_conv_and_the_fp32_op_after_it_are_hf32_rounding():
    rows = [_row(0, "conv", "Conv"), _row(1, "add", "Add"), _row(2, "mm", "MatMul")]
    producers = {"conv": [], "add": ["conv"], "mm": ["add"]}
    plan = _plan(conv={"dtype": "float32", "reads_fp16": False, "reads": "hf32"},
                 add={"dtype": "float32", "reads_fp16": False}, mm={"dtype": "float16", "reads_fp16": True})
    mechanism.annotate(rows, producers, plan)
    assert [r["mechanism"] for r in rows] == ["hf32_rounding", "hf32_rounding", "precision_loss"]
    failure = advisor.describe_failure(rows, 0, precision_plan=plan, producers=producers, stage="convert@origin",
                                       target_settings={"precision_mode_v2": "origin"})
    assert failure["kind"] == "hf32_rounding"
    assert failure["advice"][0]["kind"] == "allow_hf32"
    assert failure["advice"][0]["set"] == "--set stages.convert.matrix.origin.allow_hf32=false"
    assert "Atlas A2/A3" in failure["advice"][0]["message"]
    assert "HF32" in mechanism.MECHANISM_TEXT["hf32_rounding"]


def test_bf16_op_is_bf16_rounding_and_the_advice_keeps_the_stages_precision_key():
    rows = [_row(0, "conv", "Conv")]
    plan = _plan(conv={"dtype": "bfloat16", "reads_fp16": False, "reads": "bfloat16"})
    mechanism.annotate(rows, None, plan)
    assert rows[0]["mechanism"] == "bf16_rounding"
    for settings, line in (({"precision_mode_v2": "mixed_bfloat16"}, "precision_mode_v2=origin"),
                           ({"precision_mode": "allow_mix_precision_bf16"}, "precision_mode=must_keep_origin_dtype")):
        failure = advisor.describe_failure(rows, 0, precision_plan=plan, stage="convert@bf16", target_settings=settings)
        kinds = [a["kind"] for a in failure["advice"]]
        assert kinds == ["keep_dtype", "precision_mode"] and line in failure["advice"][1]["set"]


def test_without_a_plan_the_fp16_mechanism_stays():
    rows = [_row(0, "conv", "Conv")]
    mechanism.annotate(rows, None)
    assert rows[0]["mechanism"] == "precision_loss"
