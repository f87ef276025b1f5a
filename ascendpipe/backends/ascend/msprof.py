"""msprof: collect argv (both forms), the PROF_* tree, and the op_summary / op_statistic CSVs.

Formats: CANN's profiling documentation (msprof collection and export). Rows keep msprof's own column names
(the emulator's profile uses the same names), with the version variants folded into one spelling:
``Block Dim`` -> ``Block Num``, ``Mix Block Dim`` -> ``Mix Block Num``, ``total_cycles`` ->
``aic_total_cycles``; ``N/A`` and empty cells become None; numeric columns become floats.
"""

from __future__ import annotations

import csv
import io
import shlex
from pathlib import Path
from typing import Any

DEFAULT_SWITCHES = ("--model-execution=on", "--runtime-api=on", "--task-time=on", "--aicpu=on")
RENAMES = {"Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num", "total_cycles": "aic_total_cycles"}
TEXT_COLUMNS = {
    "Model Name", "Op Name", "OP Type", "OP State", "Task Type", "Core Type", "HF32 Eligible",
    "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
    "Output Formats",
}
SUMMARY_FORMAT = "ascendpipe-profile/1"


def collect_argv(msprof: str | Path, output: Path, app_argv: list[str], *, form: str = "application",
                 switches: tuple[str, ...] | list[str] = DEFAULT_SWITCHES) -> list[str]:
    """``msprof --output=D --application="cmd args"`` (basic form) or ``msprof --output=D cmd args``.

    In the basic form the application is one argv element that msprof itself splits, so it is
    quoted with shlex; it is still never passed through a shell by us.
    """
    head = [str(msprof), f"--output={output}", *switches]
    if form == "application":
        return head + [f"--application={shlex.join([str(a) for a in app_argv])}"]
    if form == "positional":
        return head + [str(a) for a in app_argv]
    raise ValueError("form must be 'application' or 'positional'")


def export_argv(msprof: str | Path, prof_dir: Path) -> list[str]:
    return [str(msprof), "--export=on", f"--output={prof_dir}"]


def find_prof_dirs(root: Path) -> list[Path]:
    """``PROF_*`` directories: ``root`` itself, its children, or one level deeper (ais_bench's profiler/)."""
    if root.name.startswith("PROF_") and root.is_dir():
        return [root]
    found = sorted(p for p in root.glob("PROF_*") if p.is_dir())
    return found or sorted(p for p in root.glob("*/PROF_*") if p.is_dir())


def find_csvs(prof_dir: Path, stem: str) -> list[Path]:
    """``mindstudio_profiler_output/<stem>_*.csv``; older layouts keep them in ``device_*/summary/``."""
    found = sorted(prof_dir.glob(f"mindstudio_profiler_output/{stem}_*.csv"))
    return found or sorted(prof_dir.glob(f"device_*/summary/{stem}_*.csv"))


def _cell(column: str, value: str | None) -> Any:
    if value is None:
        return None
    value = value.strip()
    if value in ("", "N/A", "NA"):
        return None
    if column in TEXT_COLUMNS:
        return value
    for number in (int, float):  # counts and ids stay integers; times are floats
        try:
            return number(value)
        except ValueError:
            pass
    return value


def read_csv_text(text: str) -> list[dict[str, Any]]:
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    header = next(reader, None)
    if not header:
        return []
    columns = [RENAMES.get(h.strip(), h.strip()) for h in header]
    rows = []
    for raw in reader:
        if not any(c.strip() for c in raw):
            continue
        rows.append({col: _cell(col, val) for col, val in zip(columns, raw)})
    return rows


def read_csvs(paths: list[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows.extend(read_csv_text(path.read_text(errors="replace")))
    return rows


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def summarize(op_summary: list[dict], op_statistic: list[dict]) -> dict[str, Any]:
    """Op runs and total task time from op_summary (one row per run); without it, from op_statistic
    (its Count and Total Time(us) per op type), so an op_statistic file alone still reports its rows.
    ``source`` says which file the numbers come from."""
    if op_summary or not op_statistic:
        durations = [_number(r.get("Task Duration(us)")) for r in op_summary]
        known = [d for d in durations if d is not None]
        return {"ops": len(op_summary), "ops_without_duration": len(durations) - len(known),
                "total_task_duration_us": sum(known), "op_types": len(op_statistic), "source": "op_summary"}
    counts = [_number(r.get("Count")) for r in op_statistic]
    totals = [_number(r.get("Total Time(us)")) for r in op_statistic]
    return {"ops": int(sum(c for c in counts if c is not None)),
            "ops_without_duration": sum(1 for t in totals if t is None),
            "total_task_duration_us": sum(t for t in totals if t is not None), "op_types": len(op_statistic),
            "source": "op_statistic"}


def read_prof_dir(prof_dir: Path) -> dict[str, Any]:
    """One PROF_* directory as the normalised profile JSON."""
    op_summary = read_csvs(find_csvs(prof_dir, "op_summary"))
    op_statistic = read_csvs(find_csvs(prof_dir, "op_statistic"))
    return {"format": SUMMARY_FORMAT, "source": "msprof", "prof_dir": str(prof_dir),
            "summary": summarize(op_summary, op_statistic), "op_summary": op_summary, "op_statistic": op_statistic}
