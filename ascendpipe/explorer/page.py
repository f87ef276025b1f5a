"""The explorer page: ``ascendpipe report`` renders every recorded run into one self-contained HTML
file (inline CSS, JS and SVG; nothing fetched), from ``report/templates/runs.html.j2`` and its script
``report/templates/runs.js`` (inlined as it is)."""

from __future__ import annotations

import os
import time
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "report" / "templates" / "runs.html.j2"
SCRIPT = TEMPLATE.with_name("runs.js")


def render(model: dict) -> str:
    import jinja2

    from ascendpipe.explorer.shape import json_for_html, show

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    script = SCRIPT.read_text(encoding="utf-8")
    if "</script" in script.lower():  # it is pasted into a <script> element: it must not close it
        raise ValueError(f"{SCRIPT} holds </script>")
    return template.render(m=model, data_json=json_for_html(model["data"]), script=script, show=show, duration=_duration)


def _duration(seconds) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"


def build_page(db, objects, workspace: str, *, refs=(), pipeline: str | None = None, limit: int | None = None) -> tuple[str, dict]:
    """(html, summary) for the runs of a workspace."""
    from ascendpipe.explorer.collect import compare_curves, select_runs
    from ascendpipe.explorer.shape import page_model

    runs = select_runs(db, refs, pipeline=pipeline, limit=limit)
    curves, index, notes = compare_curves(objects, runs)
    model = page_model(runs, curves, workspace=workspace, generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"), curve_index=index)
    model["notes"] = notes
    summary = {"runs": len(model["runs"]), "variant_rows": len(model["rows"]), "compare_stages": model["n_compare"],
               "pipelines": model["pipelines"], "notes": notes}
    return render(model), summary


def write_page(html: str, output: str) -> str:
    from ascendpipe.fsutil import write_bytes_atomic

    path = os.path.abspath(output)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_bytes_atomic(path, html.encode("utf-8"))
    return path
