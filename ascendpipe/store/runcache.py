"""Run-cache entries as files beside the objects: ``cache/runs/ab/cdef....json``, one per stage key.

The database's run-cache index is what a build reads; these files are its copy in ``cache/``, in the
remote cache's entry format (``store/remote.py``), so that a lost or damaged database is rebuilt
from ``cache/`` alone and a stage built before is restored, not rerun. An entry is written after the
objects it names and before the database records it (a kill between leaves a valid, harmless
entry); remedy file contents ride along, since the database's blob table is lost with it.
"""

from __future__ import annotations

import json
import os

from ascendpipe.fsutil import TEMP_PREFIX, write_bytes_atomic

ENTRY_FORMAT = "ascendpipe-remote-entry/1"  # the remote cache's format (store/remote.py)
RUNS_DIR = "runs"


def entry_file(cache_root: str, key: str) -> str:
    return os.path.join(cache_root, RUNS_DIR, key[:2], f"{key[2:]}.json")


def write_entry(cache_root: str, key: str, stage: str, outs: dict, metrics: dict, remedy: list, info: dict) -> None:
    body = {"format": ENTRY_FORMAT, "key": key, "stage": stage, "outs": outs, "metrics": metrics or {},
            "remedy": remedy or [], "info": info or {}}
    from ascendpipe.store.statefiles import refuse_linked_dirs

    path = entry_file(cache_root, key)
    refuse_linked_dirs(cache_root, path, "a folder of the cache")  # never written through a link out
    write_bytes_atomic(path, json.dumps(body, sort_keys=True, default=str).encode())


def remove_entry(cache_root: str, key: str) -> None:
    try:
        os.unlink(entry_file(cache_root, key))
    except FileNotFoundError:
        pass


def read_entries(cache_root: str):
    """Every well-formed entry under ``cache/runs/`` (a damaged one is skipped: it is only a cache)."""
    base = os.path.join(cache_root, RUNS_DIR)
    if not os.path.isdir(base):
        return
    for prefix in sorted(os.listdir(base)):
        folder = os.path.join(base, prefix)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.startswith(TEMP_PREFIX) or not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    entry = json.loads(f.read())
            except (OSError, ValueError):
                continue
            if (isinstance(entry, dict) and entry.get("format") == ENTRY_FORMAT and isinstance(entry.get("outs"), dict)
                    and entry.get("key") == prefix + name[:-5]):
                yield entry


def entry_keys(cache_root: str) -> list[str]:
    base = os.path.join(cache_root, RUNS_DIR)
    if not os.path.isdir(base):
        return []
    return [p + n[:-5] for p in sorted(os.listdir(base)) if os.path.isdir(os.path.join(base, p))
            for n in sorted(os.listdir(os.path.join(base, p))) if n.endswith(".json") and not n.startswith(TEMP_PREFIX)]
