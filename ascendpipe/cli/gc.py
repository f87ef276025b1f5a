"""ascendpipe gc"""

from __future__ import annotations

from ascendpipe.cli.common import print_json

HELP = "drop cache objects no record needs, leftovers of killed builds and, with --runs, old run records"


def add_arguments(p) -> None:
    p.add_argument("-C", "--workspace", default=None)
    p.add_argument("--dry-run", action="store_true", help="only count what would be removed")
    p.add_argument("--runs", type=int, default=None, metavar="KEEP",
                   help="also drop run records but the newest KEEP and the runs that built the current outputs "
                        "(what checkout and report need)")
    p.add_argument("--json", action="store_true")


def main(args) -> int:
    from ascendpipe.api import gc

    result = gc(args.workspace, dry_run=args.dry_run, keep_runs=args.runs)
    if args.json:
        print_json(result)
    else:
        print(describe(result))
    return 0


def describe(result: dict) -> str:
    verb = "would remove" if result["dry_run"] else "removed"
    text = f"{verb} {result['removed_objects']} objects ({result['freed_bytes'] / 1e6:.1f} MB); kept {result['kept_objects']}"
    if result.get("removed_temp"):
        text += f"; {verb} {len(result['removed_temp'])} leftovers of killed builds"
    if "removed_runs" in result:
        kept = result["kept_runs"]
        text += f"; {verb} {len(result['removed_runs'])} run records, kept {len(kept)}"
    return text
