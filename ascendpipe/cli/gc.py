"""ascendpipe gc"""

from __future__ import annotations

from ascendpipe.cli.common import print_json

HELP = "drop cache objects that no record or run-cache entry needs"


def add_arguments(p) -> None:
    p.add_argument("-C", "--workspace", default=None)
    p.add_argument("--dry-run", action="store_true", help="only count what would be removed")
    p.add_argument("--json", action="store_true")


def main(args) -> int:
    from ascendpipe.api import gc

    result = gc(args.workspace, dry_run=args.dry_run)
    if args.json:
        print_json(result)
    else:
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {result['removed_objects']} objects ({result['freed_bytes'] / 1e6:.1f} MB); kept {result['kept_objects']}")
    return 0
