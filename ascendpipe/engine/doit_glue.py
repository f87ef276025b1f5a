"""doit embedded as the scheduler: it orders the stages, runs independent ones in parallel threads
(``-j N``) and, with ``--keep-going``, continues past a failure while skipping its dependents.

We hand doit one task per stage with ``task_dep`` edges and no file_dep: staleness is decided by our
executor when the task runs (doit's own up-to-date check would neither see a changed command nor
hash targets). doit is configured in code only (``config_filenames=()`` so a user's
``pyproject.toml`` or ``doit.cfg`` is not read), with the sqlite3 backend in ``.ascendpipe/``.
"""

from __future__ import annotations

import os
import re


def _task_name(index: int, stage: str) -> str:
    # doit reserves ':' for subtasks; keep names readable but safe
    return f"s{index:05d}_" + re.sub(r"[^A-Za-z0-9_.@-]", "_", stage)


def check_state_file(path: str) -> None:
    """doit's own state file holds nothing of ours (staleness is decided by the executor): one that
    is not SQLite (a crash, a full disk) is removed rather than let doit stop the build over it.
    A link there is refused: doit would write through it (store/statefiles.py)."""
    from ascendpipe.store.statefiles import refuse_link

    for suffix in ("", "-journal", "-wal", "-shm"):
        refuse_link(path + suffix, "the scheduler's state file")
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        return
    except OSError:
        head = b""
    if head != b"SQLite format 3\x00":
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass


def run_stages(order: list[str], graph: dict[str, list[str]], execute, on_skip, *, jobs: int, keep_going: bool, dep_file: str,
               on_error=None) -> int:
    """Run ``execute(stage)`` for each stage in dependency order. Returns doit's exit code.

    ``on_error(stage, message)`` hears of any other error doit caught in a stage's task (an exception
    outside the executor's own handling): it must become a failure, never a silent skip."""
    check_state_file(dep_file)
    from doit.cmd_base import TaskLoader2
    from doit.doit_cmd import DoitMain
    from doit.exceptions import TaskFailed, UnmetDependency
    from doit.task import dict_to_task

    names = {stage: _task_name(i, stage) for i, stage in enumerate(order)}
    back = {v: k for k, v in names.items()}

    def action(stage):
        outcome = execute(stage)
        if outcome.state == "failed":
            return TaskFailed(outcome.error or "failed")
        return True

    tasks = [
        {
            "name": names[stage],
            "actions": [(action, [stage])],
            "task_dep": [names[u] for u in graph.get(stage, ()) if u in names],
            "verbosity": 2,  # never let doit swap sys.stdout from worker threads
        }
        for stage in order
    ]

    class Reporter:
        def __init__(self, outstream, options):
            pass

        def initialize(self, tasks, selected_tasks):
            pass

        def get_status(self, task):
            pass

        def execute_task(self, task):
            pass

        def add_failure(self, task, fail):
            if task.name not in back:
                return
            if isinstance(fail, UnmetDependency):
                failed = [back.get(n, n) for n in str(fail.message if hasattr(fail, "message") else fail).split()]
                on_skip(back[task.name], failed[0] if failed else "?")
            elif not isinstance(fail, TaskFailed) and on_error is not None:
                # an exception doit caught (TaskError keeps only its traceback): the last line says it
                lines = "".join(getattr(fail, "traceback", None) or []).strip().splitlines()
                on_error(back[task.name], lines[-1] if lines else str(getattr(fail, "message", fail)))

        def add_success(self, task):
            pass

        def skip_uptodate(self, task):
            pass

        def skip_ignore(self, task):
            pass

        def cleanup_error(self, exception):
            pass

        def runtime_error(self, msg):
            raise RuntimeError(f"doit: {msg}")

        def teardown_task(self, task):
            pass

        def complete_run(self):
            pass

    config = {
        "backend": "sqlite3",
        "dep_file": dep_file,
        "verbosity": 2,
        "reporter": Reporter,
        "continue": keep_going,
        "num_process": max(1, jobs) if jobs > 1 else 0,
        "par_type": "thread",
    }

    class Loader(TaskLoader2):
        def setup(self, opt_values):
            pass

        def load_doit_config(self):
            return config

        def load_tasks(self, cmd, pos_args):
            return [dict_to_task(t) for t in tasks]

    argv = ["run"]
    if jobs > 1:
        argv += ["-n", str(jobs), "-P", "thread"]
    if keep_going:
        argv.append("--continue")
    argv += [names[s] for s in order]
    return DoitMain(Loader(), config_filenames=()).run(argv)
