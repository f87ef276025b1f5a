"""The pass/fail decision against near-zero elements, overflow first, and every batch compared."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from ascendpipe.compare import metrics as M
from ascendpipe.compare import order, thresholds as thr, writers
from ascendpipe.compare.runner import compare_dumps
from ascendpipe.backends.compare_sources import run_compare
from tests import modelzoo as mz
from tests.compare.dumps import write_dump


def _mostly_exact(n=10_000, near_zero=30, error=None, seed=0):
    """A tensor of scale ~100 whose target is exact but for ``near_zero`` golden elements of 1e-4."""
    rng = np.random.default_rng(seed)
    golden = (rng.standard_normal(n) * 100).astype(np.float32)
    picked = rng.choice(n, near_zero, replace=False)
    golden[picked] = 1e-4
    target = golden.copy()
    target[picked] = 2e-4 if error is None else 1e-4 + error  # off by 100%, or by an absolute error
    return golden, target


def test_a_few_near_zero_elements_off_by_100_percent_do_not_fail():
    golden, target = _mostly_exact(near_zero=10)  # 99.9% exact
    m = M.tensor_metrics(golden, target)
    assert m["max_rel_error"] == pytest.approx(1.0)
    assert thr.violations(m, thr.resolve()) == []


def test_near_zero_elements_cannot_trip_the_decision_where_msits_mean_relative_error_would():
    # an absolute error of 0.05 is fp16's rounding at this scale (100 * 2^-11): relative error 500 on 1e-4
    golden, target = _mostly_exact(near_zero=30, error=0.05)
    m = M.tensor_metrics(golden, target)
    assert m["mean_rel_error"] == pytest.approx(1.5, rel=1e-3)  # msit's value, > msit's threshold 1.0
    floor = M.SIGNIFICANT_FRACTION * np.sqrt(np.mean(golden.astype(float) ** 2))
    assert m["significant_elements"] == int((np.abs(golden) >= floor).sum()) <= golden.size - 30
    assert m["significant_mean_rel_error"] == 0.0
    assert m["cosine"] > 0.999999 and thr.violations(m, thr.resolve()) == []


def test_tiny_identical_tensors_pass_though_msits_cosine_floors_their_norms():
    tiny = np.array([3e-10, 4e-10, 0.0], np.float32)  # norm 5e-10, below torch's 1e-8 floor
    m = M.tensor_metrics(tiny, tiny.copy())
    assert m["cosine"] == pytest.approx(0.0025, rel=1e-4) and m["exact_cosine"] == pytest.approx(1.0)
    assert thr.violations(m, thr.resolve()) == []
    assert thr.violations(M.tensor_metrics(tiny, -tiny), thr.resolve())[0].startswith("CosineSimilarity -1 <")


def test_the_decision_still_fails_when_significant_elements_are_off(tmp_path):
    rng = np.random.default_rng(1)
    golden = (rng.standard_normal(1000) * 100).astype(np.float32)
    target = golden.copy()
    target[::2] = 0.0  # half the elements lost: relative error 1 on each, 0.5 on average...
    target[1::4] *= 4  # ...and a quarter 3x too big: 0.5 + 0.75 = 1.25 > 1
    m = M.tensor_metrics(golden, target)
    assert m["significant_mean_rel_error"] == pytest.approx(1.25, rel=0.02)
    assert any(r.startswith("MeanRelativeError") for r in thr.violations(m, thr.resolve()))


def test_the_csv_keeps_msits_value_and_our_decision(tmp_path):
    golden, target = _mostly_exact(near_zero=30, error=0.05)
    g = write_dump(tmp_path / "g", [("y", "square", "Mul", golden)])
    t = write_dump(tmp_path / "t", [("y", "square", "Mul", target)])
    result = compare_dumps(g, t)
    row = result["rows"][0]
    assert not row["failed"] and result["first_failure"] is None
    assert row["mean_rel_error"] == pytest.approx(1.5, rel=1e-3) and row["significant_mean_rel_error"] == 0.0
    line = dict(zip(writers.CSV_HEADER, list(csv.reader(io.StringIO(writers.csv_text(result))))[1]))
    # msit's IsPrecisionError reads msaccucmp's MeanRelativeError (> 1.0: YES); our decision (Failed) does not
    assert float(line["MeanRelativeError"]) == pytest.approx(1.5, rel=1e-3) and line["IsPrecisionError"] == "YES"
    assert line["Failed"] == "NO"


def _chain_dumps(tmp_path):
    """x -> a (loses accuracy: cosine ~0.7) -> b (sum, golden 1e5: the target overflows) -> c (reads b)."""
    x = np.linspace(1, 2, 64, dtype=np.float32)
    a = x * 1000
    a_bad = (a * (1 + 0.8 * np.sin(np.arange(64)))).astype(np.float16)
    b = np.array([a.sum()], np.float32)
    golden = write_dump(tmp_path / "g", [("x", "x", "Input", x), ("a", "a", "Mul", a), ("b", "b", "ReduceSum", b),
                                         ("c", "c", "Sqrt", np.sqrt(b))])
    target = write_dump(tmp_path / "t", [("x", "x", "Input", x), ("a", "a", "Mul", a_bad),
                                         ("b", "b", "ReduceSum", np.array([np.inf], np.float16)),
                                         ("c", "c", "Sqrt", np.array([np.inf], np.float16))])
    return golden, target


def test_an_overflow_of_the_ops_own_values_comes_before_an_upstream_loss(tmp_path):
    golden, target = _chain_dumps(tmp_path)
    result = compare_dumps(golden, target, strategy="all")
    by_op = {r["op_name"]: r for r in result["rows"]}
    assert by_op["a"]["failed"] and by_op["a"]["overflow"] is None  # the loss comes first in graph order...
    assert result["first_failure"]["op_name"] == "b" and result["first_failure"]["kind"] == "overflow"
    assert [f["op_name"] for f in result["failures"]] == ["b", "a", "c"]  # ...the overflow origin is named first
    assert compare_dumps(golden, target)["first_failure"]["op_name"] == "b"  # first-overall too


def test_overflow_origins_need_the_golden_beyond_fp16_and_no_overflowing_input():
    rows = [
        {"op_name": "loss", "failed": True, "overflow": None, "golden_abs_max": 10.0},
        {"op_name": "div0", "failed": True, "overflow": "target", "golden_abs_max": 3.0},  # x/0: its input's fault
        {"op_name": "sum", "failed": True, "overflow": "target", "golden_abs_max": 3e5},
        {"op_name": "sqrt", "failed": True, "overflow": "target", "golden_abs_max": 550.0},
    ]
    producers = {"div0": ["loss"], "sum": ["loss"], "sqrt": ["sum"]}
    assert order.overflow_origins(rows, producers) == [2]
    # in range, but its inputs pass: an fp16 intermediate inside the op overflowed, the op's own fault
    assert order.overflow_origins(rows, {"div0": [], "sum": ["loss"], "sqrt": ["sum"]}) == [1, 2]
    assert order.select_failures(rows, "first-overall", producers=producers) == [2]
    assert order.select_failures(rows, "all", producers=producers) == [2, 0, 1, 3]
    no_overflow = [dict(r, overflow=None) for r in rows]
    assert order.select_failures(no_overflow, "first-overall") == [0]


def _batch_dir(tmp_path):
    """Three batches for the l2norm model: two in fp16's range, the last (values ~700) overflows."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    np.save(folder / "a.npy", rng.uniform(0.5, 1.5, (2, 256)).astype(np.float32))
    np.save(folder / "b.npy", rng.uniform(0.5, 1.5, (3, 256)).astype(np.float32))
    np.save(folder / "c.npy", mz.l2norm_inputs(batch=2)["features"])
    return folder


def test_every_batch_is_compared_and_each_op_shows_its_worst(tmp_path):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    model = mz.l2norm_model(tmp_path / "l2norm.onnx")
    convert_model(model, tmp_path / "conv", ConvertSettings(precision_mode="force_fp16"))
    result, note = run_compare(model, tmp_path / "conv", input_path=_batch_dir(tmp_path), work_dir=tmp_path / "w",
                               limits=thr.resolve())
    assert "3 batches" in note and result["summary"]["batches"] == 3
    assert all((tmp_path / "w" / name / "index.json").is_file() for name in ("target_dump", "target_dump_b1", "target_dump_b2"))
    first = result["first_failure"]
    # square, sum and sqrt (one fused kernel, named after the sum) overflow on the third batch only
    assert first["op_name"] == "sum" and first["kind"] == "overflow"
    assert (first["batch"], first["failed_batches"], first["batches"]) == (2, 1, 3)
    fused = result["rows"][first["index"]]
    assert "square" in fused["golden_ops"] and fused["batch"] == 2
    square = next(r for r in result["rows"] if r["op_name"] == "square")  # golden-only: fused away
    assert square["side"] == "golden_only" and square["golden_abs_max"] > 65504  # the peak of all batches
    doc = json.loads(writers.json_text(result, note))
    assert {"batch", "batches", "failed_batches"} <= set(doc["rows"][0]) and doc["first_failure"]["batch"] == 2
    lines = list(csv.DictReader(io.StringIO(writers.csv_text(result))))
    assert next(r for r in lines if r["NPUDump"] == "sum")["WorstBatch"] == "2"
    assert "fails on 1 of 3 batches" in writers.terminal_text(result)
    html = writers.write_results(result, tmp_path / "out", note)["html"].read_text()
    assert "worst in batch 2; fails on 1 of 3 batches" in html
    # the first two batches alone pass: the worst batch is what failed
    only_first, _ = run_compare(model, tmp_path / "conv", input_path=tmp_path / "inputs" / "a.npy",
                                work_dir=tmp_path / "w1", limits=thr.resolve())
    assert only_first["first_failure"] is None and only_first["summary"]["batches"] == 1
