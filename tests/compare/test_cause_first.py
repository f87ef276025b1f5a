"""The cause, not the symptom (issue 40, part B), on hand-made rows: an op whose golden (or a fused
member's) lies beyond fp16's range overflows whatever its relative error; a saturated mask ranks
behind an overflow of computed values; advice says when another op breaks on its own; a Cast beyond
fp16's range is a fix candidate, one in range is not."""

from __future__ import annotations

from ascendpipe.compare import advisor, mechanism, order


def _row(i, op, op_type, *, failed=True, golden=1.0, target=1.0, overflow=None, side="both", fused=False,
         members=None, golden_op=None, reasons=None, is_output=False):
    return {"index": i, "op_name": op, "op_type": op_type, "tensor": f"{op}:0", "side": side, "fused": fused,
            "golden_ops": members or [op], "golden_op": golden_op or op, "golden_op_type": op_type,
            "golden_abs_max": golden, "target_abs_max": target, "overflow": overflow, "failed": failed,
            "reasons": list(reasons or ["CosineSimilarity 0 < 0.99"]), "float_tensor": True, "is_output": is_output,
            "shape": [4]}


def _rms_rows():
    """x -> [Pow, ReduceMean, Add, Sqrt, Div] fused (golden members beyond 65504, output 1/sqrt in range) -> Mul -> out."""
    members = ["pow", "mean", "add", "sqrt", "div"]
    return [
        _row(0, "x", "Gather", failed=False, golden=400.0, target=400.0),
        _row(1, "pow", "Pow", failed=False, golden=1.6e5, side="golden_only", overflow="fp16_range"),
        _row(2, "mean", "ReduceMean", failed=False, golden=1.6e5, side="golden_only", overflow="fp16_range"),
        _row(3, "mean", "ReduceMean", golden=2.5e-3, target=0.0, fused=True, members=members, golden_op="div"),
        _row(4, "mul", "Mul", golden=3.0, target=0.0, is_output=True),
    ]


PRODUCERS = {"x": [], "pow": ["x"], "mean": ["pow"], "add": ["mean"], "sqrt": ["add"], "div": ["sqrt"],
             "mul": ["x", "div"]}


def test_a_fused_mean_of_squares_beyond_fp16_overflows_though_its_output_is_in_range():
    rows = _rms_rows()
    reach, _ = mechanism.annotate(rows, PRODUCERS)
    assert rows[3]["overflow"] == "target" and rows[3]["mechanism"] == "overflow"
    assert rows[3]["reasons"][0] == ("target overflows fp16 inside the fused kernel: 'pow' reaches 1.6e+05 in the "
                                     "golden, beyond fp16's 65504")
    assert order.select_failures(rows, producers=PRODUCERS, eligible=reach) == [3]
    # the same rows with the members in range: fp16 rounding, as before
    calm = _rms_rows()
    calm[1]["golden_abs_max"] = calm[2]["golden_abs_max"] = 100.0
    mechanism.annotate(calm, PRODUCERS)
    assert calm[3]["overflow"] is None and calm[3]["mechanism"] == "precision_loss"


def test_an_op_clipped_below_its_golden_overflows_and_one_kept_in_fp32_does_not():
    clipped = [_row(0, "x", "Input", failed=False), _row(1, "sum", "ReduceSum", golden=3e5, target=65504.0,
                                                         is_output=True)]
    mechanism.annotate(clipped, {"x": [], "sum": ["x"]})
    assert clipped[1]["mechanism"] == "overflow" and clipped[1]["overflow"] == "target"
    for target in (2.9e5, 6.0e4):  # kept in fp32, or smaller by an error carried in: not an overflow of its own
        kept = [_row(0, "x", "Input", failed=False), _row(1, "sum", "ReduceSum", golden=3e5, target=target,
                                                          is_output=True)]
        mechanism.annotate(kept, {"x": [], "sum": ["x"]})
        assert kept[1]["overflow"] is None and kept[1]["mechanism"] == "precision_loss"


def _mask_rows():
    """mask -> Mul(lowest) (NaN in fp16: 0 * -inf) and q,k -> MatMul (beyond 65504) -> Add -> Softmax -> out."""
    nan = ["target overflows fp16 (inf/NaN or 65504)"]
    return [
        _row(0, "mask_mul", "Mul", golden=3.4e38, target=0.0, overflow="target", reasons=nan),
        _row(1, "q", "MatMul", failed=False, golden=10.0, target=10.0),
        _row(2, "scores", "MatMul", golden=1.8e5, target=0.0, overflow="target", reasons=nan),
        _row(3, "add", "Add", golden=3.4e38, target=0.0, overflow="target", reasons=nan),
        _row(4, "softmax", "Softmax", golden=1.0, target=0.0, overflow="target", reasons=nan, is_output=True),
    ]


MASK_PRODUCERS = {"mask_mul": [], "q": [], "scores": ["q"], "add": ["scores", "mask_mul"], "softmax": ["add"]}


def test_the_scores_overflow_is_named_before_the_saturated_mask_and_the_advice_says_it_is_not_enough():
    rows = _mask_rows()
    reach, _ = mechanism.annotate(rows, MASK_PRODUCERS)
    assert rows[0]["mechanism"] == "saturated_mask" and rows[2]["mechanism"] == "overflow"
    picked = order.select_failures(rows, "all", producers=MASK_PRODUCERS, eligible=reach)
    assert picked[:2] == [2, 0]  # both origins; the computed overflow first, though the mask comes first in graph order
    failure = advisor.describe_failure(rows, 2, producers=MASK_PRODUCERS, convert_params={"keep_dtype"})
    advisor.note_unresolved(failure, rows, MASK_PRODUCERS, reach)
    assert failure["restores"] is False and [o["op_name"] for o in failure["also_failing"]] == ["mask_mul"]
    assert "Not enough on its own: 'mask_mul' (Mul, saturated_mask) also breaks on its own" in failure["advice"][0]["message"]


def test_advice_covering_every_break_is_not_marked_insufficient():
    rows = _rms_rows()
    reach, _ = mechanism.annotate(rows, PRODUCERS)
    failure = advisor.describe_failure(rows, 3, producers=PRODUCERS, convert_params={"keep_dtype"})
    advisor.note_unresolved(failure, rows, PRODUCERS, reach)
    assert failure["restores"] is None and failure["also_failing"] == [] and failure["verified"] is False
    assert "Not enough" not in failure["advice"][0]["message"]


def test_a_cast_beyond_fp16_is_a_candidate_and_one_in_range_is_not():
    from ascendpipe.fix.search import Result, _keepable

    rows = [_row(0, "residual", "Add", golden=1e5, target=0.0), _row(1, "cast", "Cast", golden=1e5, target=0.0),
            _row(2, "cast_small", "Cast", golden=3.0, target=0.0), _row(3, "reshape", "Reshape", golden=3.0)]
    result = Result(False, rows=rows, candidates=frozenset({"residual", "cast", "cast_small", "reshape"}))
    assert _keepable(result, "cast") and _keepable(result, "residual")
    assert not _keepable(result, "cast_small") and not _keepable(result, "reshape")
    # never one the plan says keep_dtype cannot change (the emulation does not round it)
    assert not _keepable(Result(False, rows=rows, candidates=frozenset({"residual"})), "cast")


def test_an_own_overflow_absorbed_on_the_way_is_still_named_first():
    """A decoder's decode step: layer 0's RMSNorm overflows on its own (x*x past 65504 in the fused
    kernel), but a residual add that passes absorbs its error; the final norm overflows and reaches the
    output. The prefill names layer 0's norm; so does the decode step, and the verdict says why."""
    from ascendpipe.compare.runner import own_overflows

    members = ["pow", "mean", "add", "sqrt", "div"]
    final = [f"f_{m}" for m in members]
    rows = [
        _row(0, "x", "Gather", failed=False, golden=300.0, target=300.0),
        _row(1, "pow", "Pow", failed=False, golden=9e4, side="golden_only", overflow="fp16_range"),
        _row(2, "mean", "ReduceMean", golden=3e-3, target=0.0, fused=True, members=members, golden_op="div"),
        _row(3, "attn", "MatMul", golden=0.5, target=0.0),
        _row(4, "residual", "Add", failed=False, golden=300.0, target=300.0),
        _row(5, "f_pow", "Pow", failed=False, golden=9e4, side="golden_only", overflow="fp16_range"),
        _row(6, "f_mean", "ReduceMean", golden=3e-3, target=0.0, fused=True, members=final, golden_op="f_div"),
        _row(7, "out", "Mul", golden=2.0, target=0.0, is_output=True),
    ]
    producers = {"x": [], "pow": ["x"], "mean": ["pow"], "add": ["mean"], "sqrt": ["add"], "div": ["sqrt"],
                 "attn": ["div"], "residual": ["x", "attn"], "f_pow": ["residual"], "f_mean": ["f_pow"],
                 "f_add": ["f_mean"], "f_sqrt": ["f_add"], "f_div": ["f_sqrt"], "out": ["residual", "f_div"]}
    reach, outputs_pass = mechanism.annotate(rows, producers)
    assert outputs_pass is False and 2 not in reach and 6 in reach and rows[2]["contained"]
    eligible = reach | own_overflows(rows, producers, outputs_pass)
    picked = order.select_failures(rows, producers=producers, eligible=eligible)
    assert picked == [2]
    failure = advisor.describe_failure(rows, 2, producers=producers, convert_params={"keep_dtype"})
    text = mechanism.verdict(rows, [failure], outputs_pass)
    assert text.startswith("outputs fail: first failure #2 mean (ReduceMean), overflow")
    assert "its error is absorbed on the way" in text
    # with every output passing, an absorbed overflow is named nowhere
    assert own_overflows(rows, producers, True) == set()


def test_keep_dtype_advice_that_the_soc_cannot_honour_says_it_cannot_restore(tmp_path):
    """A global sum past 65504 into a MatMul: on the default SoC a kept cube op still reads fp16, so the
    advice to keep them is marked as not restoring, with why; on an A2 SoC it is not (docs/emulation.md)."""
    import json

    import numpy as np
    import onnxruntime as ort

    from ascendpipe.backends.compare_sources import dump
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.compare.runner import compare_dumps, graph_info
    from ascendpipe.precision.settings import resolve
    from tests.compare import mechanism_models as mm

    model = mm.global_sum_model(tmp_path / "m.onnx")
    feeds = mm.global_sum_inputs(0)
    golden = dump(model, feeds, tmp_path / "golden", fusions=False)
    found = {}
    for soc in (None, "Ascend910B1"):
        params = {"precision_mode": "force_fp16", **({"soc_version": soc} if soc else {})}
        out = tmp_path / f"model-{soc}"
        convert_model(model, out, resolve(params))
        target = dump(out / "model.onnx", feeds, tmp_path / f"target-{soc}", fusions=True)
        result = compare_dumps(golden, target, fused_map=json.loads((out / "fused_map.json").read_text()),
                               precision_plan=json.loads((out / "precision_plan.json").read_text()),
                               graph=graph_info(model), target_settings=params)
        found[soc] = result["first_failure"]
        # the claim, checked: the advice applied, run on onnxruntime
        keep = found[soc]["advice"][0]["ops"]
        fixed = convert_model(model, tmp_path / f"fixed-{soc}", resolve({**params, "keep_dtype": keep}))
        run = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        t, g = run(fixed.model_path).astype(np.float64).ravel(), run(model).astype(np.float64).ravel()
        found[soc]["checked"] = bool(np.isfinite(t).all() and t @ g / (np.linalg.norm(t) * np.linalg.norm(g)) >= 0.99)
    default, a2 = found[None], found["Ascend910B1"]
    assert default["restores"] is False and "'head' (MatMul) is a cube op" in default["blocked"]
    assert "It cannot restore the outputs alone" in default["advice"][0]["message"] and not default["checked"]
    assert a2["restores"] is None and "blocked" not in a2 and a2["checked"]
