"""The remote cache in a build, and ``push`` / ``pull``.

- During a build, a stale stage whose key is in neither the workspace nor the local run-cache is
  looked up in the remote: its objects are fetched into ``cache/`` (each one hashed on arrival), then
  restored exactly as from the local run-cache. A missing or corrupted remote object means the stage
  runs (and the corrupted object is deleted from the remote so the rebuild replaces it).
- ``pull`` is a build that only restores (``RestoreOnly``): what neither cache holds is reported.
  ``push`` (engine/push.py) uploads what was built, through ``publish``.
- Shared dumps travel with the stages that read them: a compare's golden dump lives in ``cache/``,
  not in the stage's folder, which names it in ``object_refs.json``. ``publish`` uploads it too and
  lists it in the entry (``dumps``: key -> folder digest) and under its key (``dumps/ab/cdef...``,
  where Ray workers look before dumping); a restore fetches it and names it under
  its key in ``cache/dumps/``, so the next compare of that golden on the other machine reads it
  instead of dumping again. Both are best effort: the stage's own outputs are whole without it.
- Names read from the remote are checked before use (store/remote.py: ``RemoteUntrusted``); what
  ``push`` reads from this workspace's records and cache is checked the same way (``UnsafeName``).
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
    """``(entry, None)`` once the stage's outputs are restored from the remote, else ``(None, note)``.
    An entry that fails its checks (a name or digest out of the store's shape, a link in a folder
    remote) is a miss: nothing is written from it, the stage is built here, and the note names it."""
    from ascendpipe.store.remote import RemoteUntrusted

    remote = executor.remote
    try:
        entry = remote.get_entry(key)
    except RemoteUntrusted as exc:
        return None, _refused(executor, stage, exc)
    if entry is None or set(entry["outs"]) != set(stage.outs):
        return None, None
    try:
        # every name in the entry was checked by get_entry, every manifest by fetch_objects before
        # anything is written (a hostile remote is RemoteUntrusted: a miss, said in the note)
        remote.fetch_objects(executor.objects, list(entry["outs"].values()))
        for out, digest in entry["outs"].items():
            executor.objects.restore(digest, executor.ws.abs(out))
            executor.hasher.forget(out)
    except FileNotFoundError:
        return None, "remote cache object missing, rebuilt"
    except CorruptObject as exc:
        return None, f"remote {exc}; rebuilt"
    except RemoteUntrusted as exc:
        return None, _refused(executor, stage, exc)
    _restore_dumps(remote, executor.objects, executor.ws.cache_root, entry.get("dumps"))
    return {
        "outs": dict(entry["outs"]),
        "metrics": dict(entry.get("metrics") or {}),
        "remedy": list(entry.get("remedy") or []),  # with their content: a fresh clone records them whole
        "info": dict(entry.get("info") or {}),
        "note": "from the remote cache",
    }, None


def _refused(executor, stage, exc) -> str:
    """The note of a remote entry refused as a miss (kept for ``pull``, which only restores, to say why)."""
    text = exc.message.removesuffix("; nothing was written")
    note = f"{text}: taken as a miss, nothing was written from it"
    notes = executor.__dict__.setdefault("remote_refusals", {})
    notes[stage.name] = note
    return note + "; built here"


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
    """Objects first (the outputs', then the shared dumps they name), then the entry that names them."""
    sent = 0
    for digest in entry["outs"].values():
        sent += remote.push_object(objects, digest, known)
    dumps = {}
    for dump_key, digest in sorted(shared_dumps(objects, entry["outs"]).items()):
        try:
            # objects, then the dump's key (``dumps/``): a Ray worker's compare finds it there too
            sent += remote.put_dump(objects, dump_key, digest, known)
        except (FileNotFoundError, CorruptObject, ValueError):
            # not here (a Ray worker made it and uploaded it itself), damaged or out of shape: listed
            # only where the remote names it whole; else the other side dumps it again when needed
            if remote.get_dump(dump_key) != digest:
                continue
        dumps[dump_key] = digest
    remote.put_entry(key, {"stage": stage_name, **entry, **({"dumps": dumps} if dumps else {})})
    return sent


def shared_dumps(objects, outs: dict[str, str]) -> dict[str, str]:
    """The shared dumps (key -> folder digest) that the ``object_refs.json`` of these outputs name."""
    from ascendpipe.store.dump_cache import OBJECT_REFS, referenced_dumps
    from ascendpipe.store.hashing import DIR_SUFFIX

    found: dict[str, str] = {}
    for digest in outs.values():
        if not digest.endswith(DIR_SUFFIX):
            continue
        try:
            refs = [e["hash"] for e in objects.manifest(digest) if e.get("path") == OBJECT_REFS]
            for ref in refs:
                with open(objects.path_of(ref), "rb") as handle:
                    found.update(referenced_dumps(handle.read()))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # an output folder this store cannot read names nothing
    return found


def _restore_dumps(remote, objects, cache_root, dumps) -> None:
    """Fetch the shared dumps a restored stage read and name them in ``cache/dumps/`` (best effort)."""
    if not isinstance(dumps, dict):
        return
    from ascendpipe.store.dump_cache import DumpCache, is_dump_ref
    from ascendpipe.store.remote import RemoteUnreachable

    cache = DumpCache(cache_root)
    for dump_key, digest in sorted(dumps.items()):
        # names from the remote become paths here only in the store's own shapes (never a '../')
        if not is_dump_ref(dump_key, digest) or cache.get(dump_key) is not None:
            continue
        try:
            remote.fetch_object(objects, digest)
        except (FileNotFoundError, CorruptObject):
            continue  # not in the remote (or damaged, and deleted there): made again when needed
        except RemoteUnreachable:
            return  # the stage itself is restored; its dumps are made again when needed
        cache.link(dump_key, digest)


class RestoreOnly:
    """The runner of ``pull``: a stage that neither cache holds is reported, never run."""

    def run_and_store(self, executor, stage, log):
        from ascendpipe.errors import StageFailed

        refused = getattr(executor, "remote_refusals", {}).get(stage.name)
        why = f" ({refused})" if refused else ""
        raise StageFailed(stage.name, f"not in the local or remote cache{why}; pull only restores: build it")
