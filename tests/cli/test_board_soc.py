"""The edge boards people buy (issue 50 item 3): Orange Pi AIpro and Atlas 200I DK A2 are Ascend310B4 (8 TOPS)
or Ascend310B1 (20 TOPS), read from `npu-smi info`'s Name column; doctor compares it with a pipeline's
soc_version, templated from a param or not; and what the emulation does for a 310B SoC is what the docs say:
saturation only, bf16, no HF32."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ascendpipe.doctor import parse_npu_smi, soc_of_chip
from tests import modelzoo
from tests.test_doctor import _checks, _double_env, _run

ROOT = Path(__file__).resolve().parents[2]

# Atlas 200I A2 npu-smi reference, 23.0.RC3 npusmi_007 ("Name: 310B1 and 310B4; 310B1: 20T, 310B4: 8T")
PUBLISHED_310B = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc3                                   Version: 23.0.rc3                                   |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 0       310B1                 | OK              | 10.4          66                15    / 15           |
| 0       0                     | NA              | 0            957   / 10810                           |
+===============================+=================+======================================================+
"""

PIPELINE = """\
params: {soc: Ascend310B4}
stages:
  convert: {kind: convert, model: models/m.onnx, params: {soc_version: "{{ params.soc }}", input_shape: "features:2,256"}}
"""


def test_the_published_310b_table_names_its_soc():
    assert [soc_of_chip(c) for c in parse_npu_smi(PUBLISHED_310B)] == ["Ascend310B1"]


@pytest.fixture
def board_pipeline(tmp_path):
    (tmp_path / ".ascendpipe").mkdir()
    modelzoo.l2norm_model(tmp_path / "models/m.onnx")
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    return path


def test_doctor_compares_the_board_with_a_templated_soc_version(board_pipeline):
    args = [str(board_pipeline), "--backend", "ascend", "--json"]
    twenty = _double_env(NPU_SMI_DOUBLE_LAYOUT="310B", NPU_SMI_DOUBLE_CHIP="310B1")  # an Orange Pi AIpro 20T
    rc, out, err = _run(args, twenty)
    soc = _checks(out)[1]["soc"]
    assert rc == 1 and not soc["ok"], out + err
    assert soc["detail"] == "the board has Ascend310B1; stage convert converts for Ascend310B4"
    assert soc["fix"].startswith("set soc_version: Ascend310B1")
    rc, out, _ = _run(args + ["--set", "params.soc=Ascend310B1"], twenty)
    soc = _checks(out)[1]["soc"]
    assert rc == 0 and soc["ok"] and soc["detail"] == "board: Ascend310B1; soc_version of convert matches"
    eight = _double_env(NPU_SMI_DOUBLE_LAYOUT="310B")  # an 8 TOPS board (Orange Pi AIpro 8T, Atlas 200I DK A2)
    rc, out, _ = _run(args, eight)
    assert rc == 0 and _checks(out)[1]["soc"]["detail"] == "board: Ascend310B4; soc_version of convert matches"


def _convert(tmp_path, *flags):
    model = modelzoo.conv_bn_relu_model(tmp_path / "m.onnx")  # its Convs and Gemm compute in bf16 under mixed_bfloat16
    out = tmp_path / ("c" + str(abs(hash(flags))))
    done = subprocess.run([sys.executable, "-m", "ascendpipe", "convert", "--model", str(model), "--output", str(out),
                           *flags], capture_output=True, text=True, cwd=tmp_path)
    doc = json.loads((out / "convert.json").read_text()) if done.returncode == 0 else None
    return done, doc


@pytest.mark.parametrize("soc", ["Ascend310B1", "Ascend310B4"])
def test_a_310b_soc_is_saturation_only_has_bf16_and_no_hf32(tmp_path, soc):
    done, doc = _convert(tmp_path, "--soc-version", soc)
    assert done.returncode == 0, done.stderr
    assert doc["overflow_mode"] == "saturation" and doc["overflow_mode_source"] == f"default for soc_version {soc}"
    refused, _ = _convert(tmp_path, "--soc-version", soc, "--overflow-mode", "inf_nan")
    assert refused.returncode == 2
    assert f"overflow_mode inf_nan: {soc} supports only saturation mode" in refused.stderr
    bf16, doc = _convert(tmp_path, "--soc-version", soc, "--precision-mode-v2", "mixed_bfloat16")
    assert bf16.returncode == 0, bf16.stderr
    assert doc["precision_mode_v2"] == "mixed_bfloat16"
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) ops (bf16|fp16|fp32)", bf16.stdout)}
    assert counts.get("bf16", 0) >= 1 and counts.get("fp16", 0) == 0, bf16.stdout
    hf32, doc = _convert(tmp_path, "--soc-version", soc, "--allow-hf32", "true")
    assert hf32.returncode == 0 and f"allow_hf32 has no effect on {soc}" in hf32.stderr


def test_the_docs_name_the_boards_and_how_to_read_them():
    readme = (ROOT / "README.md").read_text()
    ascend = (ROOT / "docs/ascend.md").read_text()
    for text in (readme, ascend):
        assert "Orange Pi AIpro" in text and "Atlas 200I DK A2" in text
        assert "Ascend310B4" in text and "Ascend310B1" in text and "npu-smi info" in text
    assert "| Orange Pi AIpro (8T, 8 or 16 GB) | 8 TOPS | `310B4` | `Ascend310B4` |" in ascend
    assert "| Orange Pi AIpro (20T) | 20 TOPS | `310B1` | `Ascend310B1` |" in ascend
    assert "#which-soc_version-the-boards-people-buy" in readme and "### Which `soc_version`: the boards people buy" in ascend
