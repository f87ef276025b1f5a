"""ascendpipe report"""

from __future__ import annotations

from ascendpipe.cli.common import print_json

HELP = "one self-contained HTML page over the recorded runs: tables, diff, per-op overlay, metric charts"
DESCRIPTION = (
    "Write one offline HTML page (no network: CSS, JS and SVG inline) over the workspace's runs: a "
    "filterable, sortable runs table and variants table (settings, remedy files, metrics), the diff of "
    "two runs, per-op cosine / max relative error of two compare stages overlaid, and a metric-by-setting "
    "chart. Open it with `#diff=A,B`, `#overlay=RUN:STAGE,RUN:STAGE`, `#metric=eval.mAP` or `#filter=WORDS`."
)


def add_arguments(p) -> None:
    p.add_argument("runs", nargs="*", metavar="RUN", help="only these runs (id, latest, latest~N); default: all")
    p.add_argument("-o", "--output", default="runs.html", help="the page to write (default: runs.html)")
    p.add_argument("--pipeline", help="only runs of this pipeline (its path as recorded, or its file name)")
    p.add_argument("--limit", type=int, metavar="N", help="only the newest N runs")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.add_argument("-C", "--workspace", default=None)


def main(args) -> int:
    import os

    from ascendpipe.api import _workspace_root, report
    from ascendpipe.cli import guard
    from ascendpipe.engine.workspace import Workspace

    root = _workspace_root(args.workspace)
    state = {"the records folder": os.path.relpath(os.path.join(root, ".ascendpipe")),
             "the cache folder": os.path.relpath(Workspace(root).cache_root)}
    guard.refuse_output_over_inputs(args.output, state, flag="-o", instead="write the page to another file")
    result = report(args.output, runs=args.runs, pipeline=args.pipeline, limit=args.limit, workspace=args.workspace)
    if args.json:
        print_json(result)
        return 0
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"wrote {result['output']}: {result['runs']} runs, {result['variant_rows']} variant rows, "
          f"{result['compare_stages']} compare stages with per-op results")
    return 0
