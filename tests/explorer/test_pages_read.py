"""The report pages as a reader sees them at 1400 px in headless Chromium (issue 23 item 16): where the
key columns stand before and after a sideways scroll, labelled axes, gaps for NaN, the rows not
compared folded and explained, the device's dtype, fix attempts marked, the overlay's default pair,
and the pages' file mode. Geometry is measured in the page by a script added to a copy of it."""

from __future__ import annotations

import io
import json
import os
import stat

import pytest
import yaml

import ascendpipe
from tests.explorer.conftest import Workspace
from tests.explorer.test_report_page import ARTEFACTS, Dom, chromium, headless

VIEWPORT = 1400

# Added to a copy of a page: after the page's own script, record the boxes of the elements named by
# CSS selectors, scroll every .scroll container to its right end, and record them again.
MEASURE = """<script>
(function () {
  var wanted = %s, out = {before: {}, after: {}, hidden: {}};
  function boxes(into) {
    Object.keys(wanted).forEach(function (name) {
      var e = document.querySelector(wanted[name]);
      if (e) { var r = e.getBoundingClientRect(); into[name] = {left: r.left, right: r.right, width: r.width, height: r.height}; }
    });
  }
  boxes(out.before);
  out.scrollable = [];
  Array.prototype.forEach.call(document.querySelectorAll(".scroll"), function (s) {
    out.scrollable.push(s.scrollWidth > s.clientWidth);
    s.scrollLeft = s.scrollWidth;
  });
  boxes(out.after);
  out.hidden.onesided = Array.prototype.filter.call(document.querySelectorAll("tr.onesided"), function (r) {
    return r.getBoundingClientRect().height === 0; }).length;
  out.hidden.onesidedTotal = document.querySelectorAll("tr.onesided").length;
  document.body.setAttribute("data-measured", JSON.stringify(out));
})();
</script>"""


def measured(browser, page, selectors: dict, tmp_path, width: int = VIEWPORT, fragment: str = "") -> tuple[dict, Dom]:
    html = page.read_text(encoding="utf-8")
    copy = tmp_path / f"measure-{page.name}"
    copy.write_text(html.replace("</body>", MEASURE % json.dumps(selectors) + "</body>"), encoding="utf-8")
    dom = Dom(headless(browser, copy.as_uri() + fragment, "--dump-dom", f"--window-size={width},1200"))
    body = dom.find("body")[0]
    assert "data-measured" in body["attrs"], "the measuring script did not run"
    return json.loads(body["attrs"]["data-measured"]), dom


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Three convert variants (fp32, fp16 with the pass off: NaN inside the graph; fp16 with the
    pass on: ops fused away), a scored run stage, a sweep of its param, and one build marked as a fix attempt."""
    ws = Workspace(tmp_path_factory.mktemp("pages"))
    data = yaml.safe_load(ws.pipeline.read_text())
    data["stages"]["convert"]["matrix"]["fp16_fused"] = {"precision_mode": "force_fp16"}
    ws.pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    runs = [ws.build()]
    ws.attempt = ascendpipe.build(str(ws.pipeline), ["compare@fp16"], set=["stages.convert.matrix.fp16.keep_dtype=[sum,sqrt]"],
                                  quiet=True, stream=io.StringIO(),
                                  argv=["ascendpipe", "fix", str(ws.pipeline), "compare@fp16", "--set=stages.convert.matrix.fp16.keep_dtype=[sum,sqrt]"])
    for scale in (2, 3):  # the last build is the pipeline as written: build/ holds its outputs
        runs.append(ws.build(set=[f"params.scale={scale}"]))
    ws.runs = runs
    return ws


def test_the_runs_page_keeps_run_variant_and_the_key_metric_in_view(sweep, tmp_path):
    browser = chromium()
    page = tmp_path / "runs.html"
    old = os.umask(0o022)
    try:
        ascendpipe.api.report(str(page), workspace=str(sweep.root))
    finally:
        os.umask(old)
    assert stat.S_IMODE(page.stat().st_mode) == 0o644  # readable by others, as a page should be (was 0600)

    selectors = {"run_head": "#variants-table thead th:nth-child(1)", "variant_head": "#variants-table thead th:nth-child(2)",
                 "verdict_head": "#variants-table thead th.verdict", "metric_head": "#variants-table thead th.verdict + th",
                 "last_head": "#variants-table thead th:last-child", "runs_run": "#runs-table thead th:nth-child(1)",
                 "runs_changed": "#runs-table thead th:nth-child(3)", "runs_first_metric": "#runs-table thead th:nth-child(4)"}
    box, dom = measured(browser, page, selectors, tmp_path)
    heads = [e["text"].strip() for e in dom.find("th", inside="variants-table")]
    # what tells the variants apart (the settings that differ), the verdict, then the key metric (issue 43)
    verdict = heads.index("first failure")
    assert heads[:2] == ["run", "variant"] and heads[2] == "convert.precision_mode"
    assert all(not h.startswith(("compare.", "score.")) for h in heads[2:verdict])
    assert heads[verdict + 1] == "compare.output_cosine"
    runs_heads = [e["text"].strip() for e in dom.find("th", inside="runs-table")]
    assert runs_heads[2:4] == ["changed vs previous run", "score.acc"]  # then the accuracy before anything else measured
    for name in ("run_head", "variant_head", "verdict_head", "metric_head", "runs_changed", "runs_first_metric"):
        assert 0 <= box["before"][name]["left"] and box["before"][name]["right"] <= VIEWPORT, name

    # a narrow window: the tables scroll sideways, and run and variant stay where they were
    box, _ = measured(browser, page, selectors, tmp_path, width=700)
    assert any(box["scrollable"]), "the tables are wider than 700 px"
    for name in ("run_head", "variant_head", "runs_run"):
        assert box["after"][name]["left"] == pytest.approx(box["before"][name]["left"], abs=1), name
    assert box["after"]["last_head"]["right"] <= 700  # the far end was scrolled into view beside them

    # the fix attempt is marked in both tables
    attempt = str(sweep.attempt["id"])
    fix_rows = [e for e in dom.find("tr", inside="runs-table") if e["attrs"].get("data-fix") == "1"]
    assert [e["attrs"]["data-run"] for e in fix_rows] == [attempt] and "fix attempt: keep sum, sqrt" in fix_rows[0]["text"]
    assert {e["attrs"]["data-run"] for e in dom.find("tr", inside="variants-table") if e["attrs"].get("data-fix")} == {attempt}

    # the overlay defaults to the two compares that differ most, in the newest run:
    # fp32's clean curve against an fp16 one that fails
    legend = sorted(e["text"].strip() for e in dom.find("text", inside="overlay-svg") if e["text"].strip().startswith(("— ", "- - ")))
    newest_sweep = str(sweep.runs[-1]["id"])
    assert [t.split(" · ")[0] for t in legend] == [f"- - B: run {newest_sweep}", f"— A: run {newest_sweep}"]
    stages = [t.split(" · ")[1].split(" ")[0] for t in legend]
    assert len(set(stages)) == 2 and "compare@fp32" in stages
    assert sum("(first failure" in t for t in legend) == 1

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / "explorer-runs-1400.png"
    headless(browser, page.as_uri(), f"--screenshot={shot}", f"--window-size={VIEWPORT},2400", "--hide-scrollbars")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_compare_page_reads_at_1400_px(sweep, tmp_path):
    browser = chromium()
    root = sweep.root / "build"
    selectors = {"op_head": "#rows thead th:nth-child(2)", "chart": "#chart", "last_head": "#rows thead th:last-child"}

    # fp16 with the pass off: the sum overflows, its cosine is NaN: a gap in the line and a mark on the axis
    page = root / "compare__fp16" / "report.html"
    box, dom = measured(browser, page, selectors, tmp_path)
    titles = {e["attrs"].get("class", "").split()[-1]: e["text"] for e in dom.find("text", inside="chart") if "axis-title" in e["attrs"].get("class", "")}
    assert titles == {"y-left": "cosine similarity", "y-right": "max relative error (log10)",
                      "x-axis": "row # of each compared op, in graph order →"}
    result = json.loads((root / "compare__fp16" / "result.json").read_text())
    compared = [r for r in result["rows"] if r["side"] == "both"]
    nan_at = [i for i, r in enumerate(compared) if r["cosine"] is None]
    assert nan_at and 0 < nan_at[0] < len(compared) - 1  # a NaN inside the graph, finite values on both sides
    segments = dom.find("polyline", inside="chart", class_="curve-cosine")
    assert len(segments) == 2 and sum(len(s["attrs"]["points"].split()) for s in segments) == len(compared) - len(nan_at)
    assert len(dom.find("circle", inside="chart", class_="nan-mark")) == len(nan_at)
    assert box["before"]["chart"]["right"] <= VIEWPORT and box["before"]["op_head"]["right"] <= VIEWPORT
    assert not any(box["scrollable"]) and box["before"]["last_head"]["right"] <= VIEWPORT  # the whole table fits

    # the dtype shown is the device's, from the precision plan
    plan = json.loads((root / "convert__fp16" / "precision_plan.json").read_text())["nodes"]
    shown = [e["text"].strip() for e in dom.find("td", inside="rows", class_="dtype")]
    expected = [plan[r["op_name"]]["dtype"] if plan.get(r["op_name"], {}).get("dtype") in ("float16", "float32") else (r["dtype"] or "")
                for r in result["rows"]]
    assert shown == expected and "float16" in shown

    # fp16 with the pass on: ops fused away are golden-only rows, folded by default and explained
    page = root / "compare__fp16_fused" / "report.html"
    box, dom = measured(browser, page, selectors, tmp_path)
    result = json.loads((root / "compare__fp16_fused" / "result.json").read_text())
    golden_only = result["summary"]["golden_only"]
    assert golden_only > 0
    assert box["hidden"]["onesided"] == box["hidden"]["onesidedTotal"] == golden_only + result["summary"]["target_only"]
    note = dom.find("p", id="onesided-note")[0]["text"]
    assert f"golden-only {golden_only} = ops of the fp32 model with no tensor of their own on the device" in " ".join(note.split())

    # a narrow window: the table scrolls sideways and # and op stay put
    box, _ = measured(browser, root / "compare__fp16" / "report.html", selectors, tmp_path, width=800)
    assert any(box["scrollable"])
    assert box["after"]["op_head"]["left"] == pytest.approx(box["before"]["op_head"]["left"], abs=1)
    assert box["after"]["last_head"]["right"] <= 800

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / "compare-1400.png"
    headless(browser, page.as_uri(), f"--screenshot={shot}", f"--window-size={VIEWPORT},1600", "--hide-scrollbars")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_device_dtypes_come_from_the_precision_plan():
    from ascendpipe.compare.report import device_dtypes

    rows = [{"op_name": "conv", "dtype": "float32"}, {"op_name": "shape", "dtype": "int64"}, {"op_name": "gone", "dtype": None}]
    plan = {"nodes": {"conv": {"dtype": "float16"}, "shape": {"dtype": "other"}}}
    assert device_dtypes(rows, plan) == ["float16", None, None]
    assert device_dtypes(rows, None) == [None, None, None]
