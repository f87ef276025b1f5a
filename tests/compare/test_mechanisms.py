"""compare names the failure that matters (issue 30): the first op whose divergence reaches a failing
output, its mechanism, and what to do; ops beyond thresholds that do not reach an output are listed
apart (contained). Each model's facts are checked independently: both models run on onnxruntime and
the outputs compared with numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.compare import mechanism_models as mm
from tests.compare.dumps import write_dump


def _run(model_path, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _convert(model, out, **params):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    return convert_model(model, out, resolve({"precision_mode": "force_fp16", **params})).model_path


def _compare(tmp_path, build, inputs, thresholds=None, **params):
    from ascendpipe.compare import thresholds as thr
    from ascendpipe.backends.compare_sources import run_compare

    model = build(tmp_path / "m.onnx")
    feeds = inputs(0)
    np.savez(tmp_path / "x.npz", **feeds)
    converted = _convert(model, tmp_path / "conv", **params)
    result, _ = run_compare(model, converted.parent, input_path=tmp_path / "x.npz", work_dir=tmp_path / "work",
                            limits=thr.resolve(thresholds))
    return model, feeds, converted, result


def _row(result, op):
    return next(r for r in result["rows"] if r["op_name"] == op)


def test_log_of_a_flushed_epsilon_is_an_underflow_and_the_advice_keeps_add_and_log(tmp_path):
    from ascendpipe.compare.writers import contract, terminal_text

    model, feeds, converted, result = _compare(tmp_path, mm.log_eps_model, mm.log_eps_inputs)
    # the facts, in numpy: fp16 flushes the epsilon and the small squares to 0, Log(0) is -inf
    power = feeds["x"].astype(np.float64) ** 2
    assert np.float16(mm.EPS) == 0 and (power.astype(np.float16) == 0).mean() > 0.3
    assert np.isinf(_run(converted, feeds)[0]).any() and np.isfinite(_run(model, feeds)[0]).all()
    first = result["first_failure"]
    assert (first["op_name"], first["mechanism"], first["kind"]) == ("log", "underflow", "underflow")
    assert "overflow" not in first["reason"] and "underflow" in first["reason"]
    assert first["advice"][0]["ops"] == ["add_eps", "log"]
    assert "raise the epsilon" in first["advice"][0]["message"]
    assert _row(result, "add_eps")["flushed"] > 0
    # the inf carried to the output is the underflow's too: no op overflows
    assert result["summary"]["overflow_ops"] == 0
    assert {_row(result, op)["mechanism"] for op in ("pad", "proj")} == {"underflow"}
    text = terminal_text(result)
    assert text.splitlines()[0].startswith("outputs fail: first failure reaching them #4 log (Log), underflow")
    assert contract(result)["first_failure"]["mechanism"] == "underflow"


def test_an_additive_attention_mask_is_contained_and_the_output_passes(tmp_path):
    from ascendpipe.compare.writers import contract, terminal_text, write_results

    model, feeds, converted, result = _compare(tmp_path, mm.attention_mask_model, mm.attention_mask_inputs)
    assert _cosine(_run(converted, feeds)[0], _run(model, feeds)[0]) > 0.999  # the output is fine
    assert result["first_failure"] is None and result["failures"] == []
    assert result["verdict"].startswith("every output passes")
    contained = {c["op_name"]: c for c in result["contained"]}
    assert set(contained) == {"mask_bias", "add_mask"}
    assert all(c["mechanism"] == "saturated_mask" and "'softmax' (Softmax) absorbs it" in c["why"]
               for c in contained.values())
    assert result["summary"]["overflow_ops"] == 0 and result["summary"]["outputs_pass"] is True
    assert result["first_divergence"]["op_name"] == "mask_bias"
    assert result["first_divergence"]["reaches_output"] is False
    doc = contract(result)
    assert "first_failure" in doc and doc["first_failure"] is None and len(doc["contained"]) == 2
    lines = terminal_text(result).splitlines()
    assert lines[0].startswith("every output passes")
    assert not any(line.startswith("first failure") for line in lines)
    written = write_results(result, tmp_path / "out")
    saved = json.loads(written["json"].read_text())
    assert saved["first_failure"] is None and saved["verdict"] == result["verdict"]
    assert "Contained" in written["html"].read_text() and "No failure reaches an output" in written["html"].read_text()


def test_a_qdq_matmul_within_one_quantisation_step_is_no_failure(tmp_path):
    scale = 0.25

    def build(path):
        return mm.qdq_matmul_model(path, rows=64, y_scale=scale)

    # a threshold the requantised output exceeds: it differs from the golden by whole steps where a value flips
    model, feeds, converted, result = _compare(tmp_path, build, lambda seed: mm.qdq_matmul_inputs(seed, rows=64),
                                               thresholds={"relative_euclidean": 0.005})
    target, golden = _run(converted, feeds)[0], _run(model, feeds)[0]
    error = np.abs(target.astype(np.float64) - golden)
    assert 0 < error.max() <= scale * (1 + 1e-3)  # in numpy: some values flip, by one step at most
    row = _row(result, "y_dequant")
    assert row["reasons"] and not row["failed"]  # beyond the threshold, within its step
    assert row["mechanism"] == "quantisation" and row["quant_step"] == pytest.approx(scale)
    assert "quantisation step" in row["contained"]
    assert result["first_failure"] is None and result["verdict"].startswith("every output passes")


def test_msit_columns_are_untouched_by_the_judgement(tmp_path):
    from ascendpipe.compare.writers import csv_text

    _, _, _, result = _compare(tmp_path, mm.attention_mask_model, mm.attention_mask_inputs)
    import csv
    import io

    header, *lines = list(csv.reader(io.StringIO(csv_text(result))))
    by_op = {line[2]: dict(zip(header, line)) for line in lines}
    assert by_op["mask_bias"]["Failed"] == "YES"  # our decision still reads the thresholds
    assert by_op["softmax"]["IsPrecisionError"] == "NO"


def test_empty_tensors_are_not_compared_and_never_count_as_cosine_0(tmp_path):
    from ascendpipe.compare.runner import compare_dumps
    from ascendpipe.compare.writers import contract, terminal_text

    x = np.linspace(-1, 1, 16, dtype=np.float32)
    empty = np.zeros((0,), np.int64)
    golden = write_dump(tmp_path / "g", [("a", "mul", "Mul", x * 2), ("s", "slice", "Slice", empty),
                                         ("e", "slice2", "Slice", np.zeros((0, 4), np.float32)),
                                         ("y", "add", "Add", x * 2 + 1)])
    target = write_dump(tmp_path / "t", [("a", "mul", "Mul", (x * 2).astype(np.float16)), ("s", "slice", "Slice", empty),
                                         ("e", "slice2", "Slice", np.zeros((0, 4), np.float16)),
                                         ("y", "add", "Add", (x * 2 + 1).astype(np.float16))])
    graph = {"outputs": ["y", "e"], "output_ops": ["add", "slice2"],
             "producers": {"mul": [], "slice": [], "slice2": ["mul"], "add": ["mul"]}}
    result = compare_dumps(golden, target, graph=graph)
    rows = {r["op_name"]: r for r in result["rows"]}
    assert rows["slice"]["empty"] and rows["slice2"]["empty"] and "not compared (empty)" in rows["slice"]["note"]
    assert not rows["slice"]["failed"] and not rows["slice2"]["failed"]
    summary = result["summary"]
    assert summary["empty_tensors"] == 2
    assert summary["min_cosine"] > 0.999 and summary["output_cosine"] > 0.999
    assert summary["min_cosine"] == min(r["exact_cosine"] for r in result["rows"] if not r.get("empty"))
    assert "not compared (empty)" in terminal_text(result)
    assert contract(result)["summary"]["min_cosine"] == summary["min_cosine"]


def _dump_pair(tmp_path, rows):
    golden = write_dump(tmp_path / "g", [(n, op, t, g) for n, op, t, g, _ in rows])
    target = write_dump(tmp_path / "t", [(n, op, t, tg) for n, op, t, _, tg in rows])
    return golden, target


def test_a_failure_that_a_passing_op_absorbs_is_contained_and_the_one_reaching_the_output_is_first(tmp_path):
    from ascendpipe.compare.runner import compare_dumps

    rng = np.random.default_rng(0)
    x = rng.standard_normal(64).astype(np.float32)
    bad = x + rng.standard_normal(64).astype(np.float32)  # far off: fails
    rows = [("a", "a", "Mul", x, bad),  # fails, then b (passes) absorbs it: contained
            ("b", "b", "ReduceMax", np.float32([1.0]), np.float32([1.0])),
            ("c", "c", "Relu", x, x),
            ("d", "d", "Mul", x * 3, bad * 3),  # fails and reaches the failing output through e
            ("e", "e", "Add", x * 3 + 1, bad * 3 + 1)]
    golden, target = _dump_pair(tmp_path, rows)
    graph = {"outputs": ["e"], "output_ops": ["e"],
             "producers": {"a": [], "b": ["a"], "c": [], "d": ["c"], "e": ["d", "b"]}}
    result = compare_dumps(golden, target, graph=graph)
    assert result["first_failure"]["op_name"] == "d"
    assert result["first_divergence"]["op_name"] == "a" and result["first_divergence"]["reaches_output"] is False
    assert [c["op_name"] for c in result["contained"]] == ["a"]
    assert "'b' (ReduceMax) downstream passes" in result["contained"][0]["why"]
    assert result["verdict"].startswith("outputs fail: first failure reaching them #3 d")


def test_cancellation_is_named_and_the_advice_keeps_the_operands(tmp_path):
    from ascendpipe.compare.runner import compare_dumps

    rng = np.random.default_rng(1)
    a = (1000 + rng.standard_normal(64)).astype(np.float32)
    b = (a - rng.standard_normal(64) * 0.1).astype(np.float32)
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    diff16 = (a16.astype(np.float32) - b16.astype(np.float32)).astype(np.float16)
    rows = [("a", "pa", "Mul", a, a16), ("b", "pb", "Mul", b, b16), ("d", "sub", "Sub", a - b, diff16)]
    golden, target = _dump_pair(tmp_path, rows)
    graph = {"outputs": ["d"], "output_ops": ["sub"], "producers": {"pa": [], "pb": [], "sub": ["pa", "pb"]}}
    result = compare_dumps(golden, target, graph=graph)
    first = result["first_failure"]
    assert (first["op_name"], first["mechanism"]) == ("sub", "cancellation")
    assert first["advice"][0]["ops"] == ["pa", "pb", "sub"]
