"""The runs page's variants tables (pure): one row per run and matrix variant, the setting and metric
columns that tell the rows apart, and, over several pipelines, one table per pipeline with its own
columns, so each pipeline's own settings come first (a reid row has no classify settings to show)."""

from __future__ import annotations

from ascendpipe.explorer.values import (BUILT, KEY_PARAMS, MAX_SETTING_COLUMNS, NO_VARIANT, fix_label, flat,
                                        is_fix_attempt, is_number, key_columns, show, split_name)
from ascendpipe.explorer.values import canon as _canon, first_failure as _first_failure, metric_rank as _metric_rank


def variant_rows(run: dict) -> list[dict]:
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


def pick_setting_columns(rows: list[dict]) -> list[str]:
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


def pick_metric_columns(rows: list[dict], keys: list | tuple = ()) -> tuple[list[str], dict]:
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


def bars(rows: list[dict], columns: list[str]) -> dict:
    """Per metric column: (lo, hi) of the bars: from 0 when no value is negative (a cosine of
    0.999999 and one of 1 draw bars of the same length, not 0% and 100%), else the column's range."""
    out = {}
    for k in columns:
        vs = [r["metrics"][k] for r in rows if k in r["metrics"]]
        if vs:
            out[k] = (min(0.0, min(vs)), max(vs))
    return out


def bar_pct(v, span) -> float:
    lo, hi = span
    if hi == lo:
        return 100.0
    return round(100.0 * (v - lo) / (hi - lo), 1)


def colour_default(rows: list[dict], setting_cols: list[str]) -> str:
    """The setting the chart colours by at first: precision_mode (or precision_mode_v2) when rows set it to different values,
    else the first setting that varies among rows that set it; '' (nothing) when none does: colouring
    by a setting no row sets says nothing."""
    def distinct(col):
        return {show(r["settings"][col]) for r in rows if col in r["settings"] and r["settings"][col] is not None}

    varying = [c for c in setting_cols if len(distinct(c)) > 1]
    modes = [c for c in varying if c.endswith((".precision_mode", ".precision_mode_v2"))]
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


def table(rows: list[dict], keys: list[str]) -> dict:
    """A variants table over ``rows``: its setting columns, its metric columns (the key metrics ``keys``
    first), the metrics equal in every row, and each row's cells."""
    setting_cols = pick_setting_columns(rows)
    metric_cols, constant = pick_metric_columns(rows, keys)
    spans = bars(rows, metric_cols)
    out = []
    for r in rows:
        cells = {k: {"value": r["metrics"][k], "text": show(r["metrics"][k]), "bar": bar_pct(r["metrics"][k], spans[k])}
                 for k in metric_cols if k in r["metrics"]}
        out.append({**r, "cells": cells, "setting_text": {k: show(r["settings"].get(k)) if k in r["settings"] else ""
                                                           for k in setting_cols}})
    return {"rows": out, "setting_cols": setting_cols, "metric_cols": metric_cols,
            "constant_metrics": {k: show(v) for k, v in constant.items()}, "key_metrics": list(keys)}


TABLE_ID = "variants-table"  # the first table's id (one pipeline: the only one); the others get -2, -3...


def pipeline_tables(runs: list[dict], rows: list[dict]) -> list[dict]:
    """One variants table per pipeline, the pipeline of the newest run first (``runs`` newest first): each
    with the settings that tell its own rows apart and its own key metrics. One pipeline: one table."""
    pipelines = list(dict.fromkeys(r.get("pipeline") for r in runs))
    tables = []
    for i, pipeline in enumerate(pipelines):
        mine = [r for r in rows if r["pipeline"] == pipeline]
        if not mine:
            continue
        keys = key_columns([r for r in runs if r.get("pipeline") == pipeline])
        tables.append({"pipeline": pipeline, "id": TABLE_ID if not tables else f"{TABLE_ID}-{len(tables) + 1}",
                       **table(mine, keys)})
    return tables
