"""The page model from records (pure: no database, no browser)."""

from __future__ import annotations

from ascendpipe.explorer.shape import curve, json_for_html, page_model


def stage(kind, params, metrics=None, state="ran", remedy=(), info=None, key=None):
    return {"kind": kind, "state": state, "params": params, "metrics": metrics or {}, "remedy_files": list(remedy),
            "info": info or {}, "key": key, "outputs": {}}


def run(run_id, mode_b, map_b, map_golden=0.9):
    return {
        "id": run_id, "pipeline": "p.yaml", "started": "2026-01-01T10:00:00+0000", "finished": "2026-01-01T10:01:30+0000",
        "state": "done", "backend": "onnxruntime", "argv": ["ascendpipe", "build", "p.yaml"],
        "stages": {
            "eval_golden": stage("eval", {"task": "reid"}, {"mAP": map_golden}),
            "convert@a": stage("convert", {"precision_mode": "force_fp32"}),
            "convert@b": stage("convert", {"precision_mode": mode_b}, remedy=[{"name": "keep_dtype", "hash": "h1", "content": "/Sum\n"}]),
            "eval@a": stage("eval", {"task": "reid"}, {"mAP": 0.9, "rank1": 0.95}),
            "eval@b": stage("eval", {"task": "reid"}, {"mAP": map_b, "rank1": 0.95}),
            "compare@b": stage("compare", {}, {"output_cosine": 0.5}, info={"first_failure": {"op_name": "/Sum", "kind": "overflow"}}),
        },
    }


def test_variant_rows_settings_metrics_and_changes():
    runs = [run(1, "force_fp16", 0.05), run(2, "allow_fp32_to_fp16", 0.89)]
    m = page_model(runs, {}, workspace="/w", generated="now")
    assert [(r["run"], r["variant"]) for r in m["rows"]] == [(2, "a"), (2, "b"), (1, "a"), (1, "b")]
    assert m["setting_cols"][0] == "convert.precision_mode"
    row = m["rows"][3]
    assert row["settings"]["convert.precision_mode"] == "force_fp16" and row["first_failure"] == "/Sum (overflow)"
    assert [f["name"] for f in row["remedy"]] == ["keep_dtype"]
    # rank1 is 0.95 in all four rows: folded into the "same in every row" line; mAP is a column with bars
    assert m["constant_metrics"] == {"eval.rank1": "0.95"}
    assert m["metric_cols"][0] == "eval.mAP"
    assert [r["cells"]["eval.mAP"]["bar"] for r in m["rows"]] == [100.0, 98.8, 100.0, 0.0]
    # the runs table: the mAP range over the variants, and the param changed since the previous run
    newest = m["runs"][0]
    assert newest["changed"] == ["convert@b.precision_mode"] and m["runs"][1]["changed"] == []
    assert newest["metrics"]["eval.mAP"]["text"] == "0.89 … 0.9" and newest["duration"] == 90
    # the golden eval is a reference line for eval.mAP (same kind, same metric)
    assert {"run": 1, "stage": "eval_golden", "kind": "eval", "metric": "mAP", "value": 0.9} in m["data"]["references"]
    assert m["data"]["blobs"] == {"h1": "/Sum\n"}


def test_curve_keeps_compared_rows_and_json_cannot_close_the_script():
    result = {"rows": [
        {"op_name": "a", "op_type": "Conv", "side": "golden_only", "cosine": None, "max_rel_error": None, "failed": False},
        {"op_name": "b", "op_type": "Mul", "side": "both", "cosine": 0.99999991, "max_rel_error": 0.001234567, "failed": False},
        {"op_name": "c", "op_type": "ReduceSum", "side": "both", "cosine": float("nan"), "max_rel_error": float("inf"), "failed": True},
    ], "first_failure": {"op_name": "c", "op_type": "ReduceSum", "reason": "overflow", "advice": []}}
    c = curve(result)
    assert c["ops"] == ["b", "c"] and c["cosine"] == [0.9999999, None] and c["max_rel_error"] == [0.001235, None]
    assert c["failed"] == [False, True] and c["first_failure"] == {"op_name": "c", "op_type": "ReduceSum", "reason": "overflow"}
    assert "</script>" not in json_for_html({"x": "</script><script>alert(1)</script>"})


def test_fresh_stages_show_the_remedy_files_and_failure_of_their_key():
    built, noop = run(1, "force_fp16", 0.05), run(2, "force_fp16", 0.05)
    for name in ("convert@b", "compare@b"):
        noop["stages"][name].update(state="fresh", remedy_files=[], info={}, key=f"key-{name}")
        built["stages"][name]["key"] = f"key-{name}"
    m = page_model([built, noop], {}, workspace="/w", generated="now")
    row = next(r for r in m["rows"] if r["run"] == 2 and r["variant"] == "b")
    assert [f["name"] for f in row["remedy"]] == ["keep_dtype"] and row["first_failure"] == "/Sum (overflow)"
