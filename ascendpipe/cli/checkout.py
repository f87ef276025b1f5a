"""ascendpipe checkout"""

from __future__ import annotations

import sys

from ascendpipe.cli.common import print_json

HELP = "get a recorded run back: its params into the pipeline's overrides file, its outputs from the cache"
DESCRIPTION = (
    "Write the params of a recorded run into the pipeline's overrides file (pipelines/reid.yaml -> "
    "pipelines/reid.overrides: --set lines that build, status, dag and fix apply before their own --set) "
    "and restore its outputs from the cache, so that `ascendpipe build` then finds every stage fresh and "
    "reports the run's metrics. Delete the overrides file to go back to the pipeline as written."
)


def add_arguments(p) -> None:
    p.add_argument("run", help="run id, 'latest' or 'latest~N'")
    p.add_argument("stages", nargs="*", metavar="STAGE", help="only these stages (and what they need); a base name means all its variants")
    p.add_argument("--settings-only", action="store_true", help="write the overrides file only; restore no outputs")
    p.add_argument("--json", action="store_true")
    p.add_argument("-C", "--workspace", default=None)


def main(args) -> int:
    from ascendpipe.api import checkout

    result = checkout(args.run, args.stages, workspace=args.workspace, settings_only=args.settings_only,
                      argv=" ".join(["ascendpipe", *sys.argv[1:]]) if sys.argv[1:2] == ["checkout"] else None)
    for note in result.get("notes") or []:  # a stale claim taken over (engine/owners.py), as build says it
        sys.stderr.write(note + "\n")
    if args.json:
        print_json(result)
        return 0
    if result["overrides_file"]:
        print(f"{result['overrides_file']}: {len(result['overrides'])} override(s)")
        for line in result["overrides"]:
            print(f"  --set {line}")
    else:
        print(f"the pipeline as written gives run {result['run']}'s params: no overrides file")
    if result["restored"]:
        print(f"restored from the cache: {', '.join(result['restored'])}")
    if result.get("from_run_cache"):
        print(f"not in run {result['run']}, restored from the run-cache: {', '.join(result['from_run_cache'])}")
    if result["in_place"]:
        print(f"already in place: {len(result['in_place'])} stage(s)")
    for problem in result["problems"]:
        print(f"warning: {problem}")
    for name, reasons in result["will_run"].items():
        print(f"the next build reruns {name}: {'; '.join(reasons)}")
    if not result["will_run"]:
        print(f"`ascendpipe build {result['pipeline']}` now finds run {result['run']}'s stages fresh")
    return 0
