"""The terminal table of top op types and the self-contained HTML page (pure: returns text)."""

from __future__ import annotations

from typing import Sequence

BAR_WIDTH_PX = 520  # width of the longest bar in the chart


def top_ops_table(totals: Sequence[dict], *, limit: int = 10) -> str:
    """Plain-text table of the op types taking the most time (rows from ``op_type_totals``)."""
    header = ("OP Type", "Core Type", "Count", "Total(us)", "Avg(us)", "Ratio(%)")
    body = [(t["op_type"], t["core_type"], str(t["count"]), f"{t['total_us']:.1f}",
             f"{t['avg_us']:.1f}", f"{t['ratio_pct']:.1f}") for t in totals[:limit]]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "  ".join("-" * w for w in widths)
    rest = len(totals) - limit
    tail = [f"... {rest} more op types"] if rest > 0 else []
    return "\n".join([line(header), rule, *map(line, body), *tail])


def bars(totals: Sequence[dict]) -> list[dict]:
    """Chart geometry: one bar per op type, scaled to the largest total."""
    largest = max((t["total_us"] for t in totals), default=0.0)
    return [{**t, "width": round(BAR_WIDTH_PX * t["total_us"] / largest, 1) if largest else 0.0}
            for t in totals]


def render_profile_html(*, title: str, totals: Sequence[dict], latency: dict, batch_size: int) -> str:
    import jinja2  # only when a report is rendered

    env = jinja2.Environment(loader=jinja2.PackageLoader("ascendpipe", "report/templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]))
    template = env.get_template("profile.html.j2")
    return template.render(title=title, bars=bars(totals), latency=latency, batch_size=batch_size,
                           bar_width=BAR_WIDTH_PX)
