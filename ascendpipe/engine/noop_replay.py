"""Replaying a remembered no-op (engine/noop_memo.py): ``ascendpipe build PIPELINE`` run again with
nothing changed, answered without deciding again.

Under the build lock, as a build decides: every input the memo names is compared (the context and
code first, then each file's stat, then the database rows); on any difference the build decides as
always. On none, the run is recorded as the deciding build recorded it (one transaction: the run and
its stages, all fresh) and the same lines are printed, with this run's id and time in the summary.
"""

from __future__ import annotations

import os
import sys
import time


def replay(argv: list[str]) -> int | None:
    """The exit code of a replayed no-op, or None when the build must decide (nothing is written then)."""
    from ascendpipe.engine import noop_memo

    shape = noop_memo.replayable(argv)
    if shape is None:
        return None
    started = time.monotonic()
    pipeline_path, _quiet = shape
    from ascendpipe.config.model import find_workspace

    workspace = find_workspace(pipeline_path)
    cwd = os.getcwd()
    memo = noop_memo.load(noop_memo.memo_path(os.path.join(workspace, ".ascendpipe"), argv, cwd))
    if memo is None or memo.get("workspace") != workspace:
        return None
    from ascendpipe import terminal

    colour = terminal.colour(sys.stdout)  # as engine/progress.py paints
    if noop_memo.first_difference(memo, noop_memo.context(argv, cwd, colour), noop_memo.code_stamp()[0]):
        return None
    from ascendpipe.engine.workspace import BuildLock, Workspace

    ws = Workspace(workspace)
    lock = BuildLock(ws, wait=True, stream=sys.stderr).acquire()
    try:
        if noop_memo.changed_file(memo) is not None or not os.path.isfile(ws.db_path):
            return None
        from ascendpipe.config.overrides import overrides_file

        if os.path.exists(overrides_file(pipeline_path)):  # the deciding build says that it applies
            return None
        from ascendpipe.store.db import Database

        db = Database(ws.db_path, create=False, cache_root=ws.cache_root)
        try:
            run = memo["run"]
            if db.notes or db.has_running() or db.decision_digest(run["pipeline"], memo["keys"]) != memo["db"]:
                return None
            run_id = db.record_noop_run(run["pipeline"], ["ascendpipe", *sys.argv[1:]], run["backend"], run["version"],
                                        memo["records"])
        finally:
            db.close()
    finally:
        lock.release()
    from ascendpipe.engine.progress import summary_line

    before, after = memo["printed"]
    sys.stdout.write(before + summary_line({"fresh": len(memo["records"])}, time.monotonic() - started, run_id) + after)
    return 0
