"""Run records -> the explorer page's model. Pure: records and compare results are handed in.

The page has four views over one set of runs: the runs table (one row per build), the variants
table (one row per run and matrix variant: the unit an engineer compares when sweeping precision
settings), the diff of two runs, the per-op curves of two compare stages overlaid, and a
metric-by-setting chart. The tables are rendered on the server; the diff, the overlay and the chart
are drawn in the page from the JSON this module builds, so they can be re-chosen there.
"""

from __future__ import annotations

import json
from datetime import datetime

from ascendpipe.explorer import variants as vt
# fix_label, flat, is_fix_attempt, is_number and show are read from here too (tests, the mlflow export)
from ascendpipe.explorer.values import (BUILT, canon as _canon, fix_label, flat, is_fix_attempt, is_number,
                                        key_columns, metric_rank as _metric_rank, show, split_name)

MAX_RUN_METRIC_COLUMNS = 5


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def curve(result: dict) -> dict:
    """One compare result -> the per-op series the overlay draws (compared rows only, graph order)."""
    ops, types, cos, rel, failed, floats = [], [], [], [], [], []
    for row in result.get("rows") or []:
        if row.get("side", "both") != "both":
            continue
        ops.append(row.get("op_name"))
        types.append(row.get("op_type"))
        c, r = row.get("cosine"), row.get("max_rel_error")
        cos.append(round(c, 7) if is_number(c) else None)
        rel.append(float(f"{r:.4g}") if is_number(r) else None)
        failed.append(bool(row.get("failed")))
        floats.append(is_float_row(row))
    first = result.get("first_failure")
    return {
        # float: False for an integer or bool tensor, whose relative error is no fp16 loss: not
        # plotted on the log axis (a 0 there would sit at its floor, looking like a measurement)
        "ops": ops, "types": types, "cosine": cos, "max_rel_error": rel, "failed": failed, "float": floats,
        "first_failure": first and {k: first.get(k) for k in ("op_name", "op_type", "reason")},
    }


def is_float_row(row: dict) -> bool:
    """Whether a compare row's tensor is a float one (its golden dtype, else the target's)."""
    if row.get("float_tensor") is not None:
        return bool(row["float_tensor"])
    dtype = str(row.get("golden_dtype") or row.get("dtype") or "float").lower()
    return not dtype.startswith(("int", "uint", "bool"))


def curve_distance(a: dict, b: dict) -> float:
    """How differently two compare stages see the graph: the mean |cosine A - cosine B| over the ops
    both compared (an op whose cosine is NaN on one side only counts as 1), plus the output cosines'."""
    ca, cb = dict(zip(a["ops"], a["cosine"])), dict(zip(b["ops"], b["cosine"]))
    shared = [op for op in a["ops"] if op in cb]
    if not shared:
        return 1.0 + abs(len(a["ops"]) - len(b["ops"]))
    diffs = [(abs(ca[op] - cb[op]) if ca[op] is not None and cb[op] is not None else
              (0.0 if ca[op] is None and cb[op] is None else 1.0)) for op in shared]
    last_a = next((v for v in reversed(a["cosine"]) if v is not None), 0.0)
    last_b = next((v for v in reversed(b["cosine"]) if v is not None), 0.0)
    return sum(diffs) / len(diffs) + abs(last_a - last_b)


def overlay_default(runs: list[dict], curve_of: dict, curves: dict) -> list[str]:
    """The overlay's two compare stages when the URL names none: the two that differ most, looked for
    in the newest run with two different curves (a sweep's own variants), else over every run.
    Two identical curves (a restored stage in two runs) never make the default when another pair differs."""
    ids = [(f"{run_id}:{stage}", run_id, curve_of[(run_id, stage)]) for run_id, stage in curve_of]
    ids.sort(key=lambda t: (-t[1], t[0]))

    def best(cands):
        top, pair = 0.0, None
        for i, (ia, _, da) in enumerate(cands):
            for ib, _, db in cands[i + 1:]:
                if da == db:
                    continue
                d = curve_distance(curves[da], curves[db])
                if d > top:
                    top, pair = d, [ia, ib]
        return pair

    finished = [r for r in runs if r.get("state") == "done"]  # a crashed run holds what it got to, not a result
    for run in finished + [r for r in runs if r.get("state") != "done"]:  # newest first
        pair = best([c for c in ids if c[1] == run["id"]])
        if pair:
            return pair
    return best(ids) or [c[0] for c in ids[:2]]


def _remedies(stage_name: str, st: dict, blobs: dict) -> list[dict]:
    out = []
    for rf in st.get("remedy_files") or []:
        if rf.get("content") is not None:
            blobs.setdefault(rf["hash"], rf["content"])
        out.append({"stage": stage_name, "name": rf["name"], "path": rf.get("path"), "hash": rf["hash"]})
    return out


def _run_json(run: dict, blobs: dict, curve_of: dict) -> dict:
    stages = {}
    for name, st in (run.get("stages") or {}).items():
        base, variant = split_name(name)
        entry = {
            "base": base, "variant": variant, "kind": st.get("kind"), "state": st.get("state"),
            "params": {k: show(v) for k, v in flat(st.get("params")).items()},
            "metrics": {k: (v if is_number(v) else show(v)) for k, v in flat(st.get("metrics")).items()},
            "remedy": _remedies(name, st, blobs),
            "key": st.get("key"),
        }
        if (run["id"], name) in curve_of:
            entry["curve"] = curve_of[(run["id"], name)]
        stages[name] = entry
    return {"id": run["id"], "pipeline": run.get("pipeline"), "started": run.get("started"), "state": run.get("state"),
            "backend": run.get("backend"), "fix_attempt": is_fix_attempt(run), "fix_label": fix_label(run),
            "stages": stages}


def _changed_params(prev: dict | None, run: dict) -> list[str]:
    """``stage.param`` names whose value differs from the previous run of the same pipeline."""
    if prev is None:
        return []
    changed = []
    for name, st in run["stages"].items():
        old = prev["stages"].get(name)
        if old is None:
            continue
        a, b = flat(old.get("params")), flat(st.get("params"))
        changed += [f"{name}.{k}" for k in sorted(set(a) | set(b)) if _canon(a.get(k)) != _canon(b.get(k))]
    added = [n for n in run["stages"] if n not in prev["stages"]]
    return changed + [f"+{n}" for n in added]


def _range_cell(values: list[float]) -> dict | None:
    if not values:
        return None
    lo, hi = min(values), max(values)
    text = show(lo) if lo == hi else f"{show(lo)} … {show(hi)}"
    return {"text": text, "sort": hi, "title": f"{len(values)} stage(s): min {show(lo)}, max {show(hi)}"}


def fill_from_same_key(runs: list[dict]) -> list[dict]:
    """Stages recorded as fresh carry no remedy files or info (a no-op build records only what it
    decided), restored ones no remedy files; a stage with the same key built the same outputs, so
    theirs are the same: copy them from the run that has them."""
    known: dict[str, dict[str, object]] = {"remedy_files": {}, "info": {}}
    for run in runs:
        for st in (run.get("stages") or {}).values():
            for field, seen in known.items():
                if st.get("key") and st.get(field) and st["key"] not in seen:
                    seen[st["key"]] = st[field]
    for run in runs:
        for st in (run.get("stages") or {}).values():
            if st.get("state") not in BUILT:
                continue
            for field, seen in known.items():
                if not st.get(field) and st.get("key") in seen:
                    value = seen[st["key"]]
                    st[field] = [dict(v) for v in value] if isinstance(value, list) else dict(value)
    return runs


def page_model(runs: list[dict], curves: dict, *, workspace: str, generated: str, curve_index: dict | None = None) -> dict:
    """``runs``: run records (``show --json`` shape, remedy contents included), newest first.
    ``curves``: compare-output digest -> ``curve()``; ``curve_index``: (run id, stage) -> digest."""
    curve_index = curve_index or {}
    runs = fill_from_same_key(sorted(runs, key=lambda r: r["id"], reverse=True))
    blobs: dict[str, str] = {}
    by_pipeline_prev: dict[int, dict] = {}
    last_of: dict[str, dict] = {}
    for run in sorted(runs, key=lambda r: r["id"]):
        by_pipeline_prev[run["id"]] = last_of.get(run.get("pipeline"))
        last_of[run.get("pipeline")] = run

    variant_rows: list[dict] = []
    for run in runs:
        variant_rows += vt.variant_rows(run)
    keys = key_columns(runs)
    whole = vt.table(variant_rows, keys)  # every row in one table (the model's rows; the page's with one pipeline)
    setting_cols = whole["setting_cols"]
    tables = vt.pipeline_tables(runs, variant_rows)
    # the chart colours by any table's setting: each pipeline's own first
    chart_settings = list(dict.fromkeys(c for t in tables for c in t["setting_cols"])) if len(tables) > 1 else setting_cols

    # runs table: a few key metrics as columns (a range over the run's stages of that base), those
    # that differ between runs first
    all_metrics = sorted({k for r in variant_rows for k in r["metrics"]}, key=lambda k: _metric_rank(k, keys))
    per_run = {run["id"]: _run_metrics(run) for run in runs}
    seen_values: dict[str, set] = {}
    for values in per_run.values():
        for k, vs in values.items():
            seen_values.setdefault(k, set()).add(tuple(sorted(vs)))
    # the pipelines' key metrics first, then varying metrics, among them the others of KEY_METRICS in
    # that order (accuracy before a timing, which varies in every run because it is noisy, not
    # because a setting moved it)
    ranked = sorted(seen_values, key=lambda k: (k not in keys, len(seen_values[k]) == 1, _metric_rank(k, keys),
                                                -len(seen_values[k])))
    # every pipeline's key metric keeps its column (several pipelines in one workspace: each golden
    # beside its variants); the others fill what is left of MAX_RUN_METRIC_COLUMNS
    keyed = [k for k in ranked if k in keys]
    run_metric_cols = keyed + [k for k in ranked if k not in keys][:max(0, MAX_RUN_METRIC_COLUMNS - len(keyed))]
    run_rows = []
    for run in runs:
        stages = run.get("stages") or {}
        counts: dict[str, int] = {}
        for st in stages.values():
            counts[st.get("state") or "?"] = counts.get(st.get("state") or "?", 0) + 1
        variants: dict[str, list[str]] = {}
        for name in stages:
            base, variant = split_name(name)
            if variant is not None:
                variants.setdefault(variant, []).append(base)
        modes = []
        for name, st in stages.items():
            params = st.get("params") or {}
            # precision_mode_v2's values name modes too (fp16, mixed_bfloat16, origin...): marked as v2's
            for mode in (params.get("precision_mode"), f"{params['precision_mode_v2']} (v2)"
                         if params.get("precision_mode_v2") else None):
                if mode and mode not in modes:
                    modes.append(mode)
        remedy = [{"stage": n, "name": rf["name"], "hash": rf["hash"], "content": rf.get("content")}
                  for n, st in stages.items() for rf in st.get("remedy_files") or []]
        metric_cells = {k: _range_cell(per_run[run["id"]].get(k, [])) for k in run_metric_cols}
        t0, t1 = _time(run.get("started")), _time(run.get("finished"))
        run_rows.append({
            "id": run["id"], "pipeline": run.get("pipeline"), "started": run.get("started") or "",
            "started_short": t0.strftime("%Y-%m-%d %H:%M:%S") if t0 else (run.get("started") or ""),
            "duration": (t1 - t0).total_seconds() if t0 and t1 else None,
            "state": run.get("state"), "backend": run.get("backend"), "counts": counts,
            "variants": list(variants), "modes": modes, "remedy": remedy, "metrics": metric_cells,
            "changed": _changed_params(by_pipeline_prev[run["id"]], run),
            "argv": " ".join(run.get("argv") or []),
            "fix_attempt": is_fix_attempt(run), "fix_label": fix_label(run),
        })

    curve_of = {}
    for (run_id, stage), digest in curve_index.items():
        if digest in curves:
            curve_of[(run_id, stage)] = digest
    data = {
        "workspace": workspace, "generated": generated,
        "overlayDefault": overlay_default(runs, curve_of, curves),
        "runs": [_run_json(run, blobs, curve_of) for run in runs],
        "rows": [{"run": r["run"], "pipeline": r["pipeline"], "variant": r["variant"],
                  "settings": {k: show(v) for k, v in r["settings"].items()}, "metrics": r["metrics"]} for r in variant_rows],
        "references": _references(runs),
        "curves": {d: curves[d] for d in sorted(set(curve_of.values()))},
        "blobs": blobs,
        "metricColumns": all_metrics,
        "keyMetrics": keys,
        "metricDefault": vt.metric_default(variant_rows, [k for k in keys if k in all_metrics], all_metrics),
        "colourDefault": vt.colour_default(variant_rows, chart_settings),
        "kinds": {split_name(n)[0]: st.get("kind") for run in runs for n, st in (run.get("stages") or {}).items()},
        "settingColumns": chart_settings,
    }
    pipelines = list(dict.fromkeys(r.get("pipeline") for r in runs))
    return {
        "workspace": workspace, "generated": generated, "pipelines": pipelines,
        "runs": run_rows, "run_metric_cols": run_metric_cols, "key_metrics": keys,
        "rows": whole["rows"], "setting_cols": setting_cols, "metric_cols": whole["metric_cols"],
        "constant_metrics": whole["constant_metrics"], "tables": tables,
        "n_compare": len(curve_of), "data": data,
    }


def _run_metrics(run: dict) -> dict[str, list]:
    """``base.metric`` -> the values of every built stage of that base in the run."""
    out: dict[str, list] = {}
    for name, st in (run.get("stages") or {}).items():
        if st.get("state") in BUILT:
            for k, v in flat(st.get("metrics")).items():
                if is_number(v):
                    out.setdefault(f"{split_name(name)[0]}.{k}", []).append(v)
    return out


def _references(runs: list[dict]) -> list[dict]:
    """Metrics of stages outside any matrix (a golden eval, the export check): reference lines in
    the metric chart for the variants' metric of the same kind and name."""
    refs = []
    for run in runs:
        for name, st in (run.get("stages") or {}).items():
            base, variant = split_name(name)
            if variant is not None or st.get("state") not in BUILT:
                continue
            for k, v in flat(st.get("metrics")).items():
                if is_number(v):
                    refs.append({"run": run["id"], "stage": name, "kind": st.get("kind"), "metric": k, "value": v})
    return refs


def json_for_html(data) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>`` can end it early)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")
