"""report.html: one self-contained page (no network): an inline SVG chart of cosine similarity and max
relative error along the graph order with the first failure marked, and a sortable table."""

from __future__ import annotations

import html
import math
from pathlib import Path

from ascendpipe.compare import shown

TEMPLATE = Path(__file__).resolve().parent.parent / "report" / "templates" / "compare.html.j2"
WIDTH, HEIGHT, PAD_L, PAD_R, PAD_T, PAD_B = 1000, 350, 74, 84, 34, 74
_RED, _BLUE = "#d62728", "#1f77b4"


def _finite(v) -> float | None:
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def cosine_ticks(low: float) -> tuple[float, list[float], int]:
    """A round lower end for a cosine axis whose data reach down to ``low``, its ticks (at most 6,
    round steps: 0.730, 0.797 never) and the decimals they need."""
    low = max(-1.0, min(low, 0.99))
    for step in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5):
        lo = math.floor(round(low / step, 9)) * step
        if (1.0 - lo) / step <= 5.0 + 1e-9:
            break
    lo = max(-1.0, lo)
    ticks = [round(lo + k * step, 6) for k in range(int(round((1.0 - lo) / step)) + 1)]
    decimals = max(1, -math.floor(math.log10(step)) + (1 if round(step / 10 ** math.floor(math.log10(step)), 6) == 2.5 else 0))
    return lo, ticks, decimals


def rel_scale(points: list[dict]) -> tuple[int, int, int | None]:
    """(low, high) decades of the max-relative-error axis and the decade it is clipped at (or None):
    a passing op's large error (near-zero golden values) may not squeeze the failing ops' range, so
    the axis ends a decade above the largest failing error when passing ops go 3+ decades beyond it."""
    finite = [(math.log10(max(v, 1e-8)), r["failed"]) for r in points if (v := _finite(r["max_rel_error"])) is not None]
    if not finite:
        return -1, 0, None
    lo = math.floor(min(v for v, _ in finite))
    hi = math.ceil(max(max(v for v, _ in finite), lo + 1))
    failing = [v for v, f in finite if f]
    if failing and hi - math.ceil(max(failing)) >= 3:
        top = max(math.ceil(max(failing)) + 1, lo + 1)
        return lo, top, top
    return lo, hi, None


def _tip(r: dict) -> str:
    number = shown.values(r)

    def val(key):
        v = number[key]
        return f"{v:.6g}" if v is not None else f"{shown.NA} ({shown.why_missing(r, key)})"
    why = "; ".join(r.get("reasons") or []) or r.get("note") or ""
    return html.escape(f"#{r['index']} {r['op_name']} ({r['op_type']})\ncosine {val('cosine')}"
                       f"\nmax relative error {val('max_rel_error')}"
                       + ("\nFAILS the thresholds" + (f": {why}" if why else "") if r["failed"] else ""))


def _edge_mark(x: float, y: float, up: bool, colour: str, cls: str, index: int, tip: str) -> str:
    """A filled triangle at the plot's edge for a value off the scale (inf, NaN, beyond the axis)."""
    d = -1 if up else 1
    return (f'<path class="{cls}" data-index="{index}" d="M{x - 5:.1f},{y - 4 * d:.1f} L{x + 5:.1f},{y - 4 * d:.1f} '
            f'L{x:.1f},{y + 4 * d:.1f} Z" fill="{colour}" stroke="#fff" stroke-width="0.8"><title>{tip}</title></path>')


def _legend(x0: float, y: float, clipped: int | None) -> str:
    items = [(f'<line x1="0" x2="18" y1="0" y2="0" stroke="{_BLUE}" stroke-width="2"/>', "cosine (left axis)"),
             (f'<line x1="0" x2="18" y1="0" y2="0" stroke="{_RED}" stroke-width="1.5"/>', "max rel. error (right, log)"),
             (f'<circle cx="5" cy="0" r="4" fill="{_RED}"/><rect x="10" y="-3.5" width="7" height="7" fill="{_RED}"/>',
              "failing op (cosine, error)"),
             (f'<path d="M4,4 L14,4 L9,-4 Z" fill="{_RED}"/>', "inf/NaN" + ("/off-scale" if clipped is not None else "") + ": edge mark"),
             (f'<line x1="9" x2="9" y1="-6" y2="6" stroke="{_RED}" stroke-dasharray="3 2" stroke-width="1.5"/>', "first failure")]
    out, x = ['<g class="legend">'], x0
    for swatch, text in items:
        out.append(f'<g transform="translate({x:.0f},{y})">{swatch}<text x="22" y="4" fill="#333">{html.escape(text)}</text></g>')
        x += 34 + 6.0 * len(text)
    out.append("</g>")
    return "".join(out)


def chart_svg(rows: list[dict], first_index: int | None) -> str:
    """Cosine (left axis, round ticks) and max relative error (right axis, log10) per compared row.
    Every failing op has a filled mark inside the plot: at its value, or at the plot's edge when the
    value is inf/NaN or beyond the axis (the value in its tooltip)."""
    points = [r for r in rows if r["side"] == "both" and not r.get("empty")]  # an empty tensor has no value to plot
    if not points:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="960" height="40"><text x="10" y="25">no compared tensors</text></svg>'
    n = len(points)
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
    bottom = PAD_T + plot_h

    def x(i: int) -> float:
        return PAD_L + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    numbers = [shown.values(r) for r in points]
    cos_vals = [n["cosine"] for n in numbers]
    lo, cos_ticks, decimals = cosine_ticks(min([c for c in cos_vals if c is not None] + [0.9]))

    def y_cos(c: float) -> float:
        return PAD_T + plot_h * (1.0 - (c - lo) / (1.0 - lo))

    rmin, rmax, clipped = rel_scale(points)
    rel = [n["max_rel_error"] for n in numbers]
    shown_rel = [v if v is not None and (clipped is None or math.log10(max(v, 1e-8)) <= clipped) else None for v in rel]

    def y_rel(v: float) -> float:
        return PAD_T + plot_h * (1.0 - (math.log10(max(v, 1e-8)) - rmin) / (rmax - rmin))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="chart" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
             f'<rect id="plot-area" x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>',
             _legend(PAD_L, 12, clipped)]
    for c in cos_ticks:  # cosine grid and left labels
        yy = y_cos(c)
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
                     f'<text class="cos-tick" x="{PAD_L - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="{_BLUE}">{c:.{decimals}f}</text>')
    for e in range(rmin, rmax + 1):
        yy = y_rel(10.0 ** e)
        parts.append(f'<text x="{PAD_L + plot_w + 6}" y="{yy + 4:.1f}" fill="{_RED}">{"≥" if e == clipped else ""}1e{e}</text>')
    if first_index is not None:
        pos = next((i for i, r in enumerate(points) if r["index"] == first_index), None)
        if pos is not None:
            parts.append(f'<line x1="{x(pos):.1f}" x2="{x(pos):.1f}" y1="{PAD_T}" y2="{bottom}" '
                         f'stroke="{_RED}" stroke-dasharray="4 3" stroke-width="1.5"/>'
                         f'<text x="{x(pos) + (-8 if pos > n / 2 else 8):.1f}" y="{PAD_T + 22}" fill="{_RED}" '
                         f'text-anchor="{"end" if pos > n / 2 else "start"}">first failure: '
                         f'{html.escape(points[pos]["op_name"])}</text>')
    step = max(1, math.ceil(n / 16))  # x ticks: the row index (the table's #) of every step-th compared op
    for i in range(0, n, step):
        parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="#999"/>'
                     f'<text class="x-tick" x="{x(i):.1f}" y="{bottom + 16}" text-anchor="middle" fill="#555">'
                     f'{points[i]["index"]}</text>')
    for series, values, y, colour, width in (("rel", shown_rel, y_rel, _RED, 1.5), ("cosine", cos_vals, y_cos, _BLUE, 2)):
        for k, run in enumerate(_segments(values)):  # a NaN (inf/NaN in a tensor) is a gap, not a line through it
            pts = " ".join(f"{x(i):.1f},{y(values[i]):.1f}" for i in run)
            parts.append(f'<polyline class="curve-{series}" data-segment="{k}" points="{pts}" fill="none" '
                         f'stroke="{colour}" stroke-width="{width}"/>')
    for i, r in enumerate(points):
        c, tip, failed = cos_vals[i], _tip(r), r["failed"]
        colour = _RED if failed else _BLUE
        fail = " fail-mark" if failed else ""
        if c is None:  # no cosine: a mark at the bottom edge, so the gap in the line is explained
            parts.append(f'<circle class="nan-mark edge-mark{fail}" data-index="{r["index"]}" cx="{x(i):.1f}" cy="{bottom - 5:.1f}" '
                         f'r="4.5" fill="{colour if failed else "#fff"}" stroke="{colour}" stroke-width="1.5"><title>{tip}</title></circle>')
        else:
            parts.append(f'<circle class="cos-mark{fail}" data-index="{r["index"]}" cx="{x(i):.1f}" cy="{y_cos(c):.1f}" '
                         f'r="{4 if failed else 2}" fill="{colour}"><title>{tip}</title></circle>')
        if shown_rel[i] is None:  # inf/NaN or beyond the clipped axis: a triangle at the top edge
            parts.append(_edge_mark(x(i), PAD_T + 5, True, _RED if failed else "#e8a0a0", f"rel-edge edge-mark{fail}", r["index"], tip))
        elif failed:  # its error as a mark too: a lone finite value between gaps draws no line
            parts.append(f'<rect class="rel-mark{fail}" data-index="{r["index"]}" x="{x(i) - 3.5:.1f}" y="{y_rel(shown_rel[i]) - 3.5:.1f}" '
                         f'width="7" height="7" fill="{_RED}" stroke="#fff" stroke-width="0.8"><title>{tip}</title></rect>')
    mid = PAD_T + plot_h / 2
    notes = ["a mark at the bottom edge: no cosine (a side holds inf/NaN, or one side is all zeros); at the top edge: "
             "no max relative error"
             + (f" or beyond 1e{clipped}" if clipped is not None else "") + "; the lines break there; hover a mark for its values"]
    if clipped is not None:
        beyond = sum(1 for v in rel if v is not None and math.log10(max(v, 1e-8)) > clipped)
        notes.append(f"the error axis is clipped at 1e{clipped}: {beyond} passing op(s) go beyond it (near-zero golden values); "
                     "drawn at the top edge so they do not hide the failing ops")
    parts.append(f'<text class="axis-title y-left" x="14" y="{mid:.1f}" transform="rotate(-90 14 {mid:.1f})" '
                 f'text-anchor="middle" fill="{_BLUE}">cosine similarity</text>'
                 f'<text class="axis-title y-right" x="{WIDTH - 10}" y="{mid:.1f}" transform="rotate(90 {WIDTH - 10} {mid:.1f})" '
                 f'text-anchor="middle" fill="{_RED}">max relative error (log10)</text>'
                 f'<text class="axis-title x-axis" x="{PAD_L + plot_w / 2:.1f}" y="{bottom + 34}" text-anchor="middle" '
                 f'fill="#333">row # of each compared op, in graph order →</text>'
                 + "".join(f'<text class="chart-note" x="{PAD_L}" y="{bottom + 52 + 13 * k}" fill="#555" font-size="10.5">'
                           f'{html.escape(t)}</text>' for k, t in enumerate(notes)))
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
        out.append(dtype if dtype in ("float16", "bfloat16", "float32") else None)
    return out


def report_html(result: dict, doc: dict) -> str:
    """The page for ``result``; ``doc`` is its result.json document (``writers.contract``)."""
    import jinja2

    first = doc["first_failure"]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    device = device_dtypes(doc["rows"], result.get("precision_plan"))
    rows = [{**row, "device_dtype": d, "shown": shown.values(row)} for row, d in zip(doc["rows"], device)]
    return template.render(
        chart=chart_svg(result["rows"], first["index"] if first else None),
        rows=rows,
        first=first,
        verdict=doc.get("verdict"),
        contained=doc.get("contained") or [],
        standard=doc.get("standard") or {},
        golden_only=doc.get("golden_only") or {},
        summary=doc["summary"],
        thresholds=doc["thresholds"],
        input_note=doc.get("input"),
        batched=(doc["summary"].get("batches") or 1) > 1,  # the batch columns only when there are batches
        fmt=_fmt,
    )


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return shown.NA  # no value: never printed as a number
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
