"""ascendpipe show"""

from __future__ import annotations

from ascendpipe.cli.common import fmt_value, print_json

HELP = "show one run: every stage's state, params, remedy files, tool versions, outputs and metrics"


def add_arguments(p) -> None:
    p.add_argument("run", nargs="?", default="latest", help="run id, 'latest' (default) or 'latest~N'")
    p.add_argument("--json", action="store_true")
    p.add_argument("-C", "--workspace", default=None)


def main(args) -> int:
    from ascendpipe.api import show
    from ascendpipe.engine.progress import first_failure_text

    record = show(args.run, args.workspace)
    if args.json:
        print_json(record)
        return 0
    print(f"run {record['id']}  {record['pipeline']}  backend {record['backend']}  {record['state']}  started {record['started']}")
    for name, st in record["stages"].items():
        dur = f" {st['duration']:.2f}s" if st.get("duration") else ""
        print(f"\n  {name} [{st['kind']}] {st['state']}{dur}")
        if st.get("error"):
            print(f"    error: {st['error']}")
        first = first_failure_text(st.get("info"))
        if first:
            reason = ((st.get("info") or {}).get("first_failure") or {}).get("reason")
            print(f"    first failure {first}" + (f": {reason}" if reason else ""))
        for k, v in (st.get("params") or {}).items():
            print(f"    param   {k} = {fmt_value(v)}")
        for k, v in (st.get("tools") or {}).items():
            print(f"    tool    {k} {v}")
        for rf in st.get("remedy_files") or []:
            print(f"    remedy  {rf['name']}: {rf.get('path')} ({rf['hash'][:12]})")
        for k, v in (st.get("outputs") or {}).items():
            print(f"    out     {k} {str(v)[:16]}")
        for k, v in (st.get("metrics") or {}).items():
            print(f"    metric  {k} = {fmt_value(v)}")
    return 0
