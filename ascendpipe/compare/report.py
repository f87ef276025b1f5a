"""report.html: one self-contained page (no network): an inline SVG chart of cosine similarity and max
relative error along the graph order with the first failure marked, and a sortable table."""

from __future__ import annotations

import html
import math
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "report" / "templates" / "compare.html.j2"
WIDTH, HEIGHT, PAD_L, PAD_R, PAD_T, PAD_B = 1000, 320, 74, 84, 16, 58


def _finite(v) -> float | None:
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def chart_svg(rows: list[dict], first_index: int | None) -> str:
    """Cosine (left axis, linear 0..1) and max relative error (right axis, log10) per compared row."""
    points = [r for r in rows if r["side"] == "both" and not r.get("empty")]  # an empty tensor has no value to plot
    if not points:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="960" height="40"><text x="10" y="25">no compared tensors</text></svg>'
    n = len(points)
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def x(i: int) -> float:
        return PAD_L + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    cos_vals = [_finite(r["cosine"]) for r in points]
    lo = min([c for c in cos_vals if c is not None] + [0.9])
    lo = max(-1.0, math.floor(lo * 100) / 100)

    def y_cos(c: float) -> float:
        return PAD_T + plot_h * (1.0 - (c - lo) / (1.0 - lo if lo < 1.0 else 1.0))

    rel = [_finite(r["max_rel_error"]) for r in points]
    logs = [math.log10(max(v, 1e-8)) for v in rel if v is not None] or [0.0]
    rmin, rmax = math.floor(min(logs)), math.ceil(max(max(logs), min(logs) + 1))

    def y_rel(v: float) -> float:
        return PAD_T + plot_h * (1.0 - (math.log10(max(v, 1e-8)) - rmin) / (rmax - rmin))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="chart" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
             f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>']
    for k in range(5):  # cosine grid and left labels
        c = lo + (1.0 - lo) * k / 4
        yy = y_cos(c)
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
                     f'<text x="{PAD_L - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#1f77b4">{c:.3f}</text>')
    for e in range(rmin, rmax + 1):
        yy = y_rel(10.0 ** e)
        parts.append(f'<text x="{PAD_L + plot_w + 6}" y="{yy + 4:.1f}" fill="#d62728">1e{e}</text>')
    if first_index is not None:
        pos = next((i for i, r in enumerate(points) if r["index"] == first_index), None)
        if pos is not None:
            parts.append(f'<line x1="{x(pos):.1f}" x2="{x(pos):.1f}" y1="{PAD_T}" y2="{PAD_T + plot_h}" '
                         f'stroke="#d62728" stroke-dasharray="4 3" stroke-width="1.5"/>'
                         f'<text x="{x(pos) + (-4 if pos > n / 2 else 4):.1f}" y="{PAD_T + 12}" fill="#d62728" '
                         f'text-anchor="{"end" if pos > n / 2 else "start"}">first failure: '
                         f'{html.escape(points[pos]["op_name"])}</text>')
    step = max(1, math.ceil(n / 16))  # x ticks: the row index (the table's #) of every step-th compared op
    for i in range(0, n, step):
        parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{PAD_T + plot_h}" y2="{PAD_T + plot_h + 4}" stroke="#999"/>'
                     f'<text class="x-tick" x="{x(i):.1f}" y="{PAD_T + plot_h + 16}" text-anchor="middle" fill="#555">'
                     f'{points[i]["index"]}</text>')
    for series, values, y, colour, width in (("rel", rel, y_rel, "#d62728", 1.5), ("cosine", cos_vals, y_cos, "#1f77b4", 2)):
        for k, run in enumerate(_segments(values)):  # a NaN (inf/NaN in a tensor) is a gap, not a line through it
            pts = " ".join(f"{x(i):.1f},{y(values[i]):.1f}" for i in run)
            parts.append(f'<polyline class="curve-{series}" data-segment="{k}" points="{pts}" fill="none" '
                         f'stroke="{colour}" stroke-width="{width}"/>')
    for i, r in enumerate(points):  # failed points as red dots, with a tooltip per point
        c = cos_vals[i]
        colour = "#d62728" if r["failed"] else "#1f77b4"
        title = (f'<title>#{r["index"]} {html.escape(r["op_name"])} ({html.escape(r["op_type"])}) cosine '
                 f'{c if c is not None else "NaN: the tensor holds inf/NaN"}</title>')
        if c is None:  # no cosine: a hollow mark on the axis, so the gap in the line is explained
            parts.append(f'<circle class="nan-mark" cx="{x(i):.1f}" cy="{PAD_T + plot_h:.1f}" r="4" fill="#fff" '
                         f'stroke="{colour}" stroke-width="1.5">{title}</circle>')
        else:
            parts.append(f'<circle cx="{x(i):.1f}" cy="{y_cos(c):.1f}" r="{3.5 if r["failed"] else 2}" fill="{colour}">{title}</circle>')
    mid = PAD_T + plot_h / 2
    parts.append(f'<text class="axis-title y-left" x="14" y="{mid:.1f}" transform="rotate(-90 14 {mid:.1f})" '
                 f'text-anchor="middle" fill="#1f77b4">cosine similarity</text>'
                 f'<text class="axis-title y-right" x="{WIDTH - 10}" y="{mid:.1f}" transform="rotate(90 {WIDTH - 10} {mid:.1f})" '
                 f'text-anchor="middle" fill="#d62728">max relative error (log10)</text>'
                 f'<text class="axis-title x-axis" x="{PAD_L + plot_w / 2:.1f}" y="{PAD_T + plot_h + 34}" text-anchor="middle" '
                 f'fill="#333">row # of each compared op, in graph order →</text>'
                 f'<text x="{PAD_L}" y="{HEIGHT - 6}" fill="#555">hollow mark on the axis: no cosine (the tensor holds inf/NaN); '
                 f'the lines break there</text>')
    parts.append("</svg>")
    return "".join(parts)


def _segments(values: list) -> list[list[int]]:
    """Indices of each run of finite values: ``[1, None, 2, 3]`` -> ``[[0], [2, 3]]``."""
    runs, cur = [], []
    for i, v in enumerate(values):
        if v is None:
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append(i)
    if cur:
        runs.append(cur)
    return runs


def device_dtypes(rows: list[dict], precision_plan: dict | None) -> list[str | None]:
    """The dtype the device computes each row's op in, from the precision plan (fp16 for a Conv under
    force_fp16), where the dump shows the emulation's tensor dtype; None where the plan says nothing."""
    nodes = (precision_plan or {}).get("nodes") or {}
    out = []
    for r in rows:
        dtype = (nodes.get(r.get("op_name")) or {}).get("dtype")
        out.append(dtype if dtype in ("float16", "float32") else None)
    return out


def report_html(result: dict, doc: dict) -> str:
    """The page for ``result``; ``doc`` is its result.json document (``writers.contract``)."""
    import jinja2

    first = doc["first_failure"]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    device = device_dtypes(doc["rows"], result.get("precision_plan"))
    rows = [{**row, "device_dtype": d} for row, d in zip(doc["rows"], device)]
    return template.render(
        chart=chart_svg(result["rows"], first["index"] if first else None),
        rows=rows,
        first=first,
        verdict=doc.get("verdict"),
        contained=doc.get("contained") or [],
        summary=doc["summary"],
        thresholds=doc["thresholds"],
        input_note=doc.get("input"),
        fmt=_fmt,
    )


def _fmt(v) -> str:
    if v is None:
        return "NaN"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
