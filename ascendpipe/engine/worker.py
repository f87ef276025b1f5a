"""What a scale-out worker does with one stage: run it and hand back its outputs. Nothing else.

The driver keeps deciding, keying and recording; a worker never opens the workspace database. Two
ways to see the files:

- ``shared``: the worker sees the driver's workspace (same host, or a shared file system). It runs
  the stage in place exactly as the local executor does (built-in kinds into a temp folder renamed
  on success) and the driver hashes and stores the outputs. A token file written by the driver for
  this run proves the worker is looking at the same workspace, not a look-alike path.
- ``remote``: the worker materialises the stage's declared deps from the remote cache into a scratch
  folder (every object hashed on arrival), runs the stage there, stores its outputs in the remote
  and returns their hashes; no shared file system is needed.

The job and the reply are plain dicts (they cross process and host boundaries).
"""

from __future__ import annotations

import os
import socket


class _NoStatCache:
    """A Hasher without the workspace database: every file is hashed from its bytes."""

    def stat_get(self, path):
        return None

    def stat_store(self, rows):
        pass


def token_path(root: str, run_id: int) -> str:
    return os.path.join(root, ".ascendpipe", "workers", f"run-{run_id}.token")


def run_job(job: dict) -> dict:
    _wait_for_own_children()
    if job["mode"] == "shared":
        return _run_shared(job)
    return _run_remote(job)


def _wait_for_own_children() -> None:
    """Ray ignores SIGCHLD in workers when its raylet reaps the processes a dead worker left behind
    (the subreaper option that makes a killed stage's commands die with it). With SIGCHLD ignored
    the kernel reaps children itself and every command looks like it exited 0: take it back.
    (Set unconditionally: Python's getsignal() does not see a disposition changed in C.)"""
    import signal

    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    except ValueError:  # not the main thread: then the worker's runtime did not change it either
        pass


def _where() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _reply_failed(message: str, log_text: str | None = None) -> dict:
    return {"ok": False, "error": message, "log_text": log_text, "worker": _where()}


def _run_shared(job: dict) -> dict:
    root = job["root"]
    try:
        with open(token_path(root, job["run_id"])) as f:
            seen = f.read().strip()
    except OSError:
        seen = None
    if seen != job["token"]:
        return _reply_failed(
            f"the Ray worker on host {socket.gethostname()} cannot see the workspace {root}; without a shared file "
            "system give the build a remote cache (`remote: s3://BUCKET/PREFIX`) so workers exchange files through it"
        )
    ok, result, error = _run_in(job, root)
    if not ok:
        return _reply_failed(error)
    return {"ok": True, "metrics": result.metrics, "info": result.info, "remedy_files": _str_paths(result.remedy_files),
            "worker": _where()}


def _run_remote(job: dict) -> dict:
    import shutil
    import tempfile

    from ascendpipe.errors import UserError
    from ascendpipe.store.hashing import Hasher
    from ascendpipe.store.objects import CorruptObject, ObjectStore
    from ascendpipe.store.remote import RemoteCache

    remote = RemoteCache(job["remote"])
    host_cache = os.environ.get("ASCENDPIPE_WORKER_CACHE") or os.path.join(tempfile.gettempdir(), "ascendpipe-worker-cache")
    objects = ObjectStore(host_cache)
    scratch = tempfile.mkdtemp(prefix="ascendpipe-worker-")
    try:
        try:
            for rel, digest in sorted(job["deps"].items()):
                if digest is None:
                    continue
                remote.fetch_object(objects, digest)
                objects.restore(digest, os.path.join(scratch, rel))
        except FileNotFoundError as exc:
            return _reply_failed(f"input object {str(exc)[:12]} is missing from the remote cache {job['remote']}")
        except CorruptObject as exc:  # deleted from the remote by the fetch; the driver uploads it again
            reply = _reply_failed(f"an input in the remote cache is corrupted ({exc})")
            reply["corrupt_input"] = exc.digest
            return reply
        except UserError as exc:
            return _reply_failed(str(exc))
        from ascendpipe.store.dump_cache import served

        # shared dumps (a compare's golden) go to this host's cache and the remote, not the scratch
        with served(scratch, host_cache, remote) as dumps:
            ok, result, error = _run_in(job, scratch)
        log_text = _read(os.path.join(scratch, job["log"]))
        if dumps.notes and log_text is not None:
            log_text += "".join(f"shared dump cache: {note}\n" for note in dumps.notes)
        if not ok:
            return _reply_failed(error, log_text)
        hasher = Hasher(_NoStatCache(), scratch)
        outs = {}
        try:
            for out in job["stage"]["outs"]:
                absolute = os.path.join(scratch, out)
                if os.path.isdir(absolute):
                    digest, entries = hasher.dir_manifest(out)
                    objects.put_dir(absolute, digest, entries, share=True)
                else:
                    digest = hasher.hash_path(out)
                    objects.put_file(absolute, digest, share=True)
                remote.push_object(objects, digest)
                outs[out] = digest
        except UserError as exc:
            return _reply_failed(str(exc), log_text)
        return {"ok": True, "outs": outs, "metrics": result.metrics, "info": result.info,
                "remedy_files": _str_paths(result.remedy_files), "log_text": log_text, "worker": _where()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_in(job: dict, root: str):
    """Run the stage with ``root`` as its workspace: (ok, StageResult, error message)."""
    from ascendpipe.config.model import Pipeline, Stage
    from ascendpipe.engine.executor import StageExecutor
    from ascendpipe.engine.workspace import Workspace
    from ascendpipe.errors import StageFailed, UserError

    stage = Stage(**job["stage"])
    stages = {name: Stage(name=name, base=name, variant=None, kind=kind, params={}) for name, kind in job["upstream_kinds"].items()}
    stages[stage.name] = stage
    pipeline = Pipeline(
        path=job["pipeline_path"], workspace=root, backend=job["backend"], build_dir=job["build_dir"],
        thresholds=job["thresholds"], stages=stages, env_names=[],
    )
    runner = StageExecutor(pipeline, Workspace(root), None, None, None, job["run_id"])
    try:
        return True, runner._run(stage, job["log"]), None
    except StageFailed as exc:
        return False, None, exc.message
    except UserError as exc:
        return False, None, str(exc)


def _read(path: str) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _str_paths(mapping: dict) -> dict:
    return {k: str(v) for k, v in mapping.items()}
