"""ascendpipe build"""

from __future__ import annotations

import sys

from ascendpipe.cli.common import add_pipeline_args, add_remote_args, print_json

HELP = "build a pipeline: run what is stale, restore what was built before, record the run"


def add_arguments(p) -> None:
    add_pipeline_args(p, stages=True)
    p.add_argument("-f", "--force", action="store_true", help="rebuild the selected stages even if fresh (no run-cache)")
    p.add_argument("-n", "--dry-run", action="store_true", help="print what would run and why; exit 1 if anything would")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="run up to N independent stages at once (default: 1 locally; on Ray, what the cluster's resources allow)")
    p.add_argument("-k", "--keep-going", action="store_true", help="continue past a failed stage, skipping its dependents")
    p.add_argument("--no-run-cache", action="store_true", help="never restore outputs from the cache; run stale stages")
    p.add_argument("--no-wait", action="store_true", help="fail at once if another build holds the workspace lock")
    p.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")
    p.add_argument("--json", action="store_true", help="print the run record as JSON (progress goes to stderr)")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="where stages run: here (doit threads) or as Ray tasks")
    p.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster to join (default: start a local Ray instance)")
    p.add_argument("--retries", type=int, default=2, metavar="N", help="Ray: rerun a stage whose worker or node died up to N times")
    add_remote_args(p)


def main(args) -> int:
    from ascendpipe.engine.build import BuildOptions, build

    if args.jobs is not None and args.jobs < 1:
        from ascendpipe.errors import UserError

        raise UserError(f"-j must be at least 1, got {args.jobs}")
    from ascendpipe.cli.common import note_overrides_file

    note_overrides_file(args.pipeline)
    options = BuildOptions(
        targets=args.stages, force=args.force, dry_run=args.dry_run, jobs=args.jobs, overrides=args.overrides,
        backend=args.backend, keep_going=args.keep_going, use_run_cache=not args.no_run_cache,
        wait_for_lock=not args.no_wait, quiet=args.quiet, argv=["ascendpipe", *sys.argv[1:]],
        executor=args.executor, address=args.address, retries=max(0, args.retries), remote=args.remote,
        use_remote=not args.no_remote,
        memo_argv=_memo_argv(args),
    )
    try:
        record = build(args.pipeline, options, stream=sys.stderr if args.json else sys.stdout)
    except KeyboardInterrupt as exc:  # recorded as `interrupted` by the build; the shell's exit code
        sys.stderr.write(f"ascendpipe: interrupted by {getattr(exc, 'signal_name', 'SIGINT')}; the run is recorded as interrupted\n")
        return getattr(exc, "exit_code", 130)
    if args.json:
        print_json(record)
    if args.dry_run:
        return 1 if record["would_run"] else 0
    failed = record.get("state") in ("failed", "interrupted") or any(s["state"] == "failed" for s in record["stages"].values())
    return 1 if failed else 0


def _memo_argv(args) -> list[str] | None:
    """The command line a no-op of this build is remembered for (engine/noop_memo.py): only the
    plain `build PIPELINE [-q]`, the one that replays it."""
    from ascendpipe.engine.noop_memo import replayable

    argv = getattr(args, "_argv", None)
    return list(argv) if argv is not None and replayable(argv) else None
