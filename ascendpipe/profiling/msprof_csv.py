"""op_summary.csv and op_statistic.csv with msprof's column names, in msprof's order (pure).

Columns the emulation cannot know (block counts, cycle counters) hold ``N/A``, as msprof itself
writes them with ``--task-time=l0``.
"""

from __future__ import annotations

import csv
import io
from typing import Iterable, Sequence

from ascendpipe.profiling.oprows import HOST_TASK_TYPE, OpRow, ProfileData, TensorDesc

OP_SUMMARY_COLUMNS = (
    "Device_id", "Model Name", "Model ID", "Task ID", "Stream ID", "Infer ID", "Op Name", "OP Type",
    "OP State", "Task Type", "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)",
    "Block Num", "Mix Block Num", "HF32 Eligible", "Input Shapes", "Input Data Types",
    "Input Formats", "Output Shapes", "Output Data Types", "Output Formats", "Context ID",
    # the emulation's own, after msprof's: Op Name/OP Type are the model's node and op type; these say
    # which onnxruntime kernel ran and which model nodes it computes ('a;b' for a fused kernel)
    "Kernel Name", "Kernel Type", "Source Ops",
)
OP_STATISTIC_COLUMNS = (
    "Device_id", "Model Name", "OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)",
    "Min Time(us)", "Max Time(us)", "Ratio(%)",
)
NA = "N/A"


def _shapes(descs: Sequence[TensorDesc]) -> str:
    # msprof: tensors separated by ';', dims by ','; a scalar is an empty field
    return ";".join(",".join(str(d) for d in t.shape) for t in descs)


def _dtypes(descs: Sequence[TensorDesc]) -> str:
    return ";".join(t.dtype for t in descs)


def _formats(descs: Sequence[TensorDesc]) -> str:
    return ";".join("NCHW" if len(t.shape) == 4 else "ND" for t in descs)


def _us(value: float) -> str:
    return f"{value:.3f}"


def op_summary_rows(data: ProfileData, *, device_id: int = 0, model_id: int = 1) -> list[dict]:
    rows = []
    for op in data.ops:
        rows.append({
            "Device_id": device_id, "Model Name": data.model_name, "Model ID": model_id,
            "Task ID": op.index, "Stream ID": 0, "Infer ID": op.iteration, "Op Name": op.op_name,
            "OP Type": op.op_type, "OP State": "static", "Task Type": op.task_type,
            "Task Start Time(us)": _us(op.start_us), "Task Duration(us)": _us(op.duration_us),
            "Task Wait Time(us)": _us(op.wait_us), "Block Num": NA, "Mix Block Num": NA,
            "HF32 Eligible": NA, "Input Shapes": _shapes(op.inputs),
            "Input Data Types": _dtypes(op.inputs), "Input Formats": _formats(op.inputs),
            "Output Shapes": _shapes(op.outputs), "Output Data Types": _dtypes(op.outputs),
            "Output Formats": _formats(op.outputs), "Context ID": NA,
            "Kernel Name": op.kernel_name or op.op_name, "Kernel Type": op.kernel_type or op.op_type,
            "Source Ops": ";".join(op.sources),
        })
    return rows


# a run this many times its type's median is an outlier: it alone can make a type's total look large
OUTLIER_FACTOR = 10.0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def op_type_totals(ops: Iterable[OpRow]) -> list[dict]:
    """Per (op type, core type): count and times in us, largest total first. Numbers, not text.

    The total sums every run of every iteration, so it is not comparable with a per-iteration
    latency: ``per_iteration_us`` is the total over the iterations profiled, ``median_us`` the typical
    run, and ``outlier_us`` the share of the total in runs above OUTLIER_FACTOR x the median (one slow
    run, a page fault or a thread wake-up, can outweigh all the others)."""
    groups: dict[tuple[str, str], list[float]] = {}
    per_iteration: dict[tuple[str, str], dict[int, float]] = {}
    iterations: set[int] = set()
    for op in ops:
        key = (op.op_type, op.task_type)
        groups.setdefault(key, []).append(op.duration_us)
        sums = per_iteration.setdefault(key, {})
        sums[op.iteration] = sums.get(op.iteration, 0.0) + op.duration_us
        iterations.add(op.iteration)
    grand = sum(sum(v) for v in groups.values())
    out = []
    for (op_type, core), durations in groups.items():
        total = sum(durations)
        median = _median(durations)
        slow = [d for d in durations if median > 0 and d > OUTLIER_FACTOR * median]
        # the type's time in each profiled run (0 in a run where it did not run)
        runs = [per_iteration[(op_type, core)].get(i, 0.0) for i in sorted(iterations)]
        out.append({"op_type": op_type, "core_type": core, "count": len(durations), "total_us": total,
                    "avg_us": total / len(durations), "min_us": min(durations),
                    "max_us": max(durations), "ratio_pct": 100.0 * total / grand if grand else 0.0,
                    "median_us": median, "per_iteration_us": total / max(len(iterations), 1),
                    "median_per_run_us": _median(runs), "outliers": len(slow), "outlier_us": sum(slow)})
    out.sort(key=lambda r: (-r["total_us"], r["op_type"]))
    return out


def ranked(totals: Sequence[dict]) -> list[dict]:
    """Op types ranked for reading: device ops first (host-side ops, HOST_CPU, after them), each by its
    median time per run, so one slow run (an outlier total) does not move a type up; with
    ``share_pct``, the share of that median within its group (device or host)."""
    def median_of(t: dict) -> float:
        return t.get("median_per_run_us", t.get("per_iteration_us", t["total_us"]))

    groups: dict[bool, float] = {}
    for t in totals:
        host = t["core_type"] == HOST_TASK_TYPE
        groups[host] = groups.get(host, 0.0) + median_of(t)
    rows = [{**t, "host": t["core_type"] == HOST_TASK_TYPE,
             "share_pct": 100.0 * median_of(t) / groups[t["core_type"] == HOST_TASK_TYPE]
             if groups[t["core_type"] == HOST_TASK_TYPE] else 0.0} for t in totals]
    return sorted(rows, key=lambda r: (r["host"], -median_of(r), r["op_type"]))


def subtotals(totals: Sequence[dict]) -> dict[str, float]:
    """Total us over the profiled runs: device ops ("compute") and host-side ops ("host"), and the
    host's share of all kernel time."""
    host = sum(t["total_us"] for t in totals if t["core_type"] == HOST_TASK_TYPE)
    compute = sum(t["total_us"] for t in totals) - host
    return {"compute_us": compute, "host_us": host,
            "host_pct": 100.0 * host / (host + compute) if host + compute else 0.0}


def op_statistic_rows(data: ProfileData, *, device_id: int = 0) -> list[dict]:
    return [{
        "Device_id": device_id, "Model Name": data.model_name, "OP Type": t["op_type"],
        "Core Type": t["core_type"], "Count": t["count"], "Total Time(us)": _us(t["total_us"]),
        "Avg Time(us)": _us(t["avg_us"]), "Min Time(us)": _us(t["min_us"]),
        "Max Time(us)": _us(t["max_us"]), "Ratio(%)": f"{t['ratio_pct']:.3f}",
    } for t in op_type_totals(data.ops)]


def render_csv(columns: Sequence[str], rows: Iterable[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
