"""The runs page shows which setting gave which number (issue 43 item 4), in headless Chromium at 1000
and 1400 px: in the variants table the settings that differ and the verdict come first, then the key
metric; each fix attempt is labelled by the remedy it tried; `changed vs previous run` is in view; the
page opens on the latest finished run, not a crashed one; in the per-op overlay the B series is
dashed over a wider A, so neither hides the other; an integer tensor's relative error is not plotted
at the log axis' floor. The profile page's op-types table fits a 1000 px window."""

from __future__ import annotations

import pytest

from ascendpipe.explorer.page import render
from ascendpipe.explorer.shape import curve, page_model
from tests.explorer.pagecheck import measure
from tests.explorer.test_report_page import Dom, chromium, headless

WIDTHS = (1000, 1400)


def _stage(kind, params, metrics=None, info=None, state="ran"):
    return {"kind": kind, "state": state, "params": params, "metrics": metrics or {}, "remedy_files": [],
            "info": info or {}, "key": None, "outputs": {}}


def _run(run_id, stages, argv=None, state="done"):
    return {"id": run_id, "pipeline": "pipelines/reid.yaml", "started": f"2026-01-01T10:0{run_id}:00+0000",
            "finished": f"2026-01-01T10:0{run_id}:30+0000", "state": state, "backend": "onnxruntime",
            "argv": argv or ["ascendpipe", "build", "pipelines/reid.yaml"], "stages": stages}


def _reid(run_id, keep, map_fp16, argv=None, state="done"):
    metrics = {f"m{i}": 0.1 * i for i in range(30)}  # ~30 other metrics, as a real eval + compare + profile give
    return _run(run_id, {
        "convert@fp32": _stage("convert", {"precision_mode": "force_fp32"}),
        "convert@fp16": _stage("convert", {"precision_mode": "force_fp16", "keep_dtype": keep}),
        "eval@fp32": _stage("eval", {"task": "reid"}, {"mAP": 0.65, **metrics}),
        "eval@fp16": _stage("eval", {"task": "reid"}, {"mAP": map_fp16, **{k: v + 0.01 for k, v in metrics.items()}}),
        "compare@fp16": _stage("compare", {}, {"output_cosine": 0.0 if map_fp16 < 0.1 else 1.0},
                               info={"first_failure": {"op_name": "/ReduceSum", "kind": "overflow"}} if map_fp16 < 0.1 else {}),
    }, argv, state)


def _fix(run_id, keep, map_fp16):
    sets = [f'--set=stages.convert.matrix.fp16.keep_dtype={keep}'] if keep else []
    return _reid(run_id, keep or [], map_fp16, argv=["ascendpipe", "fix", "pipelines/reid.yaml", "eval@fp16", *sets])


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    runs = [_reid(1, [], 0.05), _fix(2, None, 0.05), _fix(3, '["/ReduceSum", "/Sqrt"]', 0.65),
            _fix(4, '["/ReduceSum"]', 0.05), _reid(5, ["/ReduceSum", "/Sqrt"], 0.65),
            _reid(6, ["/ReduceSum", "/Sqrt"], 0.65, state="crashed")]
    ops = ["/Shape", "/Conv", "/ReduceSum", "/Div"]
    rows = [{"op_name": o, "op_type": o[1:], "side": "both", "cosine": 1.0, "max_rel_error": 0.0 if i == 0 else 1e-3,
             "failed": False, "dtype": "int64" if i == 0 else "float16"} for i, o in enumerate(ops)]
    same = curve({"rows": rows, "first_failure": None})
    other = curve({"rows": [dict(r, cosine=0.5 if i == 2 else 1.0, failed=i == 2) for i, r in enumerate(rows)],
                   "first_failure": {"op_name": "/ReduceSum", "op_type": "ReduceSum", "reason": "overflow"}})
    index = {(1, "compare@fp16"): "bad", (5, "compare@fp16"): "good", (6, "compare@fp16"): "good"}
    model = page_model(runs, {"good": same, "bad": other}, workspace="/w", generated="now", curve_index=index)
    model["notes"] = []
    path = tmp_path_factory.mktemp("which") / "runs.html"
    path.write_text(render(model), encoding="utf-8")
    return path


@pytest.mark.parametrize("width", WIDTHS)
def test_settings_and_verdict_first_then_the_key_metric_in_view(page, tmp_path, width):
    m, dom = measure(chromium(), page, tmp_path, width)
    heads = [e["text"].strip() for e in dom.find("th", inside="variants-table")]
    assert heads[:5] == ["run", "variant", "convert.precision_mode", "convert.keep_dtype", "first failure"]
    assert heads[5] == "eval.mAP"  # the key metric, before the other 30
    columns = m["tables"]["variants-table"]["columns"]
    for name in ("convert.precision_mode", "convert.keep_dtype", "first failure", "eval.mAP"):
        assert columns[name]["right"] <= width, (name, columns[name])
    runs = m["tables"]["runs-table"]["columns"]
    assert runs["changed vs previous run"]["right"] <= width
    assert m["overflow"] == []


def test_each_fix_attempt_is_labelled_by_its_remedy(page, tmp_path):
    m, dom = measure(chromium(), page, tmp_path, 1000)
    labels = {e["attrs"]["data-run"]: " ".join(e["text"].split()) for e in dom.find("tr", inside="runs-table")
              if e["attrs"].get("data-fix")}
    assert "fix attempt: the pipeline's settings" in labels["2"]
    assert "fix attempt: keep /ReduceSum, /Sqrt" in labels["3"]
    assert "fix attempt: keep /ReduceSum" in labels["4"] and "/Sqrt" not in labels["4"].split("fix attempt:")[1]
    variants = {(e["attrs"]["data-run"], e["attrs"]["data-variant"]): " ".join(e["text"].split())
                for e in dom.find("tr", inside="variants-table") if e["attrs"].get("data-fix")}
    assert "fix: keep /ReduceSum, /Sqrt" in variants[("3", "fp16")]
    assert len({v.split(" ", 2)[1] + v for k, v in variants.items() if k[1] == "fp16"}) == 3  # three different labels


def test_the_page_opens_on_the_latest_finished_run(page, tmp_path):
    _, dom = measure(chromium(), page, tmp_path, 1400)
    summary = dom.find("p", id="diff-summary")[0]["text"]
    assert summary.startswith("run 4 → run 5:")  # run 6 crashed: not the default
    chosen = [e["attrs"].get("value") for e in dom.find("option", inside="chart-run") if "selected" in e["attrs"]]
    assert "6" not in chosen


def test_the_overlay_b_is_dashed_and_an_int_tensor_has_no_log_point(page, tmp_path):
    html = page.read_text(encoding="utf-8")
    forced = tmp_path / "forced.html"
    forced.write_text(html.replace("<body>", "<body><script>location.hash='overlay=5:compare@fp16,6:compare@fp16';</script>", 1),
                      encoding="utf-8")
    dom = Dom(headless(chromium(), forced.as_uri(), "--dump-dom", "--window-size=1400,1400"))
    lines = [e for e in dom.find("polyline", inside="overlay-plot")]
    a = [e for e in lines if e["attrs"].get("data-series") == "a"]
    b = [e for e in lines if e["attrs"].get("data-series") == "b"]
    assert a and b and all(e["attrs"].get("stroke-dasharray") == "6 4" for e in b)
    assert all("stroke-dasharray" not in e["attrs"] and float(e["attrs"]["stroke-width"]) > 3 for e in a)
    # the same curve on both sides: B's points are A's (they coincide), and both are drawn
    assert [e["attrs"]["points"] for e in a] == [e["attrs"]["points"] for e in b]
    # /Shape (int64, max rel 0) is not on the error panel: its rel. curve starts at /Conv
    rel = [e for e in a if "curve-rel" in e["attrs"].get("class", "")]
    first_x = float(rel[0]["attrs"]["points"].split()[0].split(",")[0])
    cos = [e for e in a if "curve-cosine" in e["attrs"].get("class", "")]
    assert float(cos[0]["attrs"]["points"].split()[0].split(",")[0]) < first_x


def test_the_profile_page_fits_1000_px(tmp_path):
    from ascendpipe.profiling.report import render_profile_html

    names = ["Conv", "MatMul", "LayerNormalization", "Softmax", "Transpose", "ReorderInput", "ReorderOutput",
             "Add", "Mul", "GlobalAveragePool"]
    totals = [{"op_type": n, "core_type": "HOST_CPU" if n.startswith("Reorder") else "AI_CORE", "count": 120 + i,
               "total_us": 123456.789 / (i + 1), "avg_us": 1234.567, "median_us": 1111.111, "min_us": 999.999,
               "max_us": 98765.432, "ratio_pct": 12.34, "per_iteration_us": 12345.678, "median_per_run_us": 1000.0 / (i + 1),
               "share_pct": 10.0, "host": n.startswith("Reorder"), "outliers": 1, "outlier_us": 98765.432}
              for i, n in enumerate(names)]
    html = render_profile_html(title="Profile of resnet18.onnx (stage profile)", totals=totals,
                               latency={"mean": 1.0, "median": 1.0, "p99": 1.2, "min": 0.9, "max": 1.5, "count": 100,
                                        "throughput": 8000.0}, batch_size=8)
    page = tmp_path / "profile.html"
    page.write_text(html.replace("</body>", "<script>document.body.setAttribute('data-w', JSON.stringify("
                                 "{page: document.documentElement.scrollWidth, view: window.innerWidth, "
                                 "table: document.getElementById('optypes').parentNode.getBoundingClientRect().right}));"
                                 "</script></body>"), encoding="utf-8")
    import json

    dom = Dom(headless(chromium(), page.as_uri(), "--dump-dom", "--window-size=1000,1000"))
    seen = json.loads(dom.find("body")[0]["attrs"]["data-w"])
    assert seen["page"] <= seen["view"] and seen["table"] <= seen["view"], seen
