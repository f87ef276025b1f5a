"""The Python API: what the CLI calls and what notebooks use.

    import ascendpipe
    run = ascendpipe.build("pipelines/reid.yaml", set=["stages.convert.params.precision_mode=allow_fp32_to_fp16"])
    run["stages"]["eval@fp16"]["metrics"]["mAP"]
"""

from __future__ import annotations

import io
import os
import sys


def load(path: str, *, set=(), backend: str | None = None):
    """The resolved pipeline (stages with their params, inputs and outputs), or a ``UserError``."""
    from ascendpipe.engine.plan import resolve

    return resolve(path, list(set), backend, use_cache=False)


def validate(path: str, *, set=(), backend: str | None = None) -> dict:
    from ascendpipe.engine.build import check_paths

    pipeline = load(path, set=set, backend=backend)
    from ascendpipe.engine.owners import check_pipeline

    check_pipeline(pipeline, list(set), backend)  # a path another pipeline file of the workspace writes
    check_paths(pipeline)  # a path inside a built, fresh output that is not there
    return {"pipeline": pipeline.path, "stages": list(pipeline.stages), "backend": pipeline.backend}


def build(path: str, stages=(), *, force=False, dry_run=False, jobs=None, set=(), backend=None, keep_going=False,
          run_cache=True, wait=True, quiet=False, stream=None, run_command=None, executor="local", address=None,
          remote=None, use_remote=True, retries=2, argv=None) -> dict:
    """Build a pipeline; returns the run record (``show RUN --json``'s shape).

    ``executor="ray"`` runs stages as Ray tasks (on ``address``, the Ray instance this process is
    already connected to, or a new local one); ``remote`` overrides the remote cache URL; ``argv`` is
    what the run record says made it (``fix`` marks its attempts so)."""
    from ascendpipe.engine.build import BuildOptions
    from ascendpipe.engine.build import build as _build

    options = BuildOptions(
        targets=list(stages), force=force, dry_run=dry_run, jobs=jobs, overrides=list(set), backend=backend,
        keep_going=keep_going, use_run_cache=run_cache, wait_for_lock=wait, quiet=quiet,
        argv=list(argv) if argv else ["ascendpipe.build", str(path)], run_command=run_command, executor=executor, address=address,
        remote=remote, use_remote=use_remote, retries=retries,
    )
    return _build(str(path), options, stream=stream if stream is not None else (io.StringIO() if quiet else sys.stdout))


def push(path: str, stages=(), *, remote=None, set=(), backend=None, stream=None) -> dict:
    """Upload what the selected stages last built to the remote cache."""
    from ascendpipe.engine.push import push as _push

    return _push(str(path), list(stages), url=remote, overrides=list(set), backend=backend, stream=stream or io.StringIO())


def pull(path: str, stages=(), *, remote=None, set=(), backend=None, jobs=None, quiet=True, stream=None) -> dict:
    """Restore the selected stages from the remote cache (a build that runs nothing); the run record."""
    from ascendpipe.engine.build import BuildOptions
    from ascendpipe.engine.build import build as _build

    options = BuildOptions(
        targets=list(stages), jobs=jobs, overrides=list(set), backend=backend, keep_going=True, quiet=quiet,
        argv=["ascendpipe.pull", str(path)], remote=remote, restore_only=True,
    )
    return _build(str(path), options, stream=stream if stream is not None else (io.StringIO() if quiet else sys.stdout))


def status(path: str, stages=(), *, set=(), backend=None) -> dict:
    from ascendpipe.engine.build import stage_status

    return stage_status(str(path), list(set), backend, list(stages))


def _db_for(workspace: str | None):
    """The workspace's database for a command that reads records: never made here (a `runs` in the
    wrong folder must not turn that folder into a workspace)."""
    from ascendpipe.engine.workspace import Workspace
    from ascendpipe.store.db import Database

    ws = Workspace(os.path.abspath(workspace or _find_workspace_from_cwd()))
    db = Database(ws.db_path, create=False, cache_root=ws.cache_root)
    _settle_crashed(db, ws.lock_path)
    return db


def _settle_crashed(db, lock_path: str) -> None:
    """Runs still `running` while no build holds the lock lost their process: record them `crashed`
    now rather than at the next build, so `runs` and `show` do not call a dead build running."""
    import fcntl

    from ascendpipe.errors import UserError

    if not db.has_running():
        return
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW)  # never created here, never through a link
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # a build is running: its run is really running
    try:
        db.mark_crashed()
    except UserError:
        pass  # a full disk: the next build records it
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _find_workspace_from_cwd() -> str:
    """The nearest folder from the current one up that holds ``.ascendpipe/`` (a build made it)."""
    from ascendpipe.errors import UserError

    start = folder = os.getcwd()
    while True:
        if os.path.isdir(os.path.join(folder, ".ascendpipe")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            raise UserError(f"no workspace here (no .ascendpipe/ found from {start} up); run `ascendpipe build` first")
        folder = parent


def runs(workspace: str | None = None, limit: int | None = None) -> list[dict]:
    from ascendpipe.records import list_runs

    db = _db_for(workspace)
    try:
        return list_runs(db, limit)
    finally:
        db.close()


def show(run: str | int = "latest", workspace: str | None = None) -> dict:
    from ascendpipe.records import resolve_run_id, run_record

    db = _db_for(workspace)
    try:
        return run_record(db, resolve_run_id(db, str(run)), with_remedy_content=True)
    finally:
        db.close()


def diff(run_a: str | int, run_b: str | int, workspace: str | None = None) -> dict:
    from ascendpipe.records import diff_runs, previous_of_pipeline, resolve_run_id, run_record

    db = _db_for(workspace)
    try:
        a = run_record(db, resolve_run_id(db, str(run_a)))
        b = run_record(db, resolve_run_id(db, str(run_b)))
        result = diff_runs(a, b)
        if not result["pipelines"]["same"]:  # latest~1 is the build before, of whichever pipeline
            result["pipelines"]["previous_of_b"] = previous_of_pipeline(db, b)
        return result
    finally:
        db.close()


def gc(workspace: str | None = None, *, dry_run: bool = False, keep_runs: int | None = None) -> dict:
    """Drop unneeded cache objects and ``.tmp-*`` leftovers of killed builds; with ``keep_runs``, also
    the run records but the newest ``keep_runs`` and those that built a current output."""
    from ascendpipe.engine.gc import collect
    from ascendpipe.errors import UserError

    if keep_runs is not None and keep_runs < 0:
        raise UserError(f"--runs must be 0 or more, got {keep_runs}")
    return collect(os.path.abspath(workspace or _find_workspace_from_cwd()), dry_run=dry_run, keep_runs=keep_runs)


def _workspace_root(workspace: str | None) -> str:
    return os.path.abspath(workspace or _find_workspace_from_cwd())


def report(output: str = "runs.html", *, runs=(), pipeline: str | None = None, limit: int | None = None,
           workspace: str | None = None) -> dict:
    """Write the explorer page (one offline HTML file) over the workspace's runs; returns what it holds."""
    from ascendpipe.engine.workspace import Workspace
    from ascendpipe.errors import UserError
    from ascendpipe.explorer.page import build_page, write_page
    from ascendpipe.store.objects import ObjectStore

    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    root = _workspace_root(workspace)
    db = _db_for(root)
    try:
        if not db.run_ids():
            raise UserError("no runs recorded yet; run `ascendpipe build PIPELINE` first")
        html, summary = build_page(db, ObjectStore(Workspace(root).cache_root), root, refs=list(runs), pipeline=pipeline, limit=limit)
    finally:
        db.close()
    if not summary["runs"]:
        raise UserError(f"no recorded run matches (pipeline {pipeline!r}); `ascendpipe runs` lists them")
    return {"output": write_page(html, output), **summary}


def checkout(run: str | int, stages=(), *, workspace: str | None = None, settings_only: bool = False, argv: str | None = None) -> dict:
    """A recorded run's params into the pipeline's overrides file and its outputs back from the cache."""
    from ascendpipe.explorer.checkout import checkout as _checkout

    return _checkout(run, list(stages), workspace=_workspace_root(workspace), settings_only=settings_only, argv=argv)


def export_mlflow(runs=(), *, tracking_uri: str | None = None, experiment: str | None = None, workspace: str | None = None) -> dict:
    """Each run (default: all) as an MLflow run; runs already exported from this workspace are skipped."""
    from ascendpipe.engine.workspace import Workspace
    from ascendpipe.explorer.collect import select_runs
    from ascendpipe.explorer.mlflow_export import export
    from ascendpipe.store.objects import ObjectStore

    root = _workspace_root(workspace)
    db = _db_for(root)
    try:
        selected = select_runs(db, list(runs))
        if not selected:
            from ascendpipe.errors import UserError

            raise UserError("no runs recorded yet; run `ascendpipe build PIPELINE` first")
        return export(db, ObjectStore(Workspace(root).cache_root), root, selected, tracking_uri=tracking_uri, experiment=experiment)
    finally:
        db.close()
