"""`soc_version` templated from a param, like every other string (issue 50 item 3): the pipeline
schema checks a templated value once rendered, not the template's text, so `soc_version: "{{
params.soc }}"` builds for the SoC the param names, `--set params.soc=...` moves every stage that reads
it, and a rendered value the kind refuses is one located line that says what it was rendered from."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import modelzoo

PIPELINE = """\
params: {soc: Ascend310B1, mode: force_fp16}
stages:
  convert:
    kind: convert
    model: models/m.onnx
    matrix:
      fp16: {precision_mode: "{{ params.mode }}", soc_version: "{{ params.soc }}", input_shape: "features:2,256"}
      fp32: {precision_mode: force_fp32, soc_version: "{{ params.soc }}", input_shape: "features:2,256"}
  tune: {kind: tune, model: models/m.onnx, params: {soc_version: "{{ params.soc }}"}}
"""


def _cli(ws, *args):
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=ws, capture_output=True, text=True)


@pytest.fixture
def ws(tmp_path):
    (tmp_path / ".ascendpipe").mkdir()
    modelzoo.l2norm_model(tmp_path / "models/m.onnx")
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    return tmp_path


def _convert_json(ws, variant):
    return json.loads((ws / f"build/convert__{variant}/convert.json").read_text())


def test_a_templated_soc_version_builds_for_the_soc_the_param_names(ws):
    built = _cli(ws, "build", "pipeline.yaml", "convert")
    assert built.returncode == 0, built.stderr
    for variant in ("fp16", "fp32"):
        doc = _convert_json(ws, variant)
        assert doc["soc_version"] == "Ascend310B1"
        assert "--soc_version=Ascend310B1" in doc["atc_argv"]
        # what the SoC decides: Ascend310B is saturation-only (docs/emulation.md)
        assert doc["overflow_mode"] == "saturation"
        assert doc["overflow_mode_source"] == "default for soc_version Ascend310B1"
    assert _convert_json(ws, "fp16")["precision_mode"] == "force_fp16"
    shown = json.loads(_cli(ws, "show", "latest", "--json").stdout)
    assert shown["stages"]["convert@fp16"]["params"]["soc_version"] == "Ascend310B1"

    # the param moves every stage that reads it; set back, they come from the cache
    moved = _cli(ws, "build", "pipeline.yaml", "convert", "--set", "params.soc=Ascend910B1")
    assert moved.returncode == 0, moved.stderr
    assert "ran       convert@fp16" in moved.stdout and "ran       convert@fp32" in moved.stdout
    doc = _convert_json(ws, "fp16")
    assert doc["soc_version"] == "Ascend910B1" and doc["overflow_mode"] == "inf_nan"
    back = _cli(ws, "build", "pipeline.yaml", "convert")
    assert back.returncode == 0 and "ran " not in back.stdout and "restored" in back.stdout
    assert _convert_json(ws, "fp16")["soc_version"] == "Ascend310B1"


def test_the_ascend_dry_run_and_doctor_read_the_rendered_soc(ws):
    dry = _cli(ws, "build", "pipeline.yaml", "convert@fp16", "--dry-run", "--backend", "ascend")
    assert "--soc_version=Ascend310B1" in dry.stdout, dry.stdout + dry.stderr
    assert "{{" not in dry.stdout
    from ascendpipe import api
    from ascendpipe.cli.doctor import _wanted_socs

    pipeline = api.load(str(ws / "pipeline.yaml"), set=["params.soc=Ascend310B4"])
    assert _wanted_socs(pipeline) == {"convert@fp16": "Ascend310B4", "convert@fp32": "Ascend310B4", "tune": "Ascend310B4"}


def test_a_rendered_value_the_kind_refuses_is_located_and_says_where_it_came_from(ws):
    bad = _cli(ws, "build", "pipeline.yaml", "--set", "params.soc=Ascend310X")
    assert bad.returncode == 2 and bad.stdout == ""
    line = bad.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("ascendpipe: error: pipeline.yaml:7:")
    assert "soc_version 'Ascend310X' does not match the pattern" in line
    assert line.endswith("(rendered from '{{ params.soc }}')")
    assert not (ws / "build").exists()  # refused before anything ran

    mode = _cli(ws, "validate", "pipeline.yaml", "--set", "params.mode=fp17")
    assert mode.returncode == 2
    assert "precision_mode 'fp17' is not one of" in mode.stderr and "(rendered from '{{ params.mode }}')" in mode.stderr

    # a template renders text: an integer param says so, instead of blaming the template's braces
    (ws / "int.yaml").write_text("params: {bs: 2}\nstages:\n  infer: {kind: infer, model: models/m.onnx, "
                                 "params: {batch_size: \"{{ params.bs }}\"}}\n")
    text = _cli(ws, "validate", "int.yaml").stderr
    assert "batch_size: expected integer, got str \"2\" (rendered from '{{ params.bs }}'; a template renders text" in text


def test_an_untemplated_bad_value_is_still_refused_before_rendering(ws):
    (ws / "plain.yaml").write_text("stages:\n  convert: {kind: convert, model: models/m.onnx, "
                                   "params: {soc_version: Ascend999}}\n")
    bad = _cli(ws, "validate", "plain.yaml")
    assert bad.returncode == 2
    assert "soc_version 'Ascend999' does not match the pattern" in bad.stderr and "rendered" not in bad.stderr


def test_a_template_where_nothing_renders_it_is_refused_as_before(ws):
    (ws / "backend.yaml").write_text('backend: "{{ params.b }}"\nparams: {b: onnxruntime}\n'
                                     "stages:\n  convert: {kind: convert, model: models/m.onnx}\n")
    bad = _cli(ws, "validate", "backend.yaml")
    assert bad.returncode == 2 and "backend '{{ params.b }}' is not one of onnxruntime, ascend" in bad.stderr
