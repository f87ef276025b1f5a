import io
import json

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.infer import Progress, infer_model
from ascendpipe.profiling.stats import latency_stats, throughput
from ascendpipe.backends.onnxruntime.session import input_specs, make_session
from ascendpipe.errors import UserError
from ascendpipe.inputs import load_inputs

from tests.modelzoo import linear_model, linear_reference


def test_latency_stats_against_hand_computed_values():
    stats = latency_stats([4.0, 1.0, 3.0, 2.0], batch_size=8)
    assert {k: stats[k] for k in ("min", "max", "mean", "median", "count")} == {
        "min": 1.0, "max": 4.0, "mean": 2.5, "median": 2.5, "count": 4}
    assert stats["p99"] == pytest.approx(3.97)
    assert stats["throughput"] == throughput(8, 2.5) == 3200.0
    assert throughput(8, 0.0) == 0.0


def test_outputs_match_numpy_and_padding_is_dropped(tmp_path):
    path, w, b = linear_model(tmp_path / "m.onnx", batch=4)
    x = np.random.default_rng(5).standard_normal((10, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    batches = load_inputs(tmp_path / "x.npy", input_specs(make_session(path)))
    summary = infer_model(path, batches, tmp_path / "out", warmup=1, loops=3, progress=False)
    y_ref, s_ref = linear_reference(x, w, b)
    np.testing.assert_allclose(np.load(tmp_path / "out/outputs/y.npy"), y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "out/outputs/head_score.npy"), s_ref, rtol=1e-5, atol=1e-6)
    assert summary["outputs"]["head/score"] == {"file": "outputs/head_score.npy", "shape": [10], "dtype": "float32"}
    assert (summary["batch_size"], summary["batches"], summary["samples"]) == (4, 3, 10)


def test_summary_has_ais_bench_keys_and_consistent_numbers(tmp_path):
    path, _, _ = linear_model(tmp_path / "m.onnx")
    batches = [{"x": np.ones((2, 3), np.float32)} for _ in range(3)]
    infer_model(path, batches, tmp_path / "out", loops=2, progress=False)
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    for key in ("filesinfo", "args", "NPU_compute_time", "H2D_latency", "D2H_latency", "throughput",
                "npu_compute_time_list", "pid"):
        assert key in summary
    times = summary["npu_compute_time_list"]
    assert len(times) == 6 == summary["NPU_compute_time"]["count"]
    assert summary["NPU_compute_time"]["mean"] == pytest.approx(np.mean(times))
    assert summary["latency_ms"]["p99"] == pytest.approx(np.percentile(times, 99))
    assert summary["NPU_compute_time"]["percentile(99%)"] == summary["latency_ms"]["p99"]
    assert summary["throughput"] == pytest.approx(1000 * 2 / np.mean(times))


def test_output_names_select_outputs(tmp_path):
    path, _, _ = linear_model(tmp_path / "m.onnx")
    infer_model(path, [{"x": np.ones((1, 3), np.float32)}], tmp_path / "out", output_names=["y"], progress=False)
    assert sorted(p.name for p in (tmp_path / "out/outputs").iterdir()) == ["y.npy"]
    with pytest.raises(UserError, match="unknown output names nope"):
        infer_model(path, [{"x": np.ones((1, 3), np.float32)}], tmp_path / "o2", output_names=["nope"])


def test_wrong_feed_dtype_shows_expected_and_given(tmp_path):
    path, _, _ = linear_model(tmp_path / "m.onnx")
    with pytest.raises(UserError) as err:
        infer_model(path, [{"x": np.ones((2, 3), np.int32)}], tmp_path / "out")
    assert err.value.message == "input 'x': expected float32 [N,3], given int32 [2,3]"


def test_progress_logs_every_tenth_to_a_plain_stream():
    stream = io.StringIO()
    bar = Progress(20, stream, label="infer")
    for done in range(1, 21):
        bar.update(done)
    lines = stream.getvalue().splitlines()
    # the first batch reports the start (0%), then one line per tenth
    assert [line.split("(")[1].split(")")[0] for line in lines] == [f"{p}%" for p in range(0, 101, 10)]
    assert lines[-1].startswith("infer: 20/20 batches (100%)")
