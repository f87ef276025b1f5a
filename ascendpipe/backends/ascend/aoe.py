"""AOE: tuning argv, knowledge bank location, tuned OM finder, and the result JSON in every version.

Formats: CANN's AOE documentation. Pure except the two finders.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from ascendpipe.backends.ascend.atc import AtcSettings, common_options

JOB_SUBGRAPH = 1
JOB_OPERATOR = 2
BANK_ENV = "TUNE_BANK_PATH"  # priority TUNE_BANK_PATH > ASCEND_CACHE_PATH > default
RESULT_FORMAT = "ascendpipe-aoe-result/1"
_IMPROVED = re.compile(r"Performance improved by\s*(-?[\d.]+)\s*%")
_COST = re.compile(r"Aoe process finished,\s*cost time\s*([\d.]+)\s*s")


def soc_family(soc: str) -> str:
    """'A3' (Ascend910_93*), 'A2' (Ascend910B*) or 'other' (Atlas inference/training products)."""
    if soc.startswith("Ascend910_93"):
        return "A3"
    return "A2" if soc.startswith("Ascend910B") else "other"


# job types AOE takes per product (AOE_MODE, hiascend 900 envref_07_0106: Atlas inference products 1 and 2,
# Atlas A2 2 and 4 (4: gradient split, a training mode), Atlas A3 only 2); ascendpipe runs 1 and 2
JOBS_BY_FAMILY = {"other": (JOB_SUBGRAPH, JOB_OPERATOR), "A2": (JOB_OPERATOR,), "A3": (JOB_OPERATOR,)}
# ATC options aoe does not take (AOE's option table, hiascend 850 aoepar_16_001, lists --precision_mode only)
NOT_AOE_OPTIONS = {"precision_mode_v2": "use precision_mode (force_fp16, allow_mix_precision, ...) for a tune stage"}


def default_jobs(soc: str) -> list[int]:
    return list(JOBS_BY_FAMILY[soc_family(soc)])


def check_jobs(jobs: list[int], soc: str) -> None:
    from ascendpipe.errors import Location, UserError

    allowed = JOBS_BY_FAMILY[soc_family(soc)]
    bad = [j for j in jobs if j not in allowed]
    if bad:
        raise UserError(f"aoe job_type {bad[0]} is not offered on {soc} (Atlas {soc_family(soc)}): it takes "
                        f"{', '.join(map(str, allowed))} (AOE_MODE, CANN doc envref_07_0106)",
                        Location(field="job_type"), hint=f"job_type: {list(allowed)} (the default on this SoC)")


def check_options(s: AtcSettings) -> None:
    from ascendpipe.errors import Location, UserError

    for name, instead in NOT_AOE_OPTIONS.items():
        if getattr(s, name, None):
            raise UserError(f"aoe does not take --{name} (AOE's option table, CANN doc aoepar_16_001); {instead}",
                            Location(field=name))


def tune_argv(aoe: str | Path, s: AtcSettings, job_type: int) -> list[str]:
    """One AOE job. ``--buffer_optimize`` only takes effect with job type 2, so only goes there. ``s.soc_version``
    still picks the job types (``check_jobs``) and the bank folder; aoe itself is not given it."""
    if job_type not in (JOB_SUBGRAPH, JOB_OPERATOR):
        raise ValueError(f"job_type must be 1 or 2, got {job_type}")
    check_options(s)
    # no --soc_version: AOE takes it only with --op_tune_mode=fast (hiascend aoepar_16_060; msit 8.2.0's aoe
    # argument map has none) and otherwise tunes for the board it runs on (doctor checks the pipeline's SoC)
    options = [a for a in common_options(s) if not a.startswith("--soc_version=")]
    argv = [str(aoe), *options, f"--job_type={job_type}"]
    if job_type == JOB_OPERATOR and s.buffer_optimize:
        argv.append(f"--buffer_optimize={s.buffer_optimize}")
    if s.log:
        argv.append(f"--log={s.log}")
    return argv


def bank_env(bank_dir: Path) -> dict[str, str]:
    return {BANK_ENV: str(bank_dir)}


def find_tuned_om(work_dir: Path) -> Path | None:
    """``aoe_workspace/<model>_<ts>/tunespace/result/<model>_<ts>_tune[_<os>_<arch>].om``, newest."""
    found = sorted(work_dir.glob("aoe_workspace/*/tunespace/result/*_tune*.om"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def find_result_files(work_dir: Path) -> list[Path]:
    return sorted(work_dir.glob("aoe_result_*.json"))


def parse_log(text: str) -> dict[str, Any]:
    """The success lines: per-task 'Performance improved by xx%' and the total cost time."""
    cost = _COST.search(text)
    return {"improvements_pct": [float(m) for m in _IMPROVED.findall(text)],
            "cost_s": float(cost.group(1)) if cost else None}


# ---- aoe_result_*.json ---------------------------------------------------------------------------

def _percent(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip().rstrip("%"))
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _perf_block(entry: dict) -> dict:
    """The dict holding performance_*_tune(us): nested under tune_performance.<key> or flat."""
    if "performance_after_tune(us)" in entry or "performance_before_tune(us)" in entry:
        return entry
    for value in entry.values():
        if isinstance(value, dict):
            found = _perf_block(value)
            if found:
                return found
    return {}


def _op_row(entry: dict, default_mode: str | None) -> dict:
    perf = _perf_block(entry)
    before = _number(perf.get("performance_before_tune(us)"))
    after = _number(perf.get("performance_after_tune(us)"))
    improvement = _percent(perf.get("performance_improvement"))
    if improvement is None and before and after:
        # AOE reports (before - after) / after: 134 -> 99 us is "35.35%".
        improvement = round((before / after - 1.0) * 100.0, 2)
    return {"op_name": entry.get("op_name"), "op_type": entry.get("op_type"),
            "before_us": before, "after_us": after, "improvement_pct": improvement,
            "update_mode": perf.get("update_mode", default_mode)}


def _operators(block: Any) -> Iterable[dict]:
    """repo_modified_operators: a list (63RC2, 900) or {add_repo_operators: [...], ...} (62RC1)."""
    if isinstance(block, list):
        for entry in block:
            yield _op_row(entry, None)
    elif isinstance(block, dict):
        for key, entries in block.items():
            mode = key.removesuffix("_repo_operators")
            for entry in entries or []:
                yield _op_row(entry, mode)


def _report_items(data: Any) -> tuple[str, list[list[dict]]]:
    if isinstance(data, list):
        return "63RC2", [data]
    if isinstance(data, dict):
        reports = [v for k, v in data.items() if k.startswith("report") and isinstance(v, list)]
        if reports:
            return "900", reports
        if "OPAT" in data or "basic" in data:
            return "single", [[data]]
    raise ValueError("not an AOE result: expected a list or {\"report_*\": [...]}")


def parse_result(data: Any) -> dict[str, Any]:
    """Every known version into one shape: per-op before/after/improvement, model numbers, basics."""
    variant, reports = _report_items(data)
    out: dict[str, Any] = {"format": RESULT_FORMAT, "variant": variant, "tuning_name": None,
                           "tuning_time_s": None, "result": None, "model": {}, "ops": []}
    for items in reports:
        for item in items:
            if not isinstance(item, dict):
                continue
            basic = item.get("basic") or {}
            out["tuning_name"] = basic.get("tuning_name", out["tuning_name"])
            out["tuning_time_s"] = _number(basic.get("tuning_time(s)", out["tuning_time_s"]))
            opat = item.get("OPAT")
            if not isinstance(opat, dict):
                continue
            out["result"] = opat.get("opat_tuning_result", out["result"])
            block = opat.get("repo_modified_operators")
            if isinstance(block, dict) and variant != "900":
                out["variant"] = "62RC1"
            out["ops"].extend(_operators(block))
            model = {"baseline_ms": _number(opat.get("model_baseline_performance(ms)")),
                     "result_ms": _number(opat.get("model_result_performance(ms)")),
                     "improvement_pct": _percent(opat.get("model_performance_improvement"))}
            out["model"].update({k: v for k, v in model.items() if v is not None})
    return out
