"""The report pages show the failure (issue 31), checked in headless Chromium at 1000 and 1400 px:
the failing ops' marks inside the plot area (inf/NaN and off-scale values at its edge, with their
values in the tooltip), the error axis clipped so passing ops' large errors do not hide them,
round cosine ticks, a legend on every chart, no table cell whose text overflows its box, no row grown
tall with blank space, each pipeline's key metric in the runs table, and a default diff of two runs
that differ."""

from __future__ import annotations

import json
import re

import pytest

from ascendpipe.compare.report import cosine_ticks, rel_scale, report_html
from ascendpipe.explorer.page import render
from ascendpipe.explorer.shape import curve, page_model
from tests.explorer.pagecheck import inside, measure
from tests.explorer.test_report_page import chromium

WIDTHS = (1000, 1400)


def _row(i, name, cosine, rel, failed=False, note="", reasons=()):
    return {"index": i, "op_name": name, "op_type": "Conv" if i % 3 else "ReduceSum", "tensor": f"{name}:output:0",
            "shape": [1, 64, 56, 56], "dtype": "float16", "cosine": cosine, "max_abs_error": rel and rel / 10,
            "max_rel_error": rel, "rmse": 0.01, "kl": None, "relative_euclidean": 0.01, "overflow": "target" if cosine is None else None,
            "failed": failed, "side": "both", "reasons": list(reasons), "note": note, "pass_name": None, "batch": None,
            "failed_batches": None}


AIPP_NOTE = ("AIPP row: the device normalises uint8 images itself; the emulated AIPP output differs from the training "
             "preprocessing: mean_chn_0 123.675 was pasted where the data's mean is 78 (least-squares fit of the golden "
             "input: mean_chn_0 78, var_reci_chn_0 0.0171); fix the aipp config and rebuild convert")


@pytest.fixture(scope="module")
def compare_page(tmp_path_factory):
    """A compare of 40 ops with long names in one backbone: passing ops whose max relative error
    reach 1e4 (near-zero golden values), one failing op with inf/NaN (no cosine, no error), one
    failing with finite numbers, and the AIPP-style long notes."""
    rows = [_row(i, f"/backbone/backbone.{i // 10}/backbone.{i // 10}.{i % 10}/conv{i}/Conv", 0.9999 - i * 1e-5,
                 10.0 ** (i % 6) if i % 7 == 3 else 1e-3) for i in range(40)]
    rows[0] = _row(0, "aipp", 0.62, 0.8, failed=True, note=AIPP_NOTE, reasons=["CosineSimilarity 0.62 < 0.99"])
    rows[17] = _row(17, rows[17]["op_name"], None, None, failed=True, note="my_data includes NAN or inf.",
                    reasons=["target overflows fp16 (inf/NaN or 65504)"])
    rows[25] = _row(25, rows[25]["op_name"], 0.73, 0.5, failed=True, reasons=["CosineSimilarity 0.73 < 0.99"])
    first = {"index": 0, "op_name": "aipp", "op_type": "Aipp", "reason": "cosine 0.62", "advice": [], "batches": 1}
    summary = {"compared_tensors": 40, "failed_ops": 3, "overflow_ops": 1, "min_cosine": 0.62, "output_cosine": 0.62,
               "golden_only": 0, "target_only": 0, "batches": 1}
    doc = {"rows": rows, "first_failure": first, "summary": summary, "thresholds": {"cosine": 0.99}}
    page = tmp_path_factory.mktemp("compare") / "report.html"
    page.write_text(report_html({"rows": rows}, doc), encoding="utf-8")
    return page, rows


def test_round_cosine_ticks_and_a_clipped_error_axis():
    assert cosine_ticks(0.73)[1] == [0.7, 0.8, 0.9, 1.0]
    assert cosine_ticks(0.9)[1] == [0.9, 0.92, 0.94, 0.96, 0.98, 1.0] and cosine_ticks(0.9)[2] == 2
    assert cosine_ticks(-0.3)[1] == [-0.5, 0.0, 0.5, 1.0]
    passing_large = [{"max_rel_error": 1e5, "failed": False}, {"max_rel_error": 0.5, "failed": True}, {"max_rel_error": 1e-3, "failed": False}]
    assert rel_scale(passing_large) == (-3, 1, 1)  # clipped a decade above the failing op's 0.5
    assert rel_scale([{"max_rel_error": 2.0, "failed": False}, {"max_rel_error": 0.5, "failed": True}]) == (-1, 1, None)
    # two decades beyond (reid's passing 50.7 against a failing 1.0): nothing hidden on a log axis, not clipped
    assert rel_scale([{"max_rel_error": 50.7, "failed": False}, {"max_rel_error": 1.0, "failed": True}]) == (0, 2, None)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_compare_page_shows_every_failing_op(compare_page, tmp_path, width):
    page, rows = compare_page
    m, dom = measure(chromium(), page, tmp_path, width)
    plot = m["plots"]["chart"][0]
    assert plot["right"] <= width  # the chart scales down with the window
    failing = [r["index"] for r in rows if r["failed"]]
    for index in failing:
        marks = [k for k in m["marks"] if k["svg"] == "chart" and k["index"] == str(index)]
        assert marks and all(inside(k["box"], plot) for k in marks), index
        assert all(f"#{index} " in k["tip"] for k in marks)
    assert {"cos-mark", "rel-mark"} <= {c for k in m["marks"] if k["index"] == "25" for c in k["cls"].split()}
    inf_marks = [k for k in m["marks"] if k["index"] == "17"]
    assert {"nan-mark", "rel-edge"} <= {c for k in inf_marks for c in k["cls"].split()}  # both series, at the edges
    # no number printed where none exists (issue 49): n/a, and why
    assert "cosine n/a (target inf/NaN)" in inf_marks[0]["tip"]
    assert "max relative error n/a (target inf/NaN)" in inf_marks[0]["tip"]
    # the passing ops' 1e4 errors are clipped: the axis ends at 1e1, a decade above the failing 0.8, and says so
    notes = " ".join(e["text"] for e in dom.find("text", inside="chart", class_="chart-note"))
    assert "clipped at 1e1: 3 passing op(s) go beyond it" in notes
    assert len([k for k in dom.find("path", inside="chart") if "rel-edge" in k["attrs"].get("class", "")]) == 1 + 3
    assert m["ticks"]["chart"] == ["0.6", "0.7", "0.8", "0.9", "1.0"]
    assert len(m["legends"]["chart"]) == 5 and "failing op (cosine, error)" in m["legends"]["chart"]
    # the table: nothing overflows its cell, the note column is not squeezed (the AIPP note in a few lines)
    assert m["overflow"] == []
    note = m["tables"]["rows"]["columns"]["note"]
    assert note["width"] >= 280
    assert m["tables"]["rows"]["tallest"] <= 5 * 16, m["tables"]["rows"]["tallestText"]
    if width == 1400:
        assert note["right"] <= width  # the whole table, its note column included, fits
        assert "worst batch" not in m["tables"]["rows"]["columns"]  # one batch: no empty batch columns


def _stage(kind, params, metrics=None, state="ran", remedy=(), info=None):
    return {"kind": kind, "state": state, "params": params, "metrics": metrics or {}, "remedy_files": list(remedy),
            "info": info or {}, "key": None, "outputs": {}}


KEEP = {"name": "keep_dtype.cfg", "hash": "h1", "content": "/ReduceSum\n/Sqrt\n"}
SWITCH = {"name": "fusion_switch.cfg", "hash": "h2",
          "content": '{"Switch": {"GraphFusion": {}, "UBFusion": {"TbeReduceElemwiseFusionPass": "off"}}}\n'}


def _run(run_id, pipeline, stages, argv=None):
    return {"id": run_id, "pipeline": pipeline, "started": f"2026-01-01T10:0{run_id}:00+0000",
            "finished": f"2026-01-01T10:0{run_id}:30+0000", "state": "done", "backend": "onnxruntime",
            "argv": argv or ["ascendpipe", "build", pipeline], "stages": stages}


@pytest.fixture(scope="module")
def runs_page(tmp_path_factory):
    """Two pipelines (reid: mAP; classify: top1, the classify run last), two builds of reid that
    differ, a third identical to the second, and per-op curves where the fp16 side fails with inf/NaN
    while a passing op's error reaches 1e5."""
    def reid(run_id, mode, map_b):
        return _run(run_id, "pipelines/reid.yaml", {  # remedy files, a long setting, a first failure: what makes cells wrap
            "convert@fp32": _stage("convert", {"precision_mode": "force_fp32"}),
            "convert@fp16_keep_only": _stage("convert", {"precision_mode": "force_fp16", "keep_dtype": ["/ReduceSum", "/Sqrt"]}, remedy=[KEEP]),
            "convert@fp16": _stage("convert", {"precision_mode": mode, "fusion_switch": {"TbeReduceElemwiseFusionPass": "off"},
                                               "keep_dtype": ["/backbone/backbone.0/ReduceSum", "/Sqrt"]}, remedy=[KEEP, SWITCH]),
            "compare@fp16_keep_only": _stage("compare", {}, {"output_cosine": 0.0}, remedy=[KEEP, SWITCH],
                                             info={"first_failure": {"op_name": "/ReduceSum", "kind": "overflow"}}),
            "eval@fp32": _stage("eval", {"task": "reid"}, {"mAP": 0.6528, "rank1": 0.924}),
            "eval@fp16": _stage("eval", {"task": "reid"}, {"mAP": map_b, "rank1": 0.5}),
            "compare@fp32": _stage("compare", {}, {"output_cosine": 1.0}),
            "compare@fp16": _stage("compare", {}, {"output_cosine": 0.0}),
        })
    classify = _run(4, "pipelines/classify.yaml", {
        "convert@right": _stage("convert", {"aipp_mean": 78}), "convert@wrong_mean": _stage("convert", {"aipp_mean": 123}),
        "eval@right": _stage("eval", {"task": "classification"}, {"top1": 0.883, "top5": 0.99}),
        "eval@wrong_mean": _stage("eval", {"task": "classification"}, {"top1": 0.569, "top5": 0.9}),
    })
    partial = _run(5, "pipelines/reid.yaml", {"compare@fp32": _stage("compare", {}, {"output_cosine": 1.0})})  # e.g. `build reid.yaml compare@fp32`
    runs = [reid(1, "force_fp16", 0.0529), reid(2, "allow_fp32_to_fp16", 0.6527), reid(3, "allow_fp32_to_fp16", 0.6527), classify, partial]
    ops = [f"/backbone/layer{i}/Conv" for i in range(12)]
    good = {"rows": [{"op_name": o, "op_type": "Conv", "side": "both", "cosine": 0.99999, "max_rel_error": 1e5 if i == 2 else 1e-3,
                      "failed": False} for i, o in enumerate(ops)], "first_failure": None}
    bad = {"rows": [{"op_name": o, "op_type": "Conv", "side": "both", "cosine": None if i in (6, 7) else (0.8 if i > 7 else 0.9999),
                     "max_rel_error": None if i in (6, 7) else (0.4 if i > 7 else 1e-3), "failed": i >= 6} for i, o in enumerate(ops)],
           "first_failure": {"op_name": ops[6], "op_type": "Conv", "reason": "overflow"}}
    curves = {"good": curve(good), "bad": curve(bad)}
    index = {(r, "compare@fp32"): "good" for r in (1, 2, 3)}
    index.update({(1, "compare@fp16"): "bad", (2, "compare@fp16"): "good", (3, "compare@fp16"): "good"})
    model = page_model(runs, curves, workspace="/w", generated="now", curve_index=index)
    model["notes"] = []
    page = tmp_path_factory.mktemp("runs") / "runs.html"
    page.write_text(render(model), encoding="utf-8")
    return page, bad


@pytest.mark.parametrize("width", WIDTHS)
def test_the_runs_page_shows_key_metrics_the_failure_and_a_real_diff(runs_page, tmp_path, width):
    page, bad = runs_page
    m, dom = measure(chromium(), page, tmp_path, width)

    # each pipeline's key metric is a runs-table column, filled for its runs (the classify run included)
    heads = [e["text"].strip() for e in dom.find("th", inside="runs-table")]
    assert heads[2:5] == ["changed vs previous run", "eval.mAP", "eval.top1"]
    rows = {e["attrs"]["data-run"]: " ".join(e["text"].split()) for e in dom.find("tr", inside="runs-table") if e["attrs"].get("data-run")}
    assert set(rows) == {"1", "2", "3", "4", "5"}
    assert "0.569 … 0.883" in rows["4"] and "0.0529 … 0.6528" in rows["1"]  # top1 of the classify run, mAP of reid's
    assert m["tables"]["runs-table"]["columns"]["eval.top1"]["right"] <= width

    # the default diff: the newest reid run against the latest one whose settings differ (run 2 is run 3
    # again; the classify run has no earlier run to compare with; the partial run 5 changed no setting of
    # a stage it built: the stages it did not build are not a change)
    summary = dom.find("p", id="diff-summary")[0]["text"]
    assert summary == "run 1 → run 3: 1 param(s) and 1 metric(s) differ"
    assert "no params or metrics differ" not in " ".join(e["text"] for e in dom.find("td", inside="diff-table"))

    # the overlay: every failing op of the failing side has a mark inside a panel, inf/NaN at the edge
    panels = m["plots"]["overlay-plot"]
    assert len(panels) == 2 and all(p["right"] <= width for p in panels)
    marks = [k for k in m["marks"] if k["svg"] == "overlay-plot"]
    failing_ops = [r["op_name"] for r in bad["rows"] if r["failed"]]
    assert marks  # the default pair holds the failing curve (the two compares that differ most)
    for op in failing_ops:
        mine = [k for k in marks if k["op"] == op]
        assert mine and all(any(inside(k["box"], p) for p in panels) for k in mine), op
    edge = [k for k in marks if "rel-edge" in k["cls"]]
    assert {k["op"] for k in edge} == {bad["rows"][6]["op_name"], bad["rows"][7]["op_name"]}
    assert all("inf/NaN (not computed)" in k["tip"] for k in edge)
    assert any("inf/NaN" in t for t in m["legends"]["overlay-plot"])
    assert all(re.fullmatch(r"-?\d\.\d{1,2}", t) for t in m["ticks"]["overlay-plot"])

    # the tables: no cell's text overflows, no row grown tall with blank space, bars under the digits
    assert m["overflow"] == []
    for table in ("runs-table", "variants-table"):
        assert m["tables"][table]["tallest"] <= 46, (table, m["tables"][table]["tallestText"])
    # the bars of the variants table run under the digits, never through them
    assert m["bars"] and all(0 < b["strip"] <= 4 and b["barTop"] >= b["textBottom"] - 0.5 for b in m["bars"]), m["bars"][:3]
    # the metric chart has a legend
    assert dom.find("div", id="chart-legend")[0]["text"].strip()


def test_the_overlay_draws_the_failing_side_when_asked(runs_page, tmp_path):
    """The failing fp16 curve of run 1 against run 3's clean one, named in the URL: its failing ops are
    all drawn inside the panels, inf/NaN at the edge, the passing op's 1e5 error clipped."""
    page, bad = runs_page
    html = page.read_text(encoding="utf-8")
    forced = tmp_path / "forced.html"
    # the same page opened as runs.html#overlay=1:compare@fp16,3:compare@fp16 (the hash read at load)
    forced.write_text(html.replace("<body>", "<body><script>location.hash='overlay=1:compare@fp16,3:compare@fp16';</script>", 1),
                      encoding="utf-8")
    m, dom = measure(chromium(), forced, tmp_path, 1000)
    panels = m["plots"]["overlay-plot"]
    marks = [k for k in m["marks"] if k["svg"] == "overlay-plot"]
    for r in bad["rows"]:
        if r["failed"]:
            mine = [k for k in marks if k["op"] == r["op_name"]]
            assert mine and all(any(inside(k["box"], p) for p in panels) for k in mine), r["op_name"]
    assert any("≥1e1" == e["text"] for e in dom.find("text", inside="overlay-plot"))  # clipped a decade above 0.4
    tips = [k["tip"] for k in marks if "rel-edge" in k["cls"]]
    assert len(tips) == 2 and all("inf/NaN (not computed)" in t for t in tips)
    legend = [e["text"] for e in dom.find("text", inside="overlay-plot") if e["text"].startswith(("— ", "- - "))]
    assert legend[0].startswith("— A: run 1 · compare@fp16 (first failure") and legend[1].startswith("- - B: run 3")
    assert json.loads(json.dumps(m["overflow"])) == []
