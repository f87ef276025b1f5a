"""ascendpipe status"""

from __future__ import annotations

from ascendpipe.cli.common import add_pipeline_args, print_json

HELP = "say which stages are fresh or stale, and why"


def add_arguments(p) -> None:
    add_pipeline_args(p, stages=True)
    p.add_argument("--json", action="store_true", help='print {"stages": {NAME: {"state", "reasons"}}}')


def main(args) -> int:
    from ascendpipe.api import status
    from ascendpipe.cli.common import note_overrides_file

    note_overrides_file(args.pipeline)
    result = status(args.pipeline, args.stages, set=args.overrides, backend=args.backend)
    if args.json:
        print_json(result)
        return 0
    stale = 0
    for name, entry in result["stages"].items():
        if entry["state"] == "fresh":
            print(f"  fresh   {name}")
        else:
            stale += 1
            extra = " (restorable from the run-cache)" if entry.get("restorable") else ""
            print(f"  stale   {name}: {'; '.join(entry['reasons'])}{extra}")
    total = len(result["stages"])
    print(f"{stale} of {total} stages stale" if stale else f"all {total} stages fresh")
    return 0
