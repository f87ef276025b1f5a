"""ascendpipe runs"""

from __future__ import annotations

from ascendpipe.cli.common import print_json, table

HELP = "list recorded runs, newest first"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    p.add_argument("-n", "--limit", type=int, default=None, help="at most this many runs")
    p.add_argument("-C", "--workspace", default=None, help="workspace folder (default: found from the current folder)")
    p.add_argument("--prune", type=int, default=None, metavar="KEEP", help="the same as `ascendpipe gc --runs KEEP`")


def main(args) -> int:
    from ascendpipe.api import runs
    from ascendpipe.explorer.shape import is_fix_attempt

    if args.prune is not None:
        from ascendpipe.api import gc
        from ascendpipe.cli.gc import describe

        result = gc(args.workspace, keep_runs=args.prune)
        if args.json:
            print_json(result)
        else:
            print(describe(result))
        return 0

    records = runs(args.workspace, args.limit)
    if args.json:
        print_json(records)
        return 0
    rows = []
    for r in records:
        counts: dict[str, int] = {}
        for st in r["stages"].values():
            counts[st["state"]] = counts.get(st["state"], 0) + 1
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        state = r["state"] or ""
        if is_fix_attempt(r):  # a build `ascendpipe fix` made while searching
            state += " (fix attempt)"
        rows.append([str(r["id"]), r["started"] or "", r["pipeline"] or "", r["backend"] or "", state, summary])
    if not rows:
        print("no runs recorded yet")
        return 0
    print(table(rows, ["id", "started", "pipeline", "backend", "state", "stages"]), end="")
    return 0
