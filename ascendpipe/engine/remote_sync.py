"""The remote cache in a build, and ``push`` / ``pull``.

- During a build, a stale stage whose key is in neither the workspace nor the local run-cache is
  looked up in the remote: its objects are fetched into ``cache/`` (each one hashed on arrival), then
  restored exactly as from the local run-cache. A missing or corrupted remote object means the stage
  runs (and the corrupted object is deleted from the remote so the rebuild replaces it).
- ``pull`` is a build that only restores (``RestoreOnly``): what neither cache holds is reported.
  ``push`` (engine/push.py) uploads what was built, through ``publish``.
"""

from __future__ import annotations

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
        "note": "from the remote cache",
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


class RestoreOnly:
    """The runner of ``pull``: a stage that neither cache holds is reported, never run."""

    def run_and_store(self, executor, stage, log):
        from ascendpipe.errors import StageFailed

        raise StageFailed(stage.name, "not in the local or remote cache (pull only restores; build it)")
