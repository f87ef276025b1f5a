"""Garbage collection under the build lock (so no build is running): run records beyond what is
kept (``--runs KEEP``), cache objects that no record or run-cache entry needs, run-cache entry files
the database no longer names, and ``.tmp-*`` leftovers of killed builds (temp outputs, restores,
half-written objects and files)."""

from __future__ import annotations

import os
import shutil

from ascendpipe.fsutil import TEMP_PREFIX
from ascendpipe.config.model import DEFAULT_BUILD_DIR
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


def collect(workspace: str, *, dry_run: bool = False, only_current: bool = False, keep_runs: int | None = None) -> dict:
    from ascendpipe.engine.workspace import BuildLock, Workspace
    from ascendpipe.store import runcache
    from ascendpipe.store.db import Database
    from ascendpipe.store.objects import ObjectStore

    ws = Workspace(workspace)
    db = Database(ws.db_path, create=False, cache_root=ws.cache_root)
    objects = ObjectStore(ws.cache_root)
    try:
        with BuildLock(ws):
            result = {}
            if keep_runs is not None:
                removed_runs, kept_runs = db.prune_runs(keep_runs, dry_run=dry_run)
                result.update(removed_runs=removed_runs, kept_runs=kept_runs)
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
            named = {e["key"] for e in db.cache_entries()}
            stale_entries = [k for k in runcache.entry_keys(ws.cache_root) if k not in named]
            if not dry_run:
                for key in stale_entries:
                    runcache.remove_entry(ws.cache_root, key)
            leftovers, leftover_bytes = _temp_leftovers(ws, db)
            if not dry_run:
                for path in leftovers:
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    elif os.path.lexists(path):
                        os.unlink(path)
            result.update(removed_objects=removed, freed_bytes=freed + leftover_bytes, kept_objects=len(keep),
                          removed_entries=len(stale_entries), removed_temp=[os.path.relpath(p, ws.root) for p in leftovers],
                          dry_run=dry_run)
            return result
    finally:
        db.close()


def is_leftover(name: str, out_names: set[str]) -> bool:
    """A temp name one of our writers makes (fsutil.atomic_path, the executor's temp output folder,
    objects.restore and replace_path); anything else under that name is the user's and stays."""
    if not name.startswith(TEMP_PREFIX):
        return False
    if name.startswith((".tmp-old-", ".tmp-restore-")) or name.endswith(".tmp"):
        return True
    return any(name.startswith(f"{TEMP_PREFIX}{base}-") for base in out_names)


def _temp_leftovers(ws, db) -> tuple[list[str], int]:
    """Leftovers in cache/ and .ascendpipe/ (anywhere), and beside every output a record names."""
    found: list[str] = []
    for folder in (ws.cache_root, ws.state_dir):
        for root, dirs, files in os.walk(folder):
            for name in list(dirs):
                if name.startswith(TEMP_PREFIX):
                    found.append(os.path.join(root, name))
                    dirs.remove(name)
            found.extend(os.path.join(root, n) for n in files if n.startswith(TEMP_PREFIX))
    beside: dict[str, set[str]] = {}
    # and beside every path a pipeline claims (engine/owners.py): a stage of a build_dir of its own
    # killed before it was ever recorded left its temp output there
    for out in db.recorded_outputs() | {row["path"] for row in db.owners()}:
        parent, base = os.path.split(out.rstrip("/"))
        beside.setdefault(parent, set()).add(base)
    for parent, names in sorted(beside.items()):
        folder = ws.abs(parent) if parent else ws.root
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        found.extend(os.path.join(folder, n) for n in sorted(entries) if is_leftover(n, names))
    # the default build folder is ours alone: a build killed before anything was recorded left its
    # temp output there too
    default_build = ws.abs(DEFAULT_BUILD_DIR)
    if os.path.isdir(default_build):
        found.extend(os.path.join(default_build, n) for n in sorted(os.listdir(default_build)) if n.startswith(TEMP_PREFIX))
    size = 0
    for path in found:
        size += _size(path)
    return sorted(set(found)), size


def _size(path: str) -> int:
    if os.path.isdir(path) and not os.path.islink(path):
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs
                   if not os.path.islink(os.path.join(r, f)))
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0
