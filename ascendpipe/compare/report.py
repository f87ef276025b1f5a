"""report.html: one self-contained page (no network): an inline SVG chart of cosine similarity and max
relative error along the graph order with the first failure marked, and a sortable table."""

from __future__ import annotations

import html
import math
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "report" / "templates" / "compare.html.j2"
WIDTH, HEIGHT, PAD_L, PAD_R, PAD_T, PAD_B = 960, 300, 56, 64, 16, 36


def _finite(v) -> float | None:
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def chart_svg(rows: list[dict], first_index: int | None) -> str:
    """Cosine (left axis, linear 0..1) and max relative error (right axis, log10) per compared row."""
    points = [r for r in rows if r["side"] == "both"]
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
                         f'<text x="{x(pos) + 4:.1f}" y="{PAD_T + 12}" fill="#d62728">first failure: '
                         f'{html.escape(points[pos]["op_name"])}</text>')
    cos_line = " ".join(f"{x(i):.1f},{y_cos(c):.1f}" for i, c in enumerate(cos_vals) if c is not None)
    rel_line = " ".join(f"{x(i):.1f},{y_rel(v):.1f}" for i, v in enumerate(rel) if v is not None)
    parts.append(f'<polyline points="{rel_line}" fill="none" stroke="#d62728" stroke-width="1.5"/>')
    parts.append(f'<polyline points="{cos_line}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for i, r in enumerate(points):  # failed points as red dots, with a tooltip per point
        c = cos_vals[i]
        yy = y_cos(c) if c is not None else PAD_T + plot_h
        colour = "#d62728" if r["failed"] else "#1f77b4"
        parts.append(f'<circle cx="{x(i):.1f}" cy="{yy:.1f}" r="{3.5 if r["failed"] else 2}" fill="{colour}">'
                     f'<title>#{r["index"]} {html.escape(r["op_name"])} ({html.escape(r["op_type"])}) cosine '
                     f'{c if c is not None else "NaN"}</title></circle>')
    parts.append(f'<text x="{PAD_L}" y="{HEIGHT - 8}" fill="#1f77b4">— cosine similarity (left)</text>'
                 f'<text x="{PAD_L + 220}" y="{HEIGHT - 8}" fill="#d62728">— max relative error (right, log)</text>'
                 f'<text x="{PAD_L + plot_w}" y="{HEIGHT - 8}" text-anchor="end" fill="#555">graph order →</text>')
    parts.append("</svg>")
    return "".join(parts)


def report_html(result: dict, doc: dict) -> str:
    """The page for ``result``; ``doc`` is its result.json document (``writers.contract``)."""
    import jinja2

    first = doc["first_failure"]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    return template.render(
        chart=chart_svg(result["rows"], first["index"] if first else None),
        rows=doc["rows"],
        first=first,
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
