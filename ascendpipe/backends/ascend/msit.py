"""msit debug compare: argv, and its ``result_*.csv`` read into ascendpipe's compare row shape.

CSV quirks handled (from msit's compare documentation and sample output): duplicated header names
(renamed as pandas does: the second ``DataType`` is ``DataType.1``), ``NaN`` cells, the optional
``OpSequence`` / ``Address`` / ``OverFlow`` columns, ``StandardDeviation`` holding ``mean;std``
pairs, and a comma-joined ``GroundTruth`` for fused ops (``*`` for NPU-only ops).
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Any

RESULT_FORMAT = "ascendpipe-compare/1"
# msit column -> key of ascendpipe.compare rows (compare/runner.py)
METRIC_COLUMNS = {
    "CosineSimilarity": "cosine", "MaxAbsoluteError": "max_abs_error",
    "AccumulatedRelativeError": "accumulated_rel_error", "RelativeEuclideanDistance": "relative_euclidean",
    "KullbackLeiblerDivergence": "kl", "MeanAbsoluteError": "mean_abs_error", "RootMeanSquareError": "rmse",
    "MaxRelativeError": "max_rel_error", "MeanRelativeError": "mean_rel_error",
}
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan", re.IGNORECASE)


def compare_argv(msit: str | Path, *, golden_model: Path, om_model: Path, output: Path,
                 inputs: list[Path] | None = None, cann_path: Path | None = None,
                 input_shape: str | None = None, device: int | None = None, advisor: bool = False,
                 extra: list[str] | None = None) -> list[str]:
    argv = [str(msit), "debug", "compare", "-gm", str(golden_model), "-om", str(om_model), "-o", str(output)]
    if inputs:
        argv += ["-i", ",".join(str(p) for p in inputs)]
    if cann_path:
        argv += ["-c", str(cann_path)]
    if input_shape:
        argv += ["-is", input_shape]
    if device is not None:
        argv += ["-d", str(device)]
    if advisor:
        argv.append("--advisor")
    return argv + list(extra or [])


def find_result_csv(output: Path) -> Path | None:
    """``{out}/{ts}/[{input-shape}/]result_{ts}.csv``, newest."""
    found = sorted(output.glob("**/result_*.csv"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def dedupe_header(header: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in (h.strip() for h in header):
        count = seen.get(name, 0)
        out.append(name if count == 0 else f"{name}.{count}")
        seen[name] = count + 1
    return out


def _float(cell: str | None) -> float | None:
    """A metric cell: a number, or None for 'NaN', '', 'N/A' or text (msit writes NaN when it cannot compare)."""
    if cell is None:
        return None
    try:
        value = float(cell.strip())
    except ValueError:
        return None
    return None if math.isnan(value) else value


def parse_std(cell: str | None) -> list[dict[str, float]]:
    """``StandardDeviation``: 'mean;std' pairs (one per side, possibly parenthesised/comma-joined)."""
    if not cell or not cell.strip() or cell.strip().lower() == "nan":
        return []
    numbers = [float(n) for n in _NUMBER.findall(cell)]
    return [{"mean": numbers[i], "std": numbers[i + 1]} for i in range(0, len(numbers) - 1, 2)]


def _yes(cell: str | None) -> bool | None:
    if cell is None or not cell.strip():
        return None
    return cell.strip().upper() in ("YES", "TRUE", "1")


def _row(rec: dict[str, str], position: int) -> dict[str, Any]:
    truth = (rec.get("GroundTruth") or "").strip()
    golden_ops = [] if truth in ("", "*") else [t.strip() for t in truth.split(",") if t.strip()]
    std = parse_std(rec.get("StandardDeviation"))
    row: dict[str, Any] = {
        "index": position,
        "msit_index": rec.get("Index"),
        "op_name": (rec.get("NPUDump") or "").strip(),
        "op_type": (rec.get("OpType") or "").strip(),
        "tensor": (rec.get("TensorIndex") or "").strip(),
        "golden_ops": golden_ops,
        "shape": [int(d) for d in re.findall(r"\d+", rec.get("Shape") or "")],
        "dtype": (rec.get("DataType") or "").strip() or None,
        "golden_dtype": (rec.get("DataType.1") or "").strip() or None,
        "side": "target_only" if truth == "*" else "both",
        "fused": len(golden_ops) > 1,
        "is_output": (rec.get("NPUDump") or "").strip() == "Node_Output" or bool(_yes(rec.get("IsOutputNode"))),
        "overflow": "target" if _yes(rec.get("OverFlow")) else None,
        "note": (rec.get("CompareFailReason") or "").strip(),
        "target_mean": std[0]["mean"] if std else None, "target_std": std[0]["std"] if std else None,
        "golden_mean": std[1]["mean"] if len(std) > 1 else None, "golden_std": std[1]["std"] if len(std) > 1 else None,
        "is_npu_op": _yes(rec.get("IsNpuOps")),
        "failed": bool(_yes(rec.get("IsPrecisionError"))),
    }
    for column, key in METRIC_COLUMNS.items():
        row[key] = _float(rec.get(column))
    return row


def read_result_csv_text(text: str) -> dict[str, Any]:
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    header = next(reader, None)
    if not header or "NPUDump" not in [h.strip() for h in header]:
        raise ValueError("not an msit/msaccucmp compare result: no NPUDump column")
    columns = dedupe_header(header)
    rows = []
    for raw in reader:
        if any(c.strip() for c in raw):
            rows.append(_row(dict(zip(columns, raw)), len(rows)))
    return {"format": RESULT_FORMAT, "source": "msit", "columns": columns, "rows": rows,
            "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict[str, Any]:
    cosines = [r["cosine"] for r in rows if r["cosine"] is not None]
    failed = [r for r in rows if r["failed"]]
    outputs = [r["cosine"] for r in rows if r["is_output"] and r["cosine"] is not None]
    return {"first_failure_index": failed[0]["index"] if failed else None, "failed_ops": len(failed),
            "min_cosine": min(cosines) if cosines else None, "output_cosine": min(outputs) if outputs else None,
            "overflow_ops": sum(1 for r in rows if r["overflow"] == "target"), "compared_tensors": len(cosines),
            "target_only": sum(1 for r in rows if r["side"] == "target_only")}


def read_result_csv(path: Path) -> dict[str, Any]:
    data = read_result_csv_text(Path(path).read_text(errors="replace"))
    data["path"] = str(path)
    return data


AGREE_TOLERANCE = 1e-3  # |cosine(ours) - cosine(msit)| at most this: the two compares agree on the row


def _keyed(rows: list[dict]) -> dict[tuple[str, int], dict]:
    """Rows keyed by (op name, k-th row of that op): an op with several outputs has one row each."""
    seen: dict[str, int] = {}
    keyed = {}
    for row in rows:
        op = row.get("op_name") or ""
        k = seen.get(op, 0)
        seen[op] = k + 1
        keyed[(op, k)] = row
    return keyed


def cosine_agreement(ours: list[dict], theirs: list[dict], tol: float = AGREE_TOLERANCE) -> dict[str, Any]:
    """How many rows two compares of the same OM agree on: rows paired by target op (msit's NPUDump is
    the OM op, as our row's op_name); both cosines known; |difference| <= tol. msit's own net-output
    rows (``Node_Output``) and one-sided rows are not paired."""
    mine = _keyed([r for r in ours if r.get("side") == "both"])
    other = _keyed([r for r in theirs if r.get("op_name") != "Node_Output" and r.get("side") != "target_only"])
    paired = disagree = 0
    differing = []
    for key in sorted(set(mine) & set(other), key=lambda k: (mine[k].get("index", 0), k[1])):
        a, b = mine[key].get("cosine"), other[key].get("cosine")
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            continue
        paired += 1
        if abs(a - b) > tol:
            disagree += 1
            differing.append({"op_name": key[0], "ours": a, "msit": b})
    return {"tolerance": tol, "paired_rows": paired, "agree": paired - disagree, "disagree": differing,
            "only_ours": len(set(mine) - set(other)), "only_msit": len(set(other) - set(mine))}
