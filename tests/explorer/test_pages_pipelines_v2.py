"""The runs page over two pipelines built from the command line (issue 50 item 4): the runs table lists
`precision_mode_v2` values among the precision modes, and the variants view has one table per pipeline,
each with its own settings first (a pipeline's variants are told apart by its own settings, never by
another pipeline's empty columns), in headless Chromium at 1000 and 1400 px."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ascendpipe.explorer.shape import page_model
from tests import modelzoo
from tests.explorer.pagecheck import measure
from tests.explorer.test_report_page import Dom, chromium, headless

A2 = """\
build_dir: build/a2
params: {soc_version: Ascend910B1}
stages:
  convert:
    kind: convert
    model: m.onnx
    matrix:
      fp16: {precision_mode_v2: fp16}
      bf16: {precision_mode_v2: mixed_bfloat16}
      origin: {precision_mode_v2: origin}
  compare: {kind: compare, golden: m.onnx, target: convert, inputs: x.npy}
"""

EDGE = """\
build_dir: build/edge
stages:
  convert_edge:
    kind: convert
    model: m.onnx
    params: {soc_version: Ascend310B4}
    matrix:
      plain: {precision_mode: force_fp16}
      kept: {precision_mode: force_fp16, keep_dtype: ["OpType::Conv"]}
  compare_edge: {kind: compare, golden: m.onnx, target: convert_edge, inputs: x.npy}
"""


def _ok(cwd, *args):
    done = subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def two_pipelines(tmp_path_factory):
    root = tmp_path_factory.mktemp("twopipes")
    (root / ".ascendpipe").mkdir()
    modelzoo.conv_bn_relu_model(root / "m.onnx")
    np.save(root / "x.npy", next(iter(modelzoo.conv_bn_relu_inputs().values())))
    (root / "a2.yaml").write_text(A2)
    (root / "edge.yaml").write_text(EDGE)
    _ok(root, "build", "a2.yaml")
    _ok(root, "build", "edge.yaml")
    page = root / "runs.html"
    _ok(root, "report", "-o", str(page))
    return root, page


def test_the_runs_table_lists_precision_mode_v2_values(two_pipelines):
    _, page = two_pipelines
    dom = Dom(headless(chromium(), page.as_uri(), "--dump-dom"))
    heads = [e["text"].strip() for e in dom.find("th", inside="runs-table")]
    assert "precision modes" in heads
    rows = {e["attrs"]["data-run"]: " ".join(e["text"].split()) for e in dom.find("tr", inside="runs-table")
            if e["attrs"].get("data-run")}
    assert "fp16 (v2), mixed_bfloat16 (v2), origin (v2)" in rows["1"]  # a2.yaml: every mode by precision_mode_v2
    assert "force_fp16" in rows["2"] and "(v2)" not in rows["2"]


@pytest.mark.parametrize("width", (1000, 1400))
def test_each_pipeline_has_its_own_variants_table_its_settings_first(two_pipelines, tmp_path, width):
    _, page = two_pipelines
    m, dom = measure(chromium(), page, tmp_path, width)
    tables = {e["attrs"]["id"]: e["attrs"]["data-pipeline"] for e in dom.find("table") if "variants" in e["attrs"].get("class", "")}
    # the newest run's pipeline first
    assert tables == {"variants-table": "edge.yaml", "variants-table-2": "a2.yaml"}
    edge = [e["text"].strip() for e in dom.find("th", inside="variants-table")]
    a2 = [e["text"].strip() for e in dom.find("th", inside="variants-table-2")]
    # what tells its rows apart first (keep_dtype), then the key setting all its rows share
    assert edge[:4] == ["run", "variant", "convert_edge.keep_dtype", "convert_edge.precision_mode"]
    assert a2[:3] == ["run", "variant", "convert.precision_mode_v2"]
    # no table shows the other pipeline's settings
    assert not any(h.startswith("convert.") for h in edge) and not any(h.startswith("convert_edge.") for h in a2)
    for table_id, pipeline, variants in (("variants-table", "edge.yaml", {"plain", "kept"}),
                                         ("variants-table-2", "a2.yaml", {"fp16", "bf16", "origin"})):
        rows = [e for e in dom.find("tr", inside=table_id) if e["attrs"].get("data-variant")]
        assert {e["attrs"]["data-pipeline"] for e in rows} == {pipeline}
        assert {e["attrs"]["data-variant"] for e in rows} == variants
        assert m["tables"][table_id]["columns"]["first failure"]["right"] <= width
    bf16 = next(e for e in dom.find("tr", inside="variants-table-2") if e["attrs"].get("data-variant") == "bf16")
    assert "mixed_bfloat16" in bf16["text"]
    heads = [e["text"] for e in dom.find("h3")]
    assert [h.split()[0] for h in heads] == ["edge.yaml", "a2.yaml"]
    assert m["overflow"] == []

    # the filter narrows every table
    dom = Dom(headless(chromium(), page.as_uri() + "#filter=bf16", "--dump-dom", f"--window-size={width},1400"))
    shown = [e["attrs"]["data-variant"] for e in dom.find("tr") if e["attrs"].get("data-variant")
             and "hidden" not in e["attrs"].get("class", "")]
    assert shown == ["bf16"]


def test_one_pipeline_keeps_one_table_and_v2_colours_the_chart():
    def run(run_id, v2):
        stages = {f"convert@{v}": {"kind": "convert", "state": "ran", "params": {"precision_mode_v2": v}, "metrics": {},
                                   "remedy_files": [], "info": {}, "key": None, "outputs": {}} for v in v2}
        return {"id": run_id, "pipeline": "a2.yaml", "started": "2026-01-01T10:00:00+0000",
                "finished": "2026-01-01T10:00:09+0000", "state": "done", "backend": "onnxruntime",
                "argv": ["ascendpipe", "build", "a2.yaml"], "stages": stages}

    m = page_model([run(1, ["fp16", "mixed_bfloat16"])], {}, workspace="/w", generated="now")
    assert [t["id"] for t in m["tables"]] == ["variants-table"] and m["tables"][0]["rows"] == m["rows"]
    assert m["runs"][0]["modes"] == ["fp16 (v2)", "mixed_bfloat16 (v2)"]
    assert m["data"]["colourDefault"] == "convert.precision_mode_v2"


def test_the_page_defaults_fit_the_run_shown_and_its_diff_compares_shared_stages(two_pipelines, tmp_path):
    _, page = two_pipelines
    dom = Dom(headless(chromium(), page.as_uri(), "--dump-dom"))
    # the chart opens on the newest run with variants (edge.yaml's): a metric and a setting its rows have
    legend = " ".join(dom.find("div", id="chart-legend")[0]["text"].split())
    assert "convert_edge.keep_dtype = OpType::Conv" in legend
    assert len(dom.find("rect", inside="chart-svg", class_="bar")) == 2
    # the two runs share no stage name: the diff says so instead of listing every stage as removed
    summary = dom.find("p", id="diff-summary")[0]["text"]
    assert summary == ("run 1 → run 2: different pipelines (a2.yaml, edge.yaml) with no stage of the same name: "
                       "nothing to compare")

    from ascendpipe.explorer.page import render

    def run(run_id, pipeline, stages):
        return {"id": run_id, "pipeline": pipeline, "started": "2026-01-01T10:00:00+0000",
                "finished": "2026-01-01T10:00:09+0000", "state": "done", "backend": "onnxruntime",
                "argv": ["ascendpipe", "build", pipeline], "stages": {
                    n: {"kind": "convert", "state": "ran", "params": p, "metrics": {}, "remedy_files": [], "info": {},
                        "key": None, "outputs": {}} for n, p in stages.items()}}

    runs = [run(1, "reid.yaml", {"convert@fp16": {"precision_mode": "force_fp16"}, "convert@fp32": {"precision_mode": "force_fp32"}}),
            run(2, "reid_a2.yaml", {"convert@fp16": {"precision_mode_v2": "fp16"}, "convert@bf16": {"precision_mode_v2": "mixed_bfloat16"}})]
    model = page_model(runs, {}, workspace="/w", generated="now")
    model["notes"] = []
    shared = tmp_path / "shared.html"
    shared.write_text(render(model), encoding="utf-8")
    dom = Dom(headless(chromium(), shared.as_uri() + "#diff=1,2", "--dump-dom"))
    summary = dom.find("p", id="diff-summary")[0]["text"]
    assert summary == ("run 1 → run 2: 2 param(s) and 0 metric(s) differ (different pipelines: reid.yaml, reid_a2.yaml; "
                       "only the 1 stage(s) of the same name are compared, 2 left out)")
    assert {e["attrs"]["data-stage"] for e in dom.find("tr", inside="diff-table") if e["attrs"].get("data-stage")} == {"convert@fp16"}
