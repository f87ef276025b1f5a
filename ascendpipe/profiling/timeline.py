"""timeline.json in the Chrome trace event format (loads in Perfetto and chrome://tracing); pure.

Layout follows msprof's timeline: one process for the device, a 'Model Run' thread holding one span
per iteration, and a thread per task type holding the kernels.
"""

from __future__ import annotations

from typing import Any

from ascendpipe.profiling.oprows import ProfileData

PID = 0
ITERATION_TID = 0
TASK_TIDS = {"AI_CORE": 1, "AI_VECTOR_CORE": 2, "AI_CPU": 3}
_PHASES_WITH_DURATION = {"X"}
_KNOWN_PHASES = {"X", "B", "E", "i", "I", "M", "C", "b", "e", "n", "s", "t", "f"}


def _meta(name: str, tid: int | None, value: str) -> dict:
    event = {"ph": "M", "pid": PID, "name": name, "args": {"name": value}}
    if tid is not None:
        event["tid"] = tid
    return event


def trace_document(data: ProfileData, *, device_label: str = "emulated NPU (onnxruntime)") -> dict:
    events: list[dict[str, Any]] = [_meta("process_name", None, device_label),
                                    _meta("thread_name", ITERATION_TID, "Model Run")]
    events += [_meta("thread_name", tid, task) for task, tid in TASK_TIDS.items()]
    for it in data.iterations:
        events.append({"ph": "X", "pid": PID, "tid": ITERATION_TID, "name": f"{data.model_name} iteration {it.index}",
                       "cat": "Model", "ts": it.start_us, "dur": it.duration_us,
                       "args": {"Infer ID": it.index}})
    for op in data.ops:
        events.append({
            "ph": "X", "pid": PID, "tid": TASK_TIDS.get(op.task_type, 3), "name": op.op_name,
            "cat": op.task_type, "ts": op.start_us, "dur": op.duration_us,
            "args": {"OP Type": op.op_type, "Infer ID": op.iteration, "Task ID": op.index,
                     "Input Shapes": [list(t.shape) for t in op.inputs],
                     "Output Shapes": [list(t.shape) for t in op.outputs],
                     "provider": op.provider},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def validate_trace(doc: Any) -> list[str]:
    """Problems that would stop a trace viewer from loading the document; empty when valid."""
    if isinstance(doc, list):
        events = doc
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    else:
        return ["not a trace: expected a list of events or an object with a 'traceEvents' list"]
    problems = []
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            problems.append(f"event {i}: not an object")
            continue
        phase = event.get("ph")
        if phase not in _KNOWN_PHASES:
            problems.append(f"event {i}: unknown phase {phase!r}")
        if not isinstance(event.get("name"), str):
            problems.append(f"event {i}: 'name' must be a string")
        if not isinstance(event.get("pid"), int):
            problems.append(f"event {i}: 'pid' must be an integer")
        if phase != "M" and not isinstance(event.get("ts"), (int, float)):
            problems.append(f"event {i}: 'ts' must be a number")
        if phase in _PHASES_WITH_DURATION:
            dur = event.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                problems.append(f"event {i}: complete event needs a non-negative 'dur'")
    return problems
