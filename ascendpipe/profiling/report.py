"""The terminal table of top op types and the self-contained HTML page (pure: returns text)."""

from __future__ import annotations

from typing import Sequence

from ascendpipe.profiling.msprof_csv import OUTLIER_FACTOR

BAR_WIDTH_PX = 520  # width of the longest bar in the chart


def outlier_note(t: dict) -> str:
    """Why a type's total can dwarf its typical run: '1 run of 11000.0 us (median 35.2 us) is 92% of it'."""
    if not t.get("outliers"):
        return ""
    share = 100.0 * t["outlier_us"] / t["total_us"] if t["total_us"] else 0.0
    runs = "1 run" if t["outliers"] == 1 else f"{t['outliers']} runs"
    return (f"{runs} above {OUTLIER_FACTOR:g}x the median ({t['median_us']:.1f} us), max {t['max_us']:.1f} us: "
            f"{share:.0f}% of the total")


def top_ops_table(totals: Sequence[dict], *, limit: int = 10) -> str:
    """Plain-text table of the op types taking the most time (rows from ``op_type_totals``), ranked by
    their median time per run (``msprof_csv.ranked``: one slow run does not move a type up), device
    ops first, host-side ops (HOST_CPU: onnxruntime's layout reorders, not the device's) after their
    subtotal. Totals add every run of every iteration; the max beside the median flags an outlier."""
    from ascendpipe.profiling.msprof_csv import ranked, subtotals

    rows = ranked(totals)
    header = ("OP Type", "Core Type", "Count", "Median/run(us)", "Total(us)", "Max(us)", "Share(%)")
    body = [(t["op_type"], t["core_type"], str(t["count"]),
             f"{t.get('median_per_run_us', t.get('per_iteration_us', t['total_us'])):.1f}", f"{t['total_us']:.1f}",
             f"{t['max_us']:.1f}", f"{t['share_pct']:.1f}") for t in rows]
    device = [b for b, t in zip(body, rows) if not t["host"]][:limit]
    host = [b for b, t in zip(body, rows) if t["host"]]
    widths = [max(len(r[i]) for r in [header, *device, *host]) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "  ".join("-" * w for w in widths)
    sums = subtotals(totals)
    rest = sum(1 for t in rows if not t["host"]) - len(device)
    out = [line(header), rule, *map(line, device)]
    out += [f"... {rest} more op types"] if rest > 0 else []
    if host:
        out += [f"host-side (not on the device): {sums['host_us']:.1f} us, {sums['host_pct']:.1f}% of kernel time; "
                f"device ops: {sums['compute_us']:.1f} us", *map(line, host)]
    out += [f"outlier: {t['op_type']}{' (host-side)' if t['host'] else ''}: {outlier_note(t)}"
            for t in rows if outlier_note(t) and (t["host"] or t in rows[:limit])]
    return "\n".join(out)


def bars(totals: Sequence[dict]) -> list[dict]:
    """Chart geometry: one bar per op type (ranked), scaled to the largest median per run."""
    from ascendpipe.profiling.msprof_csv import ranked

    rows = ranked(totals)

    def value(t):
        return t.get("median_per_run_us", t["total_us"])

    largest = max((value(t) for t in rows), default=0.0)
    return [{**t, "value_us": value(t), "width": round(BAR_WIDTH_PX * value(t) / largest, 1) if largest else 0.0}
            for t in rows]


def op_instances(ops: Sequence) -> list[dict]:
    """Per model op (Op Name): its type, the kernels that ran for it, the model nodes they compute,
    kernels per run, and its time per run (median and max over the runs), largest median first."""
    runs = sorted({op.iteration for op in ops})
    per: dict[str, dict] = {}
    for op in ops:
        entry = per.setdefault(op.op_name, {"op_name": op.op_name, "op_type": op.op_type, "core_type": op.task_type,
                                            "kernels": {}, "sources": {}, "per_run": {}, "count": 0})
        entry["kernels"][op.kernel_name or op.op_name] = None
        entry["sources"].update(dict.fromkeys(op.sources))
        entry["per_run"][op.iteration] = entry["per_run"].get(op.iteration, 0.0) + op.duration_us
        entry["count"] += 1
    out = []
    for entry in per.values():
        values = sorted(entry["per_run"].get(i, 0.0) for i in runs)
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        out.append({**entry, "kernels": list(entry["kernels"]), "sources": list(entry["sources"]),
                    "kernels_per_run": entry["count"] / max(len(runs), 1), "median_us": median,
                    "max_us": values[-1] if values else 0.0})
    return sorted(out, key=lambda r: (-r["median_us"], r["op_name"]))


TIMELINE_ROWS = ("AI_CORE", "AI_VECTOR_CORE", "HOST_CPU")


def timeline_rects(data, *, width: int = 900) -> dict:
    """The median-length profiled run as rectangles: x from its start, one row per task type."""
    if not data.iterations:
        return {"rects": [], "iteration": None, "duration_us": 0.0, "width": width}
    ordered = sorted(data.iterations, key=lambda it: it.duration_us)
    it = ordered[len(ordered) // 2]
    scale = width / it.duration_us if it.duration_us > 0 else 0.0
    rects = [{"x": round((op.start_us - it.start_us) * scale, 2), "w": max(0.5, round(op.duration_us * scale, 2)),
              "row": TIMELINE_ROWS.index(op.task_type) if op.task_type in TIMELINE_ROWS else len(TIMELINE_ROWS) - 1,
              "core_type": op.task_type, "label": f"{op.op_name} ({op.op_type}; kernel {op.kernel_name or op.op_name}): "
                                                   f"{op.duration_us:.1f} us"}
             for op in data.ops if op.iteration == it.index]
    return {"rects": rects, "iteration": it.index, "duration_us": it.duration_us, "width": width}


def render_profile_html(*, title: str, totals: Sequence[dict], latency: dict, batch_size: int,
                        iterations: int | None = None, session: dict | None = None, emulation_pct: float | None = None,
                        attributed_pct: float | None = None, data=None, emulated: bool = False) -> str:
    """``emulated``: the times are onnxruntime's on the host CPU (the page says so, and that a core type is
    where the op would run on the device)."""
    import jinja2  # only when a report is rendered

    from ascendpipe.profiling.msprof_csv import subtotals

    env = jinja2.Environment(loader=jinja2.PackageLoader("ascendpipe", "report/templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]))
    template = env.get_template("profile.html.j2")
    rows = [{**b, "outlier_note": outlier_note(b)} for b in bars(totals)]
    return template.render(title=title, bars=rows, latency=latency, batch_size=batch_size,
                           bar_width=BAR_WIDTH_PX, iterations=iterations, outlier_factor=OUTLIER_FACTOR,
                           session=session or {}, emulation_pct=emulation_pct, attributed_pct=attributed_pct,
                           sums=subtotals(totals), instances=op_instances(data.ops) if data is not None else [],
                           timeline=timeline_rects(data) if data is not None else None,
                           timeline_rows=TIMELINE_ROWS, emulated=emulated)
