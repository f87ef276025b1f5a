"""Garbage collection of the object store: drop what no record or run-cache entry still needs."""

from __future__ import annotations

import os

from ascendpipe.store.hashing import DIR_SUFFIX


def _listed_refs(objects, entries: list[dict]) -> set[str]:
    """Objects a kept output folder names in its ``object_refs.json`` (a compare's shared golden
    dump), with the files of those folders."""
    from ascendpipe.store.dump_cache import OBJECT_REFS, referenced_objects

    keep = set()
    for entry in entries:
        if entry.get("path") != OBJECT_REFS or not objects.has(entry["hash"]):
            continue
        with open(objects.path_of(entry["hash"]), "rb") as f:
            for digest in referenced_objects(f.read()):
                keep.add(digest)
                if digest.endswith(DIR_SUFFIX) and objects.has(digest):
                    try:
                        keep.update(e["hash"] for e in objects.manifest(digest))
                    except (OSError, ValueError):
                        pass
    return keep


def _drop_dump_scratch(cache_root: str) -> None:
    """Half-made shared dumps a killed build left (``cache/dumps/.tmp-*``); no build runs now."""
    import shutil

    from ascendpipe.store.dump_cache import REFS_DIR

    folder = os.path.join(cache_root, REFS_DIR)
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if name.startswith(".tmp-"):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


def collect(workspace: str, *, dry_run: bool = False, only_current: bool = False) -> dict:
    from ascendpipe.engine.workspace import BuildLock, Workspace
    from ascendpipe.store.db import Database
    from ascendpipe.store.objects import ObjectStore

    ws = Workspace(workspace)
    db = Database(ws.db_path)
    objects = ObjectStore(ws.cache_root)
    try:
        with BuildLock(ws):
            if only_current and not dry_run:
                current = {h for h in db.referenced_hashes(current_only=True)}
                db.cache_prune(keep=current)
            keep = set()
            for digest in db.referenced_hashes():
                keep.add(digest)
                if digest.endswith(DIR_SUFFIX) and objects.has(digest):
                    try:
                        entries = objects.manifest(digest)
                    except (OSError, ValueError):
                        continue
                    keep.update(e["hash"] for e in entries)
                    keep.update(_listed_refs(objects, entries))
            removed, freed = 0, 0
            for digest, path in list(objects.all_digests()):
                if digest not in keep:
                    removed += 1
                    freed += os.path.getsize(path)
                    if not dry_run:
                        os.unlink(path)
            # stale temp files from killed writes, and plans
            for folder in (objects.root, ws.plans_dir):
                if not os.path.isdir(folder):
                    continue
                for root, dirs, files in os.walk(folder):
                    for name in files:
                        if name.startswith(".tmp-") or ".tmp" in name and folder == ws.plans_dir:
                            if not dry_run:
                                os.unlink(os.path.join(root, name))
            if not dry_run:
                _drop_dump_scratch(ws.cache_root)
            return {"removed_objects": removed, "freed_bytes": freed, "kept_objects": len(keep), "dry_run": dry_run}
    finally:
        db.close()
