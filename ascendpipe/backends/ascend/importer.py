"""``ascendpipe import PATH``: recognise a result made outside ascendpipe and normalise it.

Recognised: an msprof ``PROF_*`` directory (or a directory holding them), an msit / msaccucmp
compare ``result_*.csv``, an AOE ``aoe_result_*.json``, an ais_bench ``*_summary.json``, and a
standalone msprof ``op_summary_*.csv`` / ``op_statistic_*.csv``. Recognition goes by content, so
renamed files still work; a file that fits none is a UserError saying what is accepted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ascendpipe.backends.ascend import aoe, ais_bench, msit, msprof
from ascendpipe.backends.ascend import import_checks as checks
from ascendpipe.errors import Location, UserError

ACCEPTED = ("an msprof PROF_* directory", "an msit compare result_*.csv", "an aoe_result_*.json",
            "an ais_bench *_summary.json", "an msprof op_summary_*.csv / op_statistic_*.csv")
IMPORT_FORMAT = "ascendpipe-import/1"


def json_safe(value: Any) -> Any:
    """Strict JSON: NaN becomes null, infinities the strings "inf" / "-inf" (an overflow stays visible)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def _wrap(kind: str, path: Path, data: dict) -> dict[str, Any]:
    return {"format": IMPORT_FORMAT, "kind": kind, "source": str(path), "data": json_safe(data)}


def _unrecognised(path: Path, why: str) -> UserError:
    return UserError(f"not a recognised CANN result ({why}); accepted: {'; '.join(ACCEPTED)}",
                     Location(file=str(path)))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"not a text file (byte {exc.start} is not UTF-8): not a CANN result",
                        Location(file=str(path))) from None


def _import_dir(path: Path) -> dict[str, Any]:
    prof_dirs = msprof.find_prof_dirs(path)
    if not prof_dirs:
        raise _unrecognised(path, "a directory without PROF_* inside")
    for prof_dir in prof_dirs:  # every CSV checked before one is believed
        for stem in ("op_summary", "op_statistic"):
            for csv_path in msprof.find_csvs(prof_dir, stem):
                checks.check_msprof_csv(_read_text(csv_path), str(csv_path), stem)
    profiles = [msprof.read_prof_dir(p) for p in prof_dirs]
    if not any(p["op_summary"] or p["op_statistic"] for p in profiles):
        raise UserError("PROF_* directory has no op_summary_*.csv or op_statistic_*.csv; "
                        "run `msprof --export=on --output=PROF_...` first", Location(file=str(path)))
    return _wrap("msprof", path, profiles[-1] if len(profiles) == 1 else {"profiles": profiles})


def _import_csv(path: Path, text: str) -> dict[str, Any]:
    first = text.lstrip("\ufeff").splitlines()[0] if text.strip() else ""
    if "NPUDump" in first:
        raw = checks.check_compare_csv(text, str(path))
        return _wrap("msit_compare", path, _ours_stay_ours(msit.read_result_csv_text(text), raw))
    if "Op Name" in first or "Task Duration(us)" in first:
        checks.check_msprof_csv(text, str(path), "op_summary")
        rows = msprof.read_csv_text(text)
        return _wrap("msprof", path, {"format": msprof.SUMMARY_FORMAT, "source": "msprof",
                                      "summary": msprof.summarize(rows, []), "op_summary": rows, "op_statistic": []})
    if "OP Type" in first and ("Total Time(us)" in first or "Count" in first):
        checks.check_msprof_csv(text, str(path), "op_statistic")
        rows = msprof.read_csv_text(text)
        return _wrap("msprof", path, {"format": msprof.SUMMARY_FORMAT, "source": "msprof",
                                      "summary": msprof.summarize([], rows), "op_summary": [], "op_statistic": rows})
    raise _unrecognised(path, "CSV header has neither NPUDump nor msprof columns")


def _ours_stay_ours(data: dict, raw: list[dict[str, str]]) -> dict:
    """Our own result.csv (it has a ``Failed`` column): its rows fail as our compare decided, not as
    msit's IsPrecisionError says (NO on a row whose cosine is NaN, e.g. an fp16 overflow: msit's
    cmp_process.py:181), and its overflows are our OverflowKind; msit's verdict is kept beside."""
    if "Failed" not in data["columns"]:
        return data
    for row, rec in zip(data["rows"], raw):
        row["msit_precision_error"] = row["failed"]
        row["failed"] = rec.get("Failed", "").strip().upper() == "YES"
        row["fail_reasons"] = rec.get("FailReasons", "").strip() or None
        row["overflow"] = rec.get("OverflowKind", "").strip() or None
    data["source"] = "ascendpipe"
    data["summary"] = msit.summarize(data["rows"])
    return data


def _import_json(path: Path, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UserError(f"invalid JSON: {exc}", Location(file=str(path))) from None
    except RecursionError:
        data = None
    from ascendpipe.userfile import MAX_JSON_DEPTH, json_depth

    if data is None and text.strip() != "null" or json_depth(data) > MAX_JSON_DEPTH:
        raise UserError("JSON nested deeper than it can be read (arrays or objects inside each other "
                        "hundreds of levels deep): not a CANN result", Location(file=str(path))) from None
    if isinstance(data, dict) and "NPU_compute_time" in data:
        checks.check_ais_summary(data, str(path))
        return _wrap("ais_bench", path, ais_bench.parse_summary(data))
    try:
        aoe._report_items(data)  # recognised as an AOE layout before its fields are checked
    except ValueError:
        raise _unrecognised(path, "JSON is neither an ais_bench summary nor an AOE result") from None
    checks.check_aoe_result(data, str(path))
    result = aoe.parse_result(data)
    if not result["ops"] and result["result"] is None and result["tuning_name"] is None:
        raise _unrecognised(path, "JSON has no AOE basic/OPAT blocks")
    return _wrap("aoe", path, result)


def import_path(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise UserError("no such file or directory", Location(file=str(path)))
    if path.is_dir():
        return _import_dir(path)
    if path.suffix.lower() not in (".csv", ".json"):
        raise _unrecognised(path, f"unknown file type '{path.suffix or 'none'}'")
    text = _read_text(path)
    if path.suffix.lower() == ".csv":
        return _import_csv(path, text)
    return _import_json(path, text)


def describe(result: dict[str, Any]) -> str:
    """A few human lines about an imported result."""
    kind, data = result["kind"], result["data"]
    if kind == "ais_bench":
        lat = data["latency_ms"]
        return (f"ais_bench summary: {data['count']} runs, mean {lat['mean']} ms, median {lat['median']} ms, "
                f"p99 {lat['p99']} ms, throughput {data['throughput']}")
    if kind == "aoe":
        return (f"AOE result ({data['variant']} layout): {len(data['ops'])} tuned ops, "
                f"result '{data['result']}', model {data['model'] or 'n/a'}")
    if kind == "msit_compare":
        s = data["summary"]
        return (f"msit compare: {len(data['rows'])} rows, {s['failed_ops']} precision errors, "
                f"min cosine {s['min_cosine']}, first failure at row {s['first_failure_index']}")
    profiles = data.get("profiles") or [data]

    def one(p):
        s = p["summary"]
        runs = (f"{s['ops']} op rows" if s.get("source") != "op_statistic"
                else f"{s['ops']} op runs (op_statistic's counts)")
        return f"msprof: {runs}, {s['op_types']} op types, total task time {s['total_task_duration_us']:.1f} us"

    return "; ".join(one(p) for p in profiles)
