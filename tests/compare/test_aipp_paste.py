"""The AIPP check (first row), matrix-aware paste lines applied for real, and the overflow chain e2e."""

import shlex
import subprocess
import sys

import numpy as np
import pytest

from ascendpipe.compare import aipp_check, paste
from ascendpipe.backends.compare_sources import run_compare
from ascendpipe.compare.thresholds import resolve
from ascendpipe.precision import aipp
from tests import modelzoo as mz

RGB = {"aipp_mode": "static", "input_format": "RGB888_U8", "src_image_size_w": 16, "src_image_size_h": 16,
       "mean_chn_0": 124, "mean_chn_1": 116, "mean_chn_2": 104, "min_chn_0": 0.0, "min_chn_1": 0.0, "min_chn_2": 0.0,
       "var_reci_chn_0": 0.0171247538, "var_reci_chn_1": 0.0175070028, "var_reci_chn_2": 0.0174291939}
TRAIN_MEAN = np.array([0.485, 0.456, 0.406]) * 255  # ImageNet mean/std on 0..255: 123.675, 116.28, 103.53
TRAIN_STD = np.array([0.229, 0.224, 0.225]) * 255


def _u8(seed=0, n=2, size=16):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _train_preprocess(u8):
    """torchvision-style Normalize on 0..255 RGB, NHWC -> NCHW, float32: computed here without aipp.py."""
    return ((u8.astype(np.float64) - TRAIN_MEAN) / TRAIN_STD).transpose(0, 3, 1, 2).astype(np.float32)


def test_right_aipp_passes_within_half_an_int_mean_step():
    spec = aipp.aipp_spec(RGB, (3, 16, 16))
    u8 = _u8()
    row = aipp_check.check_row(spec, 0, "image", u8, _train_preprocess(u8), blocks=[RGB], stage="convert")
    # int means 124/116/104 vs 123.675/116.28/103.53: worst error 0.47 * 0.01743 = 0.0082 on channel 2
    assert row["failed"] is False and row["max_abs_error"] == pytest.approx(0.47 / TRAIN_STD[2], rel=1e-3)
    assert row["max_abs_error"] < aipp_check.tolerance(spec, _train_preprocess(u8))


def test_wrong_mean_fails_and_least_squares_recovers_mean_and_var_reci_per_channel():
    wrong = dict(RGB, mean_chn_1=0, var_reci_chn_2=0.01)
    spec = aipp.aipp_spec(wrong, (3, 16, 16))
    u8 = _u8(1)
    golden = _train_preprocess(u8)
    row = aipp_check.check_row(spec, 0, "image", u8, golden, blocks=[wrong], stage="convert@wrong_mean")
    assert row["failed"] and row["op_name"] == "aipp" and row["op_type"] == "Aipp"
    item = row["advice_ready"][0]
    fitted = [(c["mean"], c["var_reci"]) for c in item["channels"]]
    assert [m for m, _ in fitted] == [int(round(m)) for m in TRAIN_MEAN]  # 124, 116, 104
    for (_, v), std in zip(fitted, TRAIN_STD):
        assert v == pytest.approx(1.0 / std, rel=2e-3)
    assert "mean_chn_1: 116" in item["file"]["content"] and item["residual_max_abs_error"] < 0.01
    key, value = shlex.split(item["set"])[1].split("=", 1)
    assert key == "stages.convert.matrix.wrong_mean.aipp"
    import yaml

    assert yaml.safe_load(value)["mean_chn_1"] == 116


def test_swapped_channels_cannot_be_fitted_and_say_so():
    spec = aipp.aipp_spec(RGB, (3, 16, 16))
    u8 = _u8(2)
    golden = _train_preprocess(u8[..., ::-1])  # the training data was BGR
    row = aipp_check.check_row(spec, 0, "image", u8, golden, blocks=[RGB], stage="convert")
    assert row["failed"] and "rbuv_swap_switch" in row["advice_ready"][0]["message"]


def _convert(model, out, **settings):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    convert_model(model, out, ConvertSettings(**settings))
    return out


def test_compare_with_aipp_checks_preprocessing_first(tmp_path):
    model = mz.conv_bn_relu_model(tmp_path / "m.onnx")
    u8 = _u8(3, n=2)
    np.save(tmp_path / "u8.npy", u8)
    np.save(tmp_path / "train.npy", _train_preprocess(u8))
    wrong = dict(RGB, mean_chn_0=0)
    target = _convert(model, tmp_path / "conv", precision_mode="force_fp16", aipp=[wrong])
    result, note = run_compare(model, target, input_path=tmp_path / "u8.npy", work_dir=tmp_path / "w", limits=resolve(),
                               golden_inputs=tmp_path / "train.npy", convert_stage="convert@wrong_mean")
    first = result["first_failure"]
    assert result["rows"][0]["op_name"] == "aipp" and first["index"] == 0 and first["kind"] == "aipp"
    assert first["advice"][0]["channels"][0]["mean"] == 124 and "AIPP checked" in note
    assert [r["index"] for r in result["rows"]] == list(range(len(result["rows"])))

    # without golden_inputs the golden is fed the device's preprocessing: the ops agree, and the note says so
    right = _convert(model, tmp_path / "conv2", precision_mode="force_fp16", aipp=[RGB])
    result, note = run_compare(model, right, input_path=tmp_path / "u8.npy", work_dir=tmp_path / "w2", limits=resolve())
    assert "training preprocessing was not checked" in note
    assert result["rows"][0]["op_name"] != "aipp" and result["first_failure"] is None


def test_l2norm_advice_keeps_square_sum_sqrt_and_applying_it_fixes_the_model(tmp_path):
    model = mz.l2norm_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", **mz.l2norm_inputs())
    run = lambda target, work: run_compare(model, target, input_path=tmp_path / "in.npz", work_dir=tmp_path / work,
                                           limits=resolve())[0]
    result = run(_convert(model, tmp_path / "c0", precision_mode="force_fp16"), "w0")
    keep = result["first_failure"]["advice"][0]["ops"]
    assert keep == ["square", "sum", "sqrt"]
    # the chain is one TbeReduceElemwiseFusionPass kernel whose members keep their own dtypes: no switch proposed
    assert [a["kind"] for a in result["first_failure"]["advice"]] == ["keep_dtype"]
    fixed = run(_convert(model, tmp_path / "c1", precision_mode="force_fp16", keep_dtype=keep), "w1")
    assert fixed["first_failure"] is None and fixed["summary"]["output_cosine"] > 0.999
    # keeping only what overflows in the target (square, sum) moves the overflow to sqrt: the fused op's output
    # (the fused kernel is named after its reduce) still fails
    partial = run(_convert(model, tmp_path / "c2", precision_mode="force_fp16", keep_dtype=keep[:2]), "w2")
    assert partial["first_failure"]["op_name"] == "sum" and partial["summary"]["output_cosine"] < 0.5
    assert partial["first_failure"]["advice"][0]["added"] == ["sqrt"]


PIPELINE = """\
backend: onnxruntime
stages:
  convert:
    kind: convert
    model: m.onnx
    params: {precision_mode: force_fp16}
    matrix:
      fp16: {precision_mode: force_fp16}
      fp32: {precision_mode: force_fp32}
  plain:
    kind: convert
    model: m.onnx
"""


@pytest.mark.parametrize("stage, param, value", [
    ("convert@fp16", ["keep_dtype"], ["/ReduceSum", "/Sqrt"]),
    ("plain", ["keep_dtype"], ["/ReduceSum", "true", "a b", "-x", "1e5"]),
    ("convert@fp16", ["fusion_switch"], {"ConvBNFusion": "off"}),
    ("convert@fp32", ["aipp"], dict(RGB)),
])
def test_emitted_set_lines_are_accepted_and_give_the_value(tmp_path, stage, param, value):
    import ascendpipe

    mz.l2norm_model(tmp_path / "m.onnx")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    line = paste.set_line(stage, param, value)
    argv = shlex.split(line)
    assert argv[0] == "--set" and len(argv) == 2
    expected_key = "stages.convert.matrix.fp16" if stage == "convert@fp16" else (
        "stages.convert.matrix.fp32" if stage == "convert@fp32" else "stages.plain.params")
    assert argv[1].startswith(expected_key + "." + param[0] + "=")
    resolved = ascendpipe.load(str(tmp_path / "p.yaml"), set=[argv[1]]).stages[stage].params
    assert resolved[param[0]] == value
    import yaml

    doc = yaml.safe_load(paste.yaml_lines(stage, {param[0]: value}))
    base, _, variant = stage.partition("@")
    assert (doc["stages"][base]["matrix"][variant] if variant else doc["stages"][base]["params"])[param[0]] == value


def test_status_cli_accepts_the_advised_line(tmp_path):
    mz.l2norm_model(tmp_path / "m.onnx")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    line = paste.set_line("convert@fp16", ["keep_dtype"], ["/ReduceSum", "/Sqrt"])
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "status", "p.yaml", *shlex.split(line)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "convert@fp16" in proc.stdout


@pytest.mark.parametrize("flag", ["--golden-input", "--golden_input"])
def test_cli_golden_input_checks_aipp_first(tmp_path, capsys, flag):
    import argparse
    import json

    from ascendpipe.cli import compare as cli

    model = mz.conv_bn_relu_model(tmp_path / "m.onnx")
    u8 = _u8(4, n=1)
    np.save(tmp_path / "u8.npy", u8)
    np.save(tmp_path / "train.npy", _train_preprocess(u8))
    target = _convert(model, tmp_path / "conv", precision_mode="force_fp16", aipp=[dict(RGB, mean_chn_2=0)])
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--golden", str(model), "--target", str(target), "--input", str(tmp_path / "u8.npy"),
                              flag, str(tmp_path / "train.npy"), "--json"])
    assert cli.main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_failure"]["op_name"] == "aipp" and doc["first_failure"]["advice"][0]["channels"][2]["mean"] == 104
    assert doc["rows"][0]["op_type"] == "Aipp" and "advice_ready" not in doc["rows"][0]


def test_a_failing_preprocessing_row_is_first_under_every_strategy(tmp_path):
    from ascendpipe.compare.runner import compare_dumps
    from tests.compare.dumps import write_dump

    spec = aipp.aipp_spec(dict(RGB, mean_chn_0=0), (3, 16, 16))
    u8 = _u8(5, n=1)
    pre = aipp_check.check_row(spec, 0, "image", u8, _train_preprocess(u8), blocks=[RGB], stage="convert")
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    golden = write_dump(tmp_path / "g", [("y", "mul", "Mul", x * 2), ("z", "add", "Add", x * 2 + 1)])
    target = write_dump(tmp_path / "t", [("y", "mul", "Mul", (x * 2).astype(np.float16)),
                                         ("z", "add", "Add", (x * 2 + 3).astype(np.float16))])
    graph = {"outputs": ["z"], "output_ops": ["add"], "producers": {"mul": [], "add": ["mul"]}}
    for strategy in ("first-overall", "first-per-output", "all"):
        result = compare_dumps(golden, target, strategy=strategy, graph=graph, pre_rows=[pre])
        picked = [f["op_name"] for f in result["failures"]]
        assert picked[0] == "aipp" and result["first_failure"]["kind"] == "aipp"
        assert [r["index"] for r in result["rows"]] == [0, 1, 2]
        assert picked == (["aipp", "add"] if strategy != "first-overall" else ["aipp"])
