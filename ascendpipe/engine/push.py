"""``push``: upload what the selected stages last built to the remote cache.

Each local object is verified before it is uploaded (a corrupted one is never published), only
objects the remote lacks are sent, and each stage's entry goes last.
"""

from __future__ import annotations

import sys

from ascendpipe.engine.remote_sync import entry_for, open_remote, publish
from ascendpipe.store.objects import CorruptObject, UnsafeName


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
            except (FileNotFoundError, CorruptObject, UnsafeName) as exc:
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
