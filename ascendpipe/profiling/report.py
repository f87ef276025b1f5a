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
    """Plain-text table of the op types taking the most time (rows from ``op_type_totals``); totals add
    every run of every iteration, so the median and max say whether one slow run makes the total."""
    header = ("OP Type", "Core Type", "Count", "Total(us)", "Median(us)", "Max(us)", "Ratio(%)")
    body = [(t["op_type"], t["core_type"], str(t["count"]), f"{t['total_us']:.1f}",
             f"{t.get('median_us', t['avg_us']):.1f}", f"{t['max_us']:.1f}", f"{t['ratio_pct']:.1f}")
            for t in totals[:limit]]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "  ".join("-" * w for w in widths)
    rest = len(totals) - limit
    tail = [f"... {rest} more op types"] if rest > 0 else []
    tail += [f"outlier: {t['op_type']}: {outlier_note(t)}" for t in totals[:limit] if outlier_note(t)]
    return "\n".join([line(header), rule, *map(line, body), *tail])


def bars(totals: Sequence[dict]) -> list[dict]:
    """Chart geometry: one bar per op type, scaled to the largest total."""
    largest = max((t["total_us"] for t in totals), default=0.0)
    return [{**t, "width": round(BAR_WIDTH_PX * t["total_us"] / largest, 1) if largest else 0.0}
            for t in totals]


def render_profile_html(*, title: str, totals: Sequence[dict], latency: dict, batch_size: int,
                        iterations: int | None = None) -> str:
    import jinja2  # only when a report is rendered

    env = jinja2.Environment(loader=jinja2.PackageLoader("ascendpipe", "report/templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]))
    template = env.get_template("profile.html.j2")
    rows = [{**b, "outlier_note": outlier_note(b)} for b in bars(totals)]
    return template.render(title=title, bars=rows, latency=latency, batch_size=batch_size,
                           bar_width=BAR_WIDTH_PX, iterations=iterations, outlier_factor=OUTLIER_FACTOR)
