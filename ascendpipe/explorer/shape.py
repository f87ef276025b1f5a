"""Run records -> the explorer page's model. Pure: records and compare results are handed in.

The page has four views over one set of runs: the runs table (one row per build), the variants
table (one row per run and matrix variant: the unit an engineer compares when sweeping precision
settings), the diff of two runs, the per-op curves of two compare stages overlaid, and a
metric-by-setting chart. The tables are rendered on the server; the diff, the overlay and the chart
are drawn in the page from the JSON this module builds, so they can be re-chosen there.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

# Metrics an engineer looks at first, in this order; any other numeric metric follows.
KEY_METRICS = ("mAP", "top1", "accuracy", "acc", "rank1", "map50", "map", "top5", "rank5", "output_cosine", "min_cosine",
               "failed_ops", "overflow_ops", "latency_ms", "throughput")
# Settings always shown in the variants table when present, whether or not they vary.
KEY_PARAMS = ("precision_mode", "precision_mode_v2", "keep_dtype")
MAX_SETTING_COLUMNS = 12
MAX_RUN_METRIC_COLUMNS = 5
BUILT = ("ran", "restored", "fresh")
NO_VARIANT = "—"


def flat(d, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (as ``ascendpipe diff`` flattens)."""
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def show(v) -> str:
    """A value as a table cell shows it."""
    if v is None:
        return NO_VARIANT
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list) and all(not isinstance(x, (list, dict)) for x in v):
        return ", ".join(show(x) for x in v) if v else "[]"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    return str(v)


def _canon(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def split_name(name: str) -> tuple[str, str | None]:
    base, at, variant = name.partition("@")
    return base, (variant if at else None)


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def _metric_rank(name: str, keys: list | tuple = ()) -> tuple:
    """Sort key of ``base.metric`` columns: the pipelines' key metrics (``keys``, from their eval
    stages' tasks) first, then the other KEY_METRICS in that order, then the rest by name."""
    if name in keys:
        return (0, list(keys).index(name), name)
    metric = name.split(".", 1)[1] if "." in name else name
    try:
        return (1, KEY_METRICS.index(metric), name)
    except ValueError:
        return (2, 0, name)


def key_columns(runs: list[dict]) -> list[str]:
    """``base.metric`` of each eval stage's key metric (mAP50_95 for detection, top1 for
    classification, mAP for reid: ``ascendpipe.contract.KEY_METRIC``), variant stages' first."""
    from ascendpipe.contract import key_metric

    found: dict[str, bool] = {}
    for run in runs:
        for name, st in (run.get("stages") or {}).items():
            metric = key_metric(st.get("kind"), st.get("params"))
            if metric:
                col = f"{split_name(name)[0]}.{metric}"
                found[col] = found.get(col, False) or split_name(name)[1] is not None
    return sorted(found, key=lambda c: not found[c])


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


# the params a fix attempt changes, as its label shows them
_FIX_PARAMS = {"keep_dtype": "keep", "fusion_switch": "", "skip_layers": "float"}


def fix_label(run: dict) -> str | None:
    """What a ``fix`` attempt tried, from its argv's ``--set`` lines: ``keep /ReduceSum, /Sqrt ·
    TbeReduceElemwiseFusionPass off``; ``the pipeline's settings`` for the baseline and the restore
    (no remedy set). None for a run fix did not make."""
    if not is_fix_attempt(run):
        return None
    parts = []
    for arg in run.get("argv") or []:
        if not str(arg).startswith("--set="):
            continue
        key, _, value = str(arg)[len("--set="):].partition("=")
        param = key.rsplit(".", 1)[-1]
        if param not in _FIX_PARAMS:
            continue
        import yaml  # the --set grammar: the value is YAML (fix writes JSON, a person may write [a,b])

        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        if isinstance(parsed, dict):
            parts += [f"{k} {v}" for k, v in parsed.items()]
        elif isinstance(parsed, list):
            parts.append(f"{_FIX_PARAMS[param]} {', '.join(map(str, parsed))}" if parsed else f"{param} []")
        else:
            parts.append(f"{param} {parsed}")
    return " · ".join(parts) if parts else "the pipeline's settings"


def is_fix_attempt(run: dict) -> bool:
    """A build that ``ascendpipe fix`` made (its argv says so): one attempt of a remedy search."""
    argv = list(run.get("argv") or [])
    return len(argv) >= 2 and argv[1] == "fix"


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


def _first_failure(st: dict) -> str | None:
    ff = (st.get("info") or {}).get("first_failure")
    if not isinstance(ff, dict) or not ff.get("op_name"):
        return None
    kind = ff.get("kind")
    return f"{ff['op_name']} ({kind})" if kind else ff["op_name"]


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


def _variant_rows(run: dict) -> list[dict]:
    """One row per matrix variant of a run (its variant stages); a run without variants is one row."""
    groups: dict[str | None, list[str]] = {}
    for name in run["stages"]:
        groups.setdefault(split_name(name)[1], []).append(name)
    keys = [k for k in groups if k is not None] or [None]
    rows = []
    for key in keys:
        names = groups.get(key, [])
        settings, metrics, remedy, failures, states = {}, {}, [], [], []
        for name in names:
            st = run["stages"][name]
            base = split_name(name)[0]
            for k, v in flat(st.get("params")).items():
                settings[f"{base}.{k}"] = v
            if st.get("state") in BUILT:
                for k, v in flat(st.get("metrics")).items():
                    if is_number(v):
                        metrics[f"{base}.{k}"] = v
            remedy += [{**r, "stage": name} for r in st.get("remedy_files") or []]
            ff = _first_failure(st)
            if ff:
                failures.append(ff)
            states.append(st.get("state"))
        failed = [n for n in names if run["stages"][n].get("state") in ("failed", "skipped")]
        rows.append({"run": run["id"], "pipeline": run.get("pipeline"), "variant": key or NO_VARIANT, "stages": names,
                     "settings": settings, "metrics": metrics, "remedy": remedy,
                     "first_failure": "; ".join(dict.fromkeys(failures)) or None, "failed": failed,
                     "fix_attempt": is_fix_attempt(run), "fix_label": fix_label(run)})
    return rows


def _pick_setting_columns(rows: list[dict]) -> list[str]:
    seen: dict[str, set] = {}
    order: list[str] = []
    for r in rows:
        for k, v in r["settings"].items():
            if k not in seen:
                seen[k] = set()
                order.append(k)
            seen[k].add(_canon(v))
    for r in rows:  # a setting missing from a row differs from one that is there
        for k in order:
            if k not in r["settings"]:
                seen[k].add("<absent>")
    # what tells the variants apart first: the settings that differ (the key ones among them first),
    # then the key ones every row shares
    key = [k for k in order if k.split(".", 1)[1] in KEY_PARAMS]
    varying = [k for k in order if len(seen[k]) > 1]
    cols = [k for k in varying if k in key] + [k for k in varying if k not in key] + [k for k in key if k not in varying]
    return cols[:MAX_SETTING_COLUMNS]


def _pick_metric_columns(rows: list[dict], keys: list | tuple = ()) -> tuple[list[str], dict]:
    """Metric columns, the key metrics first (constant ones folded away when there are enough rows to
    compare; a key metric never is)."""
    values: dict[str, list] = {}
    for r in rows:
        for k, v in r["metrics"].items():
            values.setdefault(k, []).append(v)
    names = sorted(values, key=lambda k: _metric_rank(k, keys))
    constant = {}
    if len(rows) >= 3:
        for k in names:
            if k in keys:
                continue
            vs = values[k]
            if len(vs) == len(rows) and len(set(vs)) == 1:
                constant[k] = vs[0]
    return [k for k in names if k not in constant], constant


def _bars(rows: list[dict], columns: list[str]) -> dict:
    """Per metric column: (lo, hi) of the bars: from 0 when no value is negative (a cosine of
    0.999999 and one of 1 draw bars of the same length, not 0% and 100%), else the column's range."""
    out = {}
    for k in columns:
        vs = [r["metrics"][k] for r in rows if k in r["metrics"]]
        if vs:
            out[k] = (min(0.0, min(vs)), max(vs))
    return out


def _bar_pct(v, span) -> float:
    lo, hi = span
    if hi == lo:
        return 100.0
    return round(100.0 * (v - lo) / (hi - lo), 1)


def colour_default(rows: list[dict], setting_cols: list[str]) -> str:
    """The setting the chart colours by at first: precision_mode when rows set it to different values,
    else the first setting that varies among rows that set it; '' (nothing) when none does: colouring
    by a setting no row sets says nothing."""
    def distinct(col):
        return {show(r["settings"][col]) for r in rows if col in r["settings"] and r["settings"][col] is not None}

    varying = [c for c in setting_cols if len(distinct(c)) > 1]
    modes = [c for c in varying if c.endswith(".precision_mode")]
    return (modes or varying or [""])[0]


def metric_default(rows: list[dict], keys: list[str], columns: list[str]) -> str | None:
    """The chart's first metric: a key metric that several variant rows have, else the first key
    metric any row has, else the first column."""
    counts = {k: sum(1 for r in rows if k in r["metrics"]) for k in keys}
    for k in keys:
        if counts[k] > 1:
            return k
    for k in keys:
        if counts[k]:
            return k
    return columns[0] if columns else None


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
        variant_rows += _variant_rows(run)
    setting_cols = _pick_setting_columns(variant_rows)
    keys = key_columns(runs)
    metric_cols, constant_metrics = _pick_metric_columns(variant_rows, keys)
    spans = _bars(variant_rows, metric_cols)

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
            mode = (st.get("params") or {}).get("precision_mode")
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

    rows_out = []
    for r in variant_rows:
        cells = {k: {"value": r["metrics"][k], "text": show(r["metrics"][k]), "bar": _bar_pct(r["metrics"][k], spans[k])}
                 for k in metric_cols if k in r["metrics"]}
        rows_out.append({**r, "cells": cells, "setting_text": {k: show(r["settings"].get(k)) if k in r["settings"] else ""
                                                                for k in setting_cols}})

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
        "metricDefault": metric_default(variant_rows, [k for k in keys if k in all_metrics], all_metrics),
        "colourDefault": colour_default(variant_rows, setting_cols),
        "kinds": {split_name(n)[0]: st.get("kind") for run in runs for n, st in (run.get("stages") or {}).items()},
        "settingColumns": setting_cols,
    }
    pipelines = list(dict.fromkeys(r.get("pipeline") for r in runs))
    return {
        "workspace": workspace, "generated": generated, "pipelines": pipelines,
        "runs": run_rows, "run_metric_cols": run_metric_cols, "key_metrics": keys,
        "rows": rows_out, "setting_cols": setting_cols, "metric_cols": metric_cols,
        "constant_metrics": {k: show(v) for k, v in constant_metrics.items()},
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
