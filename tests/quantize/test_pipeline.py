"""The quantize stage through the engine: the classify example in int8, a layer made sensitive on
purpose found by compare and by ``fix --quantize``, the standalone command."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.quantize.workspace import LAYERS, SENSITIVE, make_workspace
from tests.train_threads import train_threads

REPO = Path(__file__).resolve().parents[2]
BUILD = "build/classify"  # pipelines/classify.yaml's build_dir


def _json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="module")
def classify(tmp_path_factory):
    import ascendpipe

    ws = tmp_path_factory.mktemp("classify")
    shutil.copytree(REPO / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        record = ascendpipe.build(str(ws / "pipelines/classify.yaml"), ["eval_int8", "compare_int8"], set=train_threads(),
                                  quiet=True)
    return ws, record


# How far the trained weights, and so these Top-1 figures, move with the machine (bench/classify_spread.py,
# 2026-12-07: 5 seeds x 2 training threads x 3 torch instruction sets, 30 trainings; torch's kernels per
# instruction set and thread count stand in for other CPUs): golden Top-1 0.601..0.888 (seed 0, the
# pipeline's, 0.835..0.865; issue 50's CPU 0.846), int8 - golden -0.0167..+0.0100 with a standard deviation
# of 0.0057 (issue 50's CPU -0.0100, which a one-point bound failed). The bounds hold every measured run:
# 0.025 is about four standard deviations (15 of the 599 images); a broken quantizer loses tens of points.
INT8_TOP1_BOUND = 0.025
GOLDEN_TOP1_FLOOR = 0.5  # a trained model (chance is 0.1); the worst measured training reached 0.601


def test_classify_int8_keeps_top1_within_the_measured_spread_with_the_default_calibration(classify):
    ws, record = classify
    golden = _json(ws / BUILD / "eval_golden/metrics.json")["top1"]
    int8 = _json(ws / BUILD / "eval_int8/metrics.json")
    assert golden > GOLDEN_TOP1_FLOOR
    assert abs(int8["top1"] - golden) <= INT8_TOP1_BOUND
    assert int8["delta_top1"] == pytest.approx(int8["top1"] - golden)


def test_classify_record_names_data_hash_layers_and_scales(classify):
    ws, record = classify
    q = _json(ws / BUILD / "quantize/quantize.json")
    images = np.load(ws / "data/classify/train/images.npy")[:16]  # batch_num 1 x batch_size 16
    digest = hashlib.sha256(f"image|{images.dtype.str}|{list(images.shape)}\n".encode() + images.tobytes()).hexdigest()
    assert q["calibration"] == {"source": str(ws / "data/classify/train/images.npy"), "sha256": digest, "batches": 1,
                                "batch_size": 16, "samples": 16}
    assert q["calibration_method"] == "MinMax" and q["backend"] == "onnxruntime"
    assert q["quantized_layers"] == ["/0/Conv", "/3/Conv", "/6/Conv", "/11/Gemm"] and q["skipped_layers"] == []
    scales = _json(ws / BUILD / "quantize/scales.json")["tensors"]
    assert scales["image"]["dtype"] == "int8" and scales["image"]["scale"][0] > 0
    weights = [t for t in scales.values() if t["axis"] == 0 and t["dtype"] == "int8"]
    assert len(weights) == 4  # each layer's weights, one scale per output channel (channel_wise)
    assert all(z == [0] * len(z) for z in (t["zero_point"] for t in weights))  # weights symmetric
    assert (ws / BUILD / "quantize/deploy/model.onnx").is_file()
    assert "batch_num : 1" in (ws / BUILD / "quantize/quant.cfg").read_text()
    stage = record["stages"]["quantize"]
    assert stage["metrics"]["quantized_layers"] == 4 and stage["info"]["calibration_sha256"] == digest


def test_classify_compare_pairs_every_original_op_and_ranks_the_layers(classify):
    ws, _ = classify
    result = _json(ws / BUILD / "compare_int8/result.json")
    rows = [r for r in result["rows"] if r["side"] == "both"]
    assert len(rows) == 9 and not [r for r in result["rows"] if r["side"] != "both"]  # Q/DQ tensors skipped
    assert all(r["cosine"] > 0.999 for r in rows)
    ranked = [r["layer"] for r in result["quantization"]["layers"]]
    assert sorted(ranked) == sorted(["/0/Conv", "/3/Conv", "/6/Conv", "/11/Gemm"])


@pytest.fixture(scope="module")
def sensitive(tmp_path_factory):
    import ascendpipe
    from ascendpipe.fix.run import fix_quantize

    ws = tmp_path_factory.mktemp("sensitive")
    pipeline = make_workspace(ws)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        first = ascendpipe.build(str(pipeline), quiet=True)
        compared = _json(ws / "build/compare_int8/result.json")
        report = fix_quantize(str(pipeline))  # metric and tolerance from the stage's `auto`
        again = fix_quantize(str(pipeline))
        runs = ascendpipe.runs()
        again_grow = ascendpipe.show(str(again.summary["runs"][1]))
    return {"ws": ws, "first": first, "compared": compared, "report": report, "again": again, "runs": runs,
            "again_grow": again_grow}


def test_the_sensitive_layer_breaks_int8_and_compare_names_it(sensitive):
    first, compared = sensitive["first"], sensitive["compared"]
    assert first["stages"]["eval_int8"]["metrics"]["delta_top1"] < -0.05
    q = compared["quantization"]
    assert q["layers"][0]["layer"] == SENSITIVE and q["layers"][0]["local_loss"] > 0.5
    assert all(r["local_loss"] < 0.01 for r in q["layers"][1:])
    assert q["advice"]["added"] == [SENSITIVE]
    assert compared["first_failure"]["kind"] == "quantization"
    assert compared["first_failure"]["advice"][0]["set"] == f"--set 'stages.quantize.params.skip_layers=[{SENSITIVE}]'"


def test_fix_quantize_keeps_only_the_sensitive_layer_in_float(sensitive):
    report = sensitive["report"]
    assert report.outcome.passed and report.outcome.minimal
    assert report.skip_layers == [SENSITIVE]
    phases = [(a.phase, [c.name for c in a.remedy], a.result.passed) for a in report.outcome.attempts]
    assert phases == [("baseline", [], False), ("grow", [SENSITIVE], True)]
    assert report.summary["set"] == [f'stages.quantize.params.skip_layers=["{SENSITIVE}"]']
    assert report.summary["metric"] >= report.summary["golden_metric"] - 0.02
    assert "layers kept in float: conv2" in report.text()


def test_each_attempt_is_a_recorded_cached_build(sensitive):
    report, again, runs = sensitive["report"], sensitive["again"], sensitive["runs"]
    ids = report.summary["runs"]
    assert len(ids) == 2 and len(set(ids)) == 2
    recorded = {r["id"] for r in runs}
    assert set(ids) <= recorded and set(again.summary["runs"]) <= recorded
    # the same search again: every attempt's settings were built before, so the quantize stage is restored
    second_attempt = sensitive["again_grow"]
    assert second_attempt["stages"]["quantize"]["state"] in ("restored", "fresh")
    assert second_attempt["stages"]["quantize"]["params"]["skip_layers"] == [SENSITIVE]


def test_standalone_command_and_its_errors(tmp_path, capsys):
    from ascendpipe.cli.main import main

    ws = tmp_path
    make_workspace(ws)
    out = ws / "q"
    code = main(["quantize", "--model", str(ws / "models/sensitive.onnx"), "--calibration", str(ws / "data/calib"),
                 "--output", str(out), "--skip-layers", SENSITIVE, "--batch-size", "32", "--activation-offset", "false"])
    assert code == 0
    record = _json(out / "quantize.json")
    assert record["skipped_layers"] == [SENSITIVE] and record["skip_reasons"] == {SENSITIVE: "skip_layers"}
    assert record["quantized_layers"] == [x for x in LAYERS if x != SENSITIVE]
    assert record["activation_symmetric"] is True and record["calibration"]["samples"] == 32
    assert 'skip_layers : "conv2"' in (out / "quant.cfg").read_text()
    zero_points = [t["zero_point"] for t in _json(out / "scales.json")["tensors"].values()]
    assert all(z == [0] * len(z) for z in zero_points)  # symmetric: no offsets
    capsys.readouterr()
    code = main(["quantize", "--model", str(ws / "models/sensitive.onnx"), "--calibration", str(ws / "data/calib"),
                 "--output", str(out), "--batch-num", "5", "--batch-size", "16"])
    err = capsys.readouterr().err
    assert code == 2 and "holds 64 samples; batch_num 5 x batch_size 16 needs 80" in err and len(err.splitlines()) == 1
    assert _json(out / "quantize.json")["skipped_layers"] == [SENSITIVE]  # the earlier output is kept


def test_a_fixed_batch_model_calibrates_in_its_own_batch(tmp_path, capsys):
    from ascendpipe.cli.main import main
    from tests.backends.ascend.conftest import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny.onnx", batch=2)  # x[2,3,8,8]
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).standard_normal((6, 3, 8, 8)).astype(np.float32))
    args = ["quantize", "--model", str(model), "--calibration", str(tmp_path / "calib.npy"), "--output", str(tmp_path / "q")]
    assert main(args + ["--batch-num", "3"]) == 0
    record = _json(tmp_path / "q/quantize.json")
    assert record["calibration"]["batch_size"] == 2 and record["calibration"]["samples"] == 6
    assert record["layers"] == ["conv1", "conv2", "fc"] and record["quantized_layers"] == ["conv1", "conv2", "fc"]
    capsys.readouterr()
    assert main(args + ["--batch-size", "4"]) == 2
    assert "batch dim is fixed at 2" in capsys.readouterr().err


def test_per_layer_channel_wise_follows_amct_precedence(tmp_path):
    from ascendpipe.cli.main import main

    make_workspace(tmp_path, sensitive=False)
    (tmp_path / "quant.cfg").write_text(
        'common_config : { arq_quantize : { channel_wise : true } }\n'
        'override_layer_types : { layer_type : "Gemm" calibration_config : { arq_quantize : { channel_wise : false } } }\n'
        'override_layer_configs : { layer_name : "conv2" calibration_config : { arq_quantize : { channel_wise : false } } }\n')
    out = tmp_path / "q"
    assert main(["quantize", "--model", str(tmp_path / "models/sensitive.onnx"), "--calibration",
                 str(tmp_path / "data/calib"), "--output", str(out), "--calibration-config", str(tmp_path / "quant.cfg")]) == 0
    record = _json(out / "quantize.json")
    assert record["per_channel_weights"] == ["w1", "w3"]  # conv2 by name, fc by type: per tensor
    scales = _json(out / "scales.json")["tensors"]
    by_weight = {t["node"].removesuffix("_DequantizeLinear"): len(t["scale"]) for t in scales.values()}
    assert by_weight["w1"] == 8 and by_weight["w3"] == 8 and by_weight["w2"] == 1 and by_weight["wf"] == 1
