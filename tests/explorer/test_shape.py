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
    # bars from 0 (non-negative metrics): 0.89 draws 98.9% of 0.9's bar, 0.05 draws 5.6%
    assert [r["cells"]["eval.mAP"]["bar"] for r in m["rows"]] == [100.0, 98.9, 100.0, 5.6]
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


def test_the_accuracy_metric_comes_before_a_noisy_timing():
    """A throughput varies in every run because it is noisy; it used to be the runs table's first metric."""
    runs = []
    for i, (mode, m) in enumerate([("force_fp16", 0.05), ("force_fp16", 0.05), ("allow_fp32_to_fp16", 0.89)], start=1):
        r = run(i, mode, m)
        r["stages"]["infer@b"] = stage("infer", {}, {"throughput": 700.0 + 17 * i, "latency_ms_mean": 1.2 + i / 10})
        runs.append(r)
    m = page_model(runs, {}, workspace="/w", generated="now")
    assert m["run_metric_cols"][0] == "eval.mAP"
    # mAP takes two values over the three runs, the throughput three: still mAP first
    assert m["run_metric_cols"].index("infer.throughput") > m["run_metric_cols"].index("eval.mAP")
    assert m["metric_cols"][0] == "eval.mAP"


def test_the_overlay_defaults_to_the_two_compares_that_differ_most():
    flat_curve = {"ops": ["a", "b", "c"], "cosine": [1.0, 1.0, 1.0], "max_rel_error": [0.0, 0.0, 0.0], "failed": [False] * 3}
    broken = {"ops": ["a", "b", "c"], "cosine": [1.0, None, 0.0], "max_rel_error": [0.0, None, 1.0], "failed": [False, True, True]}
    slight = {"ops": ["a", "b", "c"], "cosine": [1.0, 0.999, 0.998], "max_rel_error": [0.0, 0.01, 0.02], "failed": [False] * 3}
    curves = {"d-flat": flat_curve, "d-broken": broken, "d-slight": slight}
    r1 = run(1, "force_fp16", 0.05)
    r2 = run(2, "force_fp16", 0.05)
    for r in (r1, r2):
        for name in ("compare@a", "compare@c"):
            r["stages"][name] = stage("compare", {}, {"output_cosine": 1.0})
    # the newest run holds two identical curves (restored) and one a little off; the older one a broken fp16
    index = {(2, "compare@a"): "d-flat", (2, "compare@b"): "d-flat", (2, "compare@c"): "d-slight",
             (1, "compare@a"): "d-flat", (1, "compare@b"): "d-broken", (1, "compare@c"): "d-slight"}
    m = page_model([r1, r2], curves, workspace="/w", generated="now", curve_index=index)
    pair = m["data"]["overlayDefault"]
    assert sorted(pair) in (["2:compare@a", "2:compare@c"], ["2:compare@b", "2:compare@c"])  # never a with b: identical
    index[(2, "compare@c")] = "d-flat"  # now the newest run's curves are all the same: look further back
    m = page_model([r1, r2], curves, workspace="/w", generated="now", curve_index=index)
    assert sorted(m["data"]["overlayDefault"]) in (["1:compare@a", "1:compare@b"], ["1:compare@b", "1:compare@c"])


def test_fix_attempts_are_marked():
    attempt = run(3, "force_fp16", 0.05)
    attempt["argv"] = ["ascendpipe", "fix", "p.yaml", "eval@b", "--set=stages.convert.matrix.b.keep_dtype=[/Sum]"]
    m = page_model([run(1, "force_fp16", 0.05), attempt], {}, workspace="/w", generated="now")
    assert [(r["id"], r["fix_attempt"]) for r in m["runs"]] == [(3, True), (1, False)]
    assert {r["run"] for r in m["rows"] if r["fix_attempt"]} == {3}


def detection_run(run_id):
    """A detection pipeline: the key metric (mAP50_95) ranks before compare's output cosine, whose
    0.999999 vs 1 must not draw as 0% vs 100%; no row sets an AIPP param, so nothing colours by it."""
    return {
        "id": run_id, "pipeline": "det.yaml", "started": "2026-01-01T10:00:00+0000", "finished": "2026-01-01T10:01:00+0000",
        "state": "done", "backend": "onnxruntime", "argv": ["ascendpipe", "build", "det.yaml"],
        "stages": {
            "det_eval_golden": stage("eval", {"task": "detection"}, {"mAP50_95": 0.70, "voc_mAP50": 0.98}),
            "det_convert@fp16": stage("convert", {"precision_mode": "force_fp16", "aipp": None}),
            "det_convert@mixed": stage("convert", {"precision_mode": "force_fp16", "aipp": None}),
            "det_compare@fp16": stage("compare", {}, {"output_cosine": 0.999999}),
            "det_compare@mixed": stage("compare", {}, {"output_cosine": 1.0}),
            "det_eval@fp16": stage("eval", {"task": "detection"}, {"mAP50_95": 0.699, "voc_mAP50": 0.98}),
            "det_eval@mixed": stage("eval", {"task": "detection"}, {"mAP50_95": 0.70, "voc_mAP50": 0.98}),
        },
    }


def test_the_key_metric_comes_from_the_eval_task_not_from_compare():
    m = page_model([detection_run(1)], {}, workspace="/w", generated="now")
    assert m["key_metrics"] == ["det_eval.mAP50_95", "det_eval_golden.mAP50_95"]
    assert m["metric_cols"][0] == "det_eval.mAP50_95" and m["run_metric_cols"][0] == "det_eval.mAP50_95"
    assert m["data"]["metricDefault"] == "det_eval.mAP50_95"
    assert m["data"]["colourDefault"] == ""  # precision_mode is the same in both rows; aipp unset everywhere
    bars = {r["variant"]: r["cells"]["det_compare.output_cosine"]["bar"] for r in m["rows"]}
    assert bars == {"fp16": 100.0, "mixed": 100.0}
    # a classification pipeline leads with top1, a reid one with mAP
    cls = detection_run(2)
    for name in ("det_eval_golden", "det_eval@fp16", "det_eval@mixed"):
        cls["stages"][name] = stage("eval", {"task": "classification"}, {"top5": 1.0, "top1": 0.9})
    cls["stages"]["det_convert@mixed"]["params"]["precision_mode"] = "allow_mix_precision"
    m = page_model([cls], {}, workspace="/w", generated="now")
    assert m["data"]["metricDefault"] == "det_eval.top1" and m["metric_cols"][0] == "det_eval.top1"
    assert m["data"]["colourDefault"] == "det_convert.precision_mode"


def test_three_pipelines_in_one_workspace_keep_every_key_metric_column():
    """reid, classification and detection runs in one workspace: six key metrics (each eval and its
    golden), none dropped for a sixth column; the other metrics fill what is left of the cap."""
    classify = run(3, "force_fp16", 0.5)
    classify["pipeline"] = "classify.yaml"
    classify["stages"] = {
        "cls_eval_golden": stage("eval", {"task": "classification"}, {"top1": 0.8, "top5": 0.95}),
        "cls_eval@fp16": stage("eval", {"task": "classification"}, {"top1": 0.79, "top5": 0.95}),
        "infer@fp16": stage("infer", {}, {"throughput": 100.0}),
    }
    m = page_model([run(1, "force_fp16", 0.05), classify, detection_run(2)], {}, workspace="/w", generated="now")
    keys = {"eval.mAP", "eval_golden.mAP", "cls_eval.top1", "cls_eval_golden.top1", "det_eval.mAP50_95",
            "det_eval_golden.mAP50_95"}
    assert set(m["key_metrics"]) == keys
    assert set(m["run_metric_cols"][:6]) == keys and len(m["run_metric_cols"]) == 6


def test_a_fix_attempt_is_labelled_by_the_remedy_it_tried():
    from ascendpipe.explorer.shape import fix_label

    def attempt(*sets):
        return {"argv": ["ascendpipe", "fix", "p.yaml", "eval@fp16", *(f"--set={s}" for s in sets)]}

    assert fix_label({"argv": ["ascendpipe", "build", "p.yaml"]}) is None
    assert fix_label(attempt()) == "the pipeline's settings"  # the baseline, and the restore after the search
    assert fix_label(attempt('stages.convert.matrix.fp16.keep_dtype=["/ReduceSum", "/Sqrt"]',
                             'stages.convert.matrix.fp16.fusion_switch={"TbeReduceElemwiseFusionPass": "off"}')) == (
        "keep /ReduceSum, /Sqrt · TbeReduceElemwiseFusionPass off")
    assert fix_label(attempt("params.seed=3", "stages.convert.matrix.fp16.keep_dtype=[sum,sqrt]")) == "keep sum, sqrt"
    assert fix_label(attempt("stages.quantize.params.skip_layers=[conv1]")) == "float conv1"
    runs = [run(1, "force_fp16", 0.05)]
    runs[0]["argv"] = attempt('stages.convert.matrix.b.keep_dtype=["/Sum"]')["argv"]
    m = page_model(runs, {}, workspace="/w", generated="now")
    assert {r["fix_label"] for r in m["rows"]} == {"keep /Sum"} and m["runs"][0]["fix_label"] == "keep /Sum"


def test_settings_that_differ_come_first():
    runs = [run(1, "force_fp16", 0.05)]
    runs[0]["stages"]["convert@a"]["params"]["soc_version"] = "Ascend310P3"
    runs[0]["stages"]["convert@b"]["params"]["soc_version"] = "Ascend910B1"
    runs[0]["stages"]["convert@a"]["params"]["keep_dtype"] = []
    runs[0]["stages"]["convert@b"]["params"]["keep_dtype"] = []
    m = page_model(runs, {}, workspace="/w", generated="now")
    # precision_mode and soc_version differ (the key one first); keep_dtype, the same in both, after them
    assert m["setting_cols"][:3] == ["convert.precision_mode", "convert.soc_version", "convert.keep_dtype"]


def test_an_integer_tensor_is_marked_so_its_error_is_not_plotted():
    result = {"rows": [
        {"op_name": "shape", "op_type": "Shape", "side": "both", "cosine": 1.0, "max_rel_error": 0.0, "failed": False,
         "dtype": "int64", "golden_dtype": "int64"},
        {"op_name": "conv", "op_type": "Conv", "side": "both", "cosine": 0.99, "max_rel_error": 0.0, "failed": False,
         "dtype": "float16", "golden_dtype": "float32"},
        {"op_name": "mask", "op_type": "Equal", "side": "both", "cosine": 1.0, "max_rel_error": 0.0, "failed": False,
         "dtype": "bool"},
    ], "first_failure": None}
    assert curve(result)["float"] == [False, True, False]


def test_the_overlay_default_skips_a_crashed_run():
    from ascendpipe.explorer.shape import overlay_default

    a, b = {"ops": ["x", "y"], "cosine": [1.0, 1.0]}, {"ops": ["x", "y"], "cosine": [1.0, 0.2]}
    curves = {"a": a, "b": b}
    runs = [{"id": 2, "state": "crashed"}, {"id": 1, "state": "done"}]
    index = {(2, "compare@fp32"): "a", (2, "compare@fp16"): "b", (1, "compare@fp32"): "a", (1, "compare@fp16"): "b"}
    assert sorted(overlay_default(runs, index, curves)) == ["1:compare@fp16", "1:compare@fp32"]
