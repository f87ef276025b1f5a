"""Transformer blocks past fp16's range (issue 40, part B): compare names the op that breaks, fix
restores every one (Casts included) in at most 12 evaluations, and one keep set fixes a decoder's
prefill graph and its decode graph over several cache lengths. Plain torch modules exported with
torch.onnx (tests/fix/transformer_models.py), so no ``transformers`` is needed. Every answer is checked
independently: the model converted again with it, run on onnxruntime, its outputs compared with
numpy's cosine against the fp32 model's."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

pytest.importorskip("torch", reason="the transformer blocks are exported from torch modules")

from tests.fix import transformer_models as tm  # noqa: E402


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na and nb else 0.0


def _run(model, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)


def _emulated(model, feeds, out, keep=(), fusion=None, mode="force_fp16"):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    return convert_model(model, out, resolve({"precision_mode": mode, "keep_dtype": list(keep),
                                              "fusion_switch": dict(fusion or {})}))


def _emulated_cosine(model, feeds, out, keep=(), fusion=None) -> float:
    converted = _emulated(model, feeds, out, keep, fusion)
    return min(_cosine(t, g) for t, g in zip(_run(converted.model_path, feeds), _run(model, feeds)))


def _compare(model, feeds, work, keep=(), mode="force_fp16") -> dict:
    from ascendpipe.backends.compare_sources import dump
    from ascendpipe.compare.runner import compare_dumps, graph_info

    converted = _emulated(model, feeds, work / "model", keep, mode=mode)
    golden = dump(model, feeds, work / "golden", fusions=False)
    target = dump(converted.model_path, feeds, work / "target", fusions=True)
    return compare_dumps(golden, target, fused_map=json.loads((work / "model" / "fused_map.json").read_text()),
                         precision_plan=json.loads((work / "model" / "precision_plan.json").read_text()),
                         graph=graph_info(model))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("transformers")
    built = {name: tm.build(name, root / f"{name}.onnx", scaled=True) for name in tm.FAMILIES}
    built["llama_prefill"] = tm.build("llama", root / "llama_prefill.onnx", scaled=True, prefill=True)
    return built


# (family, the op compare must name, its mechanism)
CAUSES = [("bert", "/MatMul", "overflow"), ("vit", "/MatMul", "overflow"), ("gpt2", "/MatMul", "overflow"),
          ("llama", "/ln1/ReduceMean", "overflow"), ("t5", "/wo/MatMul", "overflow")]


@pytest.mark.parametrize("name,op,mechanism", CAUSES)
def test_compare_names_the_op_whose_own_computation_breaks(models, tmp_path, name, op, mechanism):
    feeds = tm.inputs(name)
    result = _compare(models[name], feeds, tmp_path)
    first = result["first_failure"]
    assert (first["op_name"], first["mechanism"]) == (op, mechanism)
    rows = {r["op_name"]: r for r in result["rows"] if r["side"] == "both"}
    # the claim behind the name, from the golden: the op (or a member of its fused kernel) exceeds 65504
    golden = {r["op_name"]: r["golden_abs_max"] for r in result["rows"] if r["side"] != "target_only"}
    members = rows[op].get("golden_ops") or [op]
    assert max(golden.get(m) or 0.0 for m in members) > 65504
    assert "without overflowing" not in json.dumps(first["advice"])


def test_the_mask_is_named_behind_the_scores_and_the_advice_alone_restores(models, tmp_path):
    """(1 - mask) * float32's lowest: the constant is converted to fp16 on the host at compile time, where GE's
    fp16_t makes it -65504, not -inf (precision.fp16.host_fp16): 0 * -65504 is 0, no NaN, and a Softmax
    downstream weighs -65504 as 0. The mask row differs from the golden, but its fill is absorbed by the Softmax
    (compare/fills.py): no cause of its own, and keeping the scores alone restores the output."""
    feeds = tm.inputs("bert")
    result = _compare(models["bert"], feeds, tmp_path / "c")
    first = result["first_failure"]
    mask = next(r for r in result["rows"] if r["op_name"] == "/Mul")
    assert mask["mechanism"] == "saturated_mask" and mask["failed"] and mask["reaches_output"] is False
    assert first["op_name"] == "/MatMul" and first["also_failing"] == []
    advised = first["advice"][0]["ops"]
    assert _emulated_cosine(models["bert"], feeds, tmp_path / "advised", advised) >= 0.99


def test_a_fused_mean_of_squares_beyond_fp16_is_an_overflow_not_a_precision_loss(models, tmp_path):
    result = _compare(models["llama"], tm.inputs("llama"), tmp_path)
    row = next(r for r in result["rows"] if r["op_name"] == "/ln1/ReduceMean" and r["side"] == "both")
    assert row["fused"] and row["golden_abs_max"] < 65504  # the kernel's output (1/sqrt) is in range ...
    assert row["overflow"] == "target" and row["mechanism"] == "overflow"  # ... its x*x and mean are not
    assert row["reasons"][0].startswith("target overflows fp16 inside the fused kernel")
    assert "overflow" in result["verdict"] and "fp16 rounding" not in result["verdict"]


def test_prefill_and_decode_graphs_name_the_same_cause(models, tmp_path):
    prefill = _compare(models["llama_prefill"], tm.prefill_inputs("llama"), tmp_path / "prefill")
    decode = _compare(models["llama"], tm.inputs("llama", past=8), tmp_path / "decode")
    empty = _compare(models["llama"], tm.inputs("llama", past=0), tmp_path / "empty")
    named = {(r["first_failure"]["op_name"], r["first_failure"]["mechanism"]) for r in (prefill, decode, empty)}
    assert named == {("/ln1/ReduceMean", "overflow")}


@pytest.mark.parametrize("name", tm.FAMILIES)
def test_fix_restores_every_scaled_family_in_at_most_12_evaluations(models, tmp_path, name):
    from ascendpipe.fix.run import fix_standalone

    feeds = tm.inputs(name)
    np.savez(tmp_path / "x.npz", **feeds)
    report = fix_standalone(models[name], input_path=tmp_path / "x.npz", min_cosine=0.99)
    assert report.outcome.passed and report.outcome.minimal, report.outcome.message
    assert len(report.outcome.attempts) <= 12
    assert _emulated_cosine(models[name], feeds, tmp_path / "none") < 0.99
    assert _emulated_cosine(models[name], feeds, tmp_path / "answer", report.keep_dtype, report.fusion_switch) >= 0.99


def test_fix_keeps_the_layer_norm_cast_and_a_kept_cast_stays_fp32(models, tmp_path):
    from ascendpipe.fix.run import fix_standalone

    feeds = tm.inputs("t5")
    np.savez(tmp_path / "x.npz", **feeds)
    report = fix_standalone(models["t5"], input_path=tmp_path / "x.npz", min_cosine=0.99)
    assert report.outcome.passed and "/lnf/Cast" in report.keep_dtype
    without = [k for k in report.keep_dtype if k != "/lnf/Cast"]
    assert _emulated_cosine(models["t5"], feeds, tmp_path / "no-cast", without, report.fusion_switch) < 0.99
    # the kept Cast writes fp32 in the emulation: no rounding point on its output, and it holds > 65504
    converted = _emulated(models["t5"], feeds, tmp_path / "kept", report.keep_dtype, report.fusion_switch)
    plan = json.loads((tmp_path / "kept" / "precision_plan.json").read_text())
    assert plan["nodes"]["/lnf/Cast"]["dtype"] == "float32"
    import onnx

    source = next(n for n in onnx.load(str(models["t5"])).graph.node if n.name == "/lnf/Cast")
    rounding = f"ascendpipe_emu/out_fp16/{source.output[0]}"  # the emulation's rounding point on its output
    kept = {n.name for n in onnx.load(str(converted.model_path)).graph.node}
    plain = {n.name for n in onnx.load(str(_emulated(models["t5"], feeds, tmp_path / "plain").model_path)).graph.node}
    assert rounding in plain and rounding not in kept


def test_one_keep_set_fixes_prefill_and_decode_with_empty_and_full_caches(models, tmp_path):
    from ascendpipe.fix.run import fix_standalone

    np.savez(tmp_path / "prefill.npz", **tm.prefill_inputs("llama"))
    np.savez(tmp_path / "past8.npz", **tm.inputs("llama", past=8))
    np.savez(tmp_path / "past0.npz", **tm.inputs("llama", past=0))
    report = fix_standalone(models["llama_prefill"], input_path=tmp_path / "prefill.npz", min_cosine=0.99,
                            cases=[(models["llama"], tmp_path / "past8.npz"), (models["llama"], tmp_path / "past0.npz")])
    assert report.outcome.passed and report.outcome.minimal and len(report.outcome.attempts) <= 12
    cases = report.summary["cases"]
    assert [c["label"] for c in cases] == ["llama_prefill.onnx:prefill.npz", "llama.onnx:past8.npz",
                                           "llama.onnx:past0.npz"]
    assert all(c["passed"] for c in cases)
    needed = report.summary["needed_for"]
    assert set(needed) == {str(c) for c in report.outcome.remedy}
    assert all(labels for labels in needed.values())  # every remedy was needed for some case, and says which
    for model, inputs in ((models["llama_prefill"], tm.prefill_inputs("llama")),
                          (models["llama"], tm.inputs("llama", past=8)), (models["llama"], tm.inputs("llama", past=0))):
        assert _emulated_cosine(model, inputs, tmp_path / f"check-{len(inputs)}-{inputs['input_ids'].shape[1]}",
                                report.keep_dtype, report.fusion_switch) >= 0.99
    text = report.text()
    assert "cases (one keep set for all):" in text and "each remedy is needed for:" in text


def test_a_case_where_only_one_past_length_breaks_says_so(models, tmp_path):
    """GPT-2's scores overflow on the prefill (8 tokens, empty cache) but not on one decode step after 8
    random cached keys: the remedies are needed for the prefill only, and the table says which case fails."""
    from ascendpipe.fix.run import fix_standalone

    np.savez(tmp_path / "past0.npz", **tm.inputs("gpt2", past=0))
    np.savez(tmp_path / "past8.npz", **tm.inputs("gpt2", past=8))
    report = fix_standalone(models["gpt2"], input_path=tmp_path / "past8.npz",
                            cases=[(models["gpt2"], tmp_path / "past0.npz")])
    assert report.outcome.passed
    assert report.outcome.attempts[0].result.note.startswith("fails on gpt2.onnx:past0.npz")
    needed = report.summary["needed_for"]
    assert needed and all(labels == ["gpt2.onnx:past0.npz"] for labels in needed.values())


def test_cli_case_pairs_and_their_refusals(models, tmp_path):
    from ascendpipe.cli.main import main

    np.savez(tmp_path / "past0.npz", **tm.inputs("gpt2", past=0))
    np.savez(tmp_path / "past8.npz", **tm.inputs("gpt2", past=8))
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["fix", "--case", f"{models['gpt2']}:{tmp_path / 'past8.npz'}",
                     "--case", f"{models['gpt2']}:{tmp_path / 'past0.npz'}", "--json"])
    data = json.loads(out.getvalue())
    assert code == 0 and data["passed"] and [c["input"] for c in data["cases"]] == [
        str(tmp_path / "past8.npz"), str(tmp_path / "past0.npz")]
    assert main(["fix", "--golden", str(models["gpt2"]), "--case", str(tmp_path / "missing.onnx")]) == 2
    assert main(["fix", "--golden", str(models["gpt2"]), "--case", f"{models['gpt2']}:{tmp_path / 'no.npz'}"]) == 2


def test_parse_case_splits_the_input_off_only_when_it_is_an_array_file():
    from pathlib import Path

    from ascendpipe.fix.cases import parse_case

    assert parse_case("dec.onnx:past8.npz") == (Path("dec.onnx"), Path("past8.npz"))
    assert parse_case("dir:with:colons/dec.onnx") == (Path("dir:with:colons/dec.onnx"), None)
    assert parse_case("a:b/dec.onnx:x.npy") == (Path("a:b/dec.onnx"), Path("x.npy"))
