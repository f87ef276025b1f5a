"""A convert's outputs do not depend on where the workspace lives (two clones, a Ray worker's scratch)."""

import json

from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.fsutil import workspace_relative
from ascendpipe.precision.settings import resolve
from tests.modelzoo import l2norm_model

SWITCH = '{"Switch":{"GraphFusion":{},"UBFusion":{"TbeReduceElemwiseFusionPass":"off"}}}'


def _convert_in(ws):
    model = l2norm_model(ws / "models" / "l2.onnx")
    (ws / "remedies").mkdir()
    (ws / "remedies" / "fusion_switch.cfg").write_text(SWITCH)
    params = {"precision_mode": "force_fp16", "keep_dtype": ["sum", "sqrt"],
              "fusion_switch_file": "remedies/fusion_switch.cfg"}
    settings = resolve(params, lambda rel: ws / rel)
    result = convert_model(model, ws / "out", settings, workspace=ws)
    return result, {p.name: p.read_bytes() for p in sorted((ws / "out").iterdir()) if p.is_file()}


def test_two_workspaces_write_the_same_bytes(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "clone" / "b").mkdir(parents=True)
    result_a, files_a = _convert_in(tmp_path / "a")
    result_b, files_b = _convert_in(tmp_path / "clone" / "b")
    assert files_a == files_b and "convert.json" in files_a and "model.onnx" in files_a
    record = json.loads(files_a["convert.json"])
    assert str(tmp_path) not in files_a["convert.json"].decode()
    # the equivalent atc line names the model and the user's switch file as the pipeline does
    assert "--model=models/l2.onnx" in record["atc_argv"]
    assert record["fusion_switch_source"] == "remedies/fusion_switch.cfg"
    assert result_a.atc_argv == result_b.atc_argv


def test_workspace_relative_rewrites_only_paths_under_the_root(tmp_path):
    root = tmp_path / "ws"
    value = {"argv": ["atc", f"--model={root}/m.onnx", str(root / "bank")], "other": f"{tmp_path}/wsx/y",
             "n": 3, "pair": (str(root / "a"), None)}
    assert workspace_relative(value, root) == {
        "argv": ["atc", "--model=m.onnx", "bank"], "other": f"{tmp_path}/wsx/y", "n": 3, "pair": ("a", None)}
