"""The remote cache in a build, and ``push`` / ``pull``.

- During a build, a stale stage whose key is in neither the workspace nor the local run-cache is
  looked up in the remote: its objects are fetched into ``cache/`` (each one hashed on arrival), then
  restored exactly as from the local run-cache. A missing or corrupted remote object means the stage
  runs (and the corrupted object is deleted from the remote so the rebuild replaces it).
- ``push`` uploads the recorded outputs of the selected stages (verified locally first) and then
  their entries. ``pull`` is a build that only restores: what neither cache holds is reported.
"""

from __future__ import annotations

import sys

from ascendpipe.store.objects import CorruptObject


def open_remote(url: str | None, *, check: bool = True):
    if not url:
        return None
    from ascendpipe.store.remote import RemoteCache

    remote = RemoteCache(url)
    if check:
        remote.check()
    return remote


def restore_from_remote(executor, stage, key: str):
    """``(entry, None)`` once the stage's outputs are restored from the remote, else ``(None, note)``."""
    remote = executor.remote
    entry = remote.get_entry(key)
    if entry is None or set(entry["outs"]) != set(stage.outs):
        return None, None
    try:
        for digest in entry["outs"].values():
            remote.fetch_object(executor.objects, digest)
        for out, digest in entry["outs"].items():
            executor.objects.restore(digest, executor.ws.abs(out))
            executor.hasher.forget(out)
    except FileNotFoundError:
        return None, "remote cache object missing, rebuilt"
    except CorruptObject as exc:
        return None, f"remote {exc}; rebuilt"
    return {
        "outs": dict(entry["outs"]),
        "metrics": dict(entry.get("metrics") or {}),
        "remedy": list(entry.get("remedy") or []),  # with their content: a fresh clone records them whole
        "info": dict(entry.get("info") or {}),
    }, None


def entry_for(db, key: str, state: dict) -> dict:
    """What the remote keeps for a key: outputs, metrics, remedy files with content, info."""
    cached = db.cache_get(key) or {}
    remedy = []
    for blob in cached.get("remedy") or []:
        content = db.blob(blob.get("hash")) if blob.get("hash") else None
        remedy.append({**blob, "content": content} if content is not None else dict(blob))
    return {
        "outs": cached.get("outs") or state["outs"],
        "metrics": cached.get("metrics") if cached else state.get("metrics") or {},
        "remedy": remedy,
        "info": cached.get("info") or {},
    }


def publish(remote, objects, key: str, stage_name: str, entry: dict, known: set | None = None) -> int:
    """Objects first, then the entry that names them."""
    sent = 0
    for digest in entry["outs"].values():
        sent += remote.push_object(objects, digest, known)
    remote.put_entry(key, {"stage": stage_name, **entry})
    return sent


def push(path: str, targets=(), *, url: str | None = None, overrides=(), backend=None, stream=None) -> dict:
    """Upload what the selected stages last built. Returns counts per stage."""
    from ascendpipe.engine.build import open_stores, select
    from ascendpipe.engine.plan import resolve
    from ascendpipe.errors import UserError
    from ascendpipe.graph.dag import edges
    from ascendpipe.store.remote import remote_url

    stream = stream or sys.stdout
    pipeline = resolve(path, list(overrides), backend)
    order = select(pipeline, edges(pipeline), list(targets))
    ws, db, hasher, objects = open_stores(pipeline)
    try:
        chosen = remote_url(url, getattr(pipeline, "remote", None), ws.root)
        if not chosen:
            raise UserError("no remote cache: set `remote: s3://BUCKET/PREFIX` in the pipeline, or pass --remote URL")
        remote = open_remote(chosen)
        state = db.all_state(ws.rel_pipeline(pipeline.path))
        result = {"remote": chosen, "stages": {}, "objects_uploaded": 0}
        known: set[str] = set()
        for name in order:
            st = state.get(name)
            if st is None:
                result["stages"][name] = {"state": "never built"}
                stream.write(f"  skipped  {name}: never built\n")
                continue
            try:
                sent = publish(remote, objects, st["key"], name, entry_for(db, st["key"], st), known)
            except (FileNotFoundError, CorruptObject) as exc:
                why = "missing from cache/" if isinstance(exc, FileNotFoundError) else str(exc)
                result["stages"][name] = {"state": "not pushed", "reason": why}
                stream.write(f"  skipped  {name}: {why}; build it again to push it\n")
                continue
            result["objects_uploaded"] += sent
            result["stages"][name] = {"state": "pushed", "key": st["key"], "objects_uploaded": sent}
            stream.write(f"  pushed   {name} ({sent} new objects)\n")
        pushed = sum(1 for s in result["stages"].values() if s["state"] == "pushed")
        stream.write(f"{pushed} of {len(order)} stages pushed to {chosen} ({result['objects_uploaded']} objects uploaded)\n")
        return result
    finally:
        db.close()


class RestoreOnly:
    """The runner of ``pull``: a stage that neither cache holds is reported, never run."""

    def run_and_store(self, executor, stage, log):
        from ascendpipe.errors import StageFailed

        raise StageFailed(stage.name, "not in the local or remote cache (pull only restores; build it)")
