"""What a compare keeps of its dumps once the rows are computed (``params.dump_keep``): every tensor,
the failing ones, or what it takes to rerun the first failure; the rest deleted after the index is
rewritten to list only what stays."""

from __future__ import annotations

import json
from pathlib import Path


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def kept_tensors(rows: list[dict], keep: str, keep_max: int | None, *, first: dict | None = None,
                 producers: dict | None = None) -> set[str] | None:
    """The tensor names (either side's) a dump keeps after the compare; None: every tensor.

    ``keep``: "all", "failing" (rows that failed: the tensors to look at) or "rerun" (the default: the
    failing rows and the rows feeding the first failure (``first``, through ``producers``): what it
    takes to look at the failure and run its op again on the same inputs); ``keep_max``: at most the
    first K of those rows in graph order. Graph inputs are always kept (they reproduce the run)."""
    if keep == "all" and keep_max is None:
        return None
    feeding: set[str] = set()
    if keep == "rerun" and first and first.get("index") is not None and 0 <= first["index"] < len(rows):
        ops = rows[first["index"]].get("golden_ops") or [rows[first["index"]].get("op_name")]
        feeding = {p for op in ops for p in (producers or {}).get(op, ()) if p not in ops}
    chosen = [r for r in rows if not r.get("pre") and (keep == "all" or r.get("failed") or (
        feeding and (r.get("op_name") in feeding or feeding & set(r.get("golden_ops") or []))))]
    if keep_max is not None:
        chosen = chosen[:keep_max]
    names = set()
    for r in chosen:
        names.update(x for x in (r.get("tensor"), r.get("golden_tensor")) if x)
    return names


def prune_dumps(rows: list[dict], folders: list[Path], *, keep: str, keep_max: int | None, first: dict | None = None,
                producers: dict | None = None) -> dict:
    """Drop from each dump folder the tensors ``kept_tensors`` does not keep; the index is rewritten
    first (atomically) to list only what stays, with ``kept`` saying the rule. {"tensors", "of"}."""
    from ascendpipe.fsutil import write_json_atomic

    wanted = kept_tensors(rows, keep, keep_max, first=first, producers=producers)
    total = kept_count = 0
    for folder in folders:
        index_path = Path(folder) / "index.json"
        index = json.loads(index_path.read_text())
        tensors = index["tensors"]
        total += len(tensors)
        if wanted is None:
            kept_count += len(tensors)
            continue
        stay = [e for e in tensors if e.get("op_type") == "Input" or e["name"] in wanted]
        gone = [e for e in tensors if not (e.get("op_type") == "Input" or e["name"] in wanted)]
        index["tensors"] = stay
        index["kept"] = {"rule": keep, "max": keep_max, "tensors": len(stay), "of": len(tensors)}
        write_json_atomic(index_path, index, allow_nan=False)
        for entry in gone:
            if entry.get("file"):  # a statistics-only entry has none
                (Path(folder) / entry["file"]).unlink(missing_ok=True)
        kept_count += len(stay)
    return {"tensors": kept_count, "of": total}
