"""Reading what the explorer shows: run records from the workspace database, and files of a run's
outputs from the object store (a compare stage's ``result.json``, reports), which outlive ``build/``."""

from __future__ import annotations

import json
import os

from ascendpipe.store.hashing import DIR_SUFFIX, hash_bytes


def select_runs(db, refs=(), *, pipeline: str | None = None, limit: int | None = None) -> list[dict]:
    """Run records (remedy contents included), newest first: the ``refs`` given (ids, latest, latest~N),
    else every run, optionally only one pipeline's and only the newest ``limit``."""
    from ascendpipe.records import resolve_run_id, run_record

    if refs:
        ids = list(dict.fromkeys(resolve_run_id(db, str(r)) for r in refs))
    else:
        ids = db.run_ids()
    runs = []
    for run_id in ids:
        run = run_record(db, run_id, with_remedy_content=True)
        if pipeline is not None and not _same_pipeline(run.get("pipeline"), pipeline):
            continue
        runs.append(run)
        if limit and len(runs) >= limit:
            break
    return sorted(runs, key=lambda r: r["id"], reverse=True)


def _same_pipeline(recorded: str | None, wanted: str) -> bool:
    if recorded is None:
        return False
    norm = lambda p: os.path.normpath(p)
    return norm(recorded) == norm(wanted) or os.path.basename(recorded) == wanted or recorded.endswith("/" + wanted)


def read_output_file(objects, digest: str, relpath: str) -> bytes | None:
    """One file of a stored output (a folder's manifest entry, or the file itself when ``relpath``
    is empty), checked against its hash; None when the object is gone (gc) or damaged."""
    try:
        if digest.endswith(DIR_SUFFIX):
            entry = next((e for e in objects.manifest(digest) if e["path"] == relpath), None)
            if entry is None:
                return None
            digest = entry["hash"]
        elif relpath:
            return None
        with open(objects.path_of(digest), "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    return data if hash_bytes(data) == digest else None


def output_files(objects, digest: str) -> list[str] | None:
    """Relative paths inside a stored folder output (None when gone or not a folder)."""
    if not digest.endswith(DIR_SUFFIX):
        return None
    try:
        return [e["path"] for e in objects.manifest(digest)]
    except (OSError, ValueError):
        return None


def compare_curves(objects, runs: list[dict]) -> tuple[dict, dict, list[str]]:
    """Per-op series of every compare stage of ``runs``, read from the cache.

    Returns (digest -> curve, (run id, stage) -> digest, notes about what could not be read).
    Identical outputs (a stage fresh in many runs) are read once.
    """
    from ascendpipe.explorer.shape import curve

    curves: dict[str, dict] = {}
    index: dict[tuple, str] = {}
    missing: dict[str, list] = {}
    for run in runs:
        for name, st in (run.get("stages") or {}).items():
            if st.get("kind") != "compare" or st.get("state") not in ("ran", "restored", "fresh"):
                continue
            digest = next(iter((st.get("outputs") or {}).values()), None)
            if not digest:
                continue
            if digest not in curves and digest not in missing:
                data = read_output_file(objects, digest, "result.json")
                try:
                    curves[digest] = curve(json.loads(data)) if data is not None else None
                except ValueError:
                    curves[digest] = None
                if curves[digest] is None:
                    del curves[digest]
                    missing[digest] = []
            if digest in curves:
                index[(run["id"], name)] = digest
            else:
                missing[digest].append(f"run {run['id']} {name}")
    notes = [f"per-op results of {', '.join(where)} are no longer in the cache (garbage-collected)"
             for where in missing.values() if where]
    return curves, index, notes
