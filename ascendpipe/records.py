"""Experiment records as users see them: runs, one run, and the diff of two runs.

``runs --json`` is a list, newest first, of run records; ``show RUN --json`` is one run record:
``{"id", "pipeline", "started", "finished", "state", "backend", "argv", "stages": {NAME: {"kind",
"state", "params", "outputs", "metrics", "tools", "deps", "remedy_files", "reasons", "duration",
"log", "error"}}}``. The first keys of each stage (kind, state, params, outputs, metrics) are the
contract; the rest are extensions.

A run's ``state``: ``running``, ``done``, ``failed`` (a stage failed, or what happened could not be
recorded), ``interrupted`` (SIGINT / SIGTERM: the stage it stopped is ``failed`` with the error
``interrupted by SIGTERM``), ``crashed`` (found ``running`` by a later build: its process was killed
or the machine went down). A stage's ``state``: ``ran``, ``restored``, ``fresh``, ``failed``,
``skipped`` (not reached, with the reason in ``error``).
"""

from __future__ import annotations

from ascendpipe.errors import UserError


def run_record(db, run_id: int, *, with_remedy_content: bool = False) -> dict:
    run = db.run(run_id)
    if run is None:
        raise UserError(f"no run {run_id}; `ascendpipe runs` lists them")
    stages = db.stage_runs([run_id]).get(run_id, {})
    if with_remedy_content:
        for st in stages.values():
            for rf in st.get("remedy_files", []):
                rf["content"] = db.blob(rf["hash"])
    run["stages"] = stages
    return run


def list_runs(db, limit: int | None = None) -> list[dict]:
    runs = db.runs(limit)
    by_id = db.stage_runs([r["id"] for r in runs])
    for r in runs:
        r["stages"] = by_id.get(r["id"], {})
    return runs


def resolve_run_id(db, ref: str) -> int:
    """``12``, ``latest`` / ``@``, ``latest~1`` (one before the latest). A negative number is no run
    id (``-1`` once meant ``latest~1``, which reads as "run -1"): refused, as is ``latest~-N``."""
    ids = db.run_ids()
    if not ids:
        raise UserError("no runs recorded yet; run `ascendpipe build PIPELINE` first")
    text = str(ref).strip()
    back = None
    if text in ("latest", "@", "HEAD"):
        back = 0
    elif text.startswith(("latest~", "HEAD~", "@~")):
        back = _int(text.split("~", 1)[1], ref)
        if back < 0:
            raise UserError(f"'{ref}': N in latest~N counts builds back from the latest, so it is 0 or more")
    elif text.startswith("-"):
        _int(text, ref)
        raise UserError(f"'{ref}' is not a run id: run ids start at 1 (for the builds before the latest, "
                        f"write latest~N)")
    if back is not None:
        if back >= len(ids):
            raise UserError(f"run {ref}: only {len(ids)} runs are recorded")
        return ids[back]
    run_id = _int(text, ref)
    if run_id not in ids:
        raise UserError(f"no run {run_id}; recorded runs: {ids[-1]}..{ids[0]}")
    return run_id


def _int(text: str, ref) -> int:
    try:
        return int(text)
    except ValueError:
        raise UserError(f"'{ref}' is not a run id (use a number, 'latest' or 'latest~N')") from None


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


TIMED_KINDS = ("infer", "profile", "tune")  # kinds whose metrics include measured times
HOST_TIME = "host_cpu_emulation"  # what summary.json's time_measured_on says on the onnxruntime backend


def time_measured_on(run: dict, stage: dict) -> str | None:
    """Where a stage's times were measured: ``host_cpu_emulation`` (the onnxruntime backend times the host
    CPU), ``npu`` (the ascend backend: ais_bench and msprof on the board), None (no times, or unknown)."""
    if stage.get("kind") not in TIMED_KINDS:
        return None
    recorded = (stage.get("info") or {}).get("time_measured_on")
    if isinstance(recorded, str) and recorded:
        return recorded
    return {"onnxruntime": HOST_TIME, "ascend": "npu"}.get(run.get("backend"))


def is_time_metric(kind: str | None, name: str) -> bool:
    """A metric that is a measured time or derived from one (a profile's shares, tune's gains)."""
    if kind in ("profile", "tune"):
        return True
    return kind == "infer" and (name.startswith("latency") or name == "throughput" or name.endswith("_ms"))


def diff_runs(a: dict, b: dict) -> dict:
    """Params and metrics of every stage side by side: ``{"a": id, "b": id, "pipelines": {"a", "b",
    "same"}, "stages": {NAME: {
    "params": {K: {"a", "b", "changed"}}, "metrics": {K: {"a", "b", "changed", "delta"}}, "state": {"a", "b"}}}}``.
    Runs of two pipeline files: only the stages both have (a stage of one pipeline says nothing about another
    pipeline's stage of another name), and ``stages_left_out: {"a": [...], "b": [...]}`` names the others.
    A stage whose metrics hold times has ``time_measured_on: {"a", "b"}`` (``time_measured_on`` above)."""
    same = a.get("pipeline") == b.get("pipeline")
    if same:
        names = list(dict.fromkeys(list(a["stages"]) + list(b["stages"])))
    else:
        names = [n for n in a["stages"] if n in b["stages"]]
    stages = {}
    for name in names:
        sa, sb = a["stages"].get(name, {}), b["stages"].get(name, {})
        entry = {"state": {"a": sa.get("state"), "b": sb.get("state")}, "params": {}, "metrics": {}, "outputs_changed": sa.get("outputs") != sb.get("outputs")}
        entry["kind"] = sa.get("kind") or sb.get("kind")
        measured = {"a": time_measured_on(a, sa) if sa else None, "b": time_measured_on(b, sb) if sb else None}
        if measured["a"] or measured["b"]:
            entry["time_measured_on"] = measured
        pa, pb = _flat(sa.get("params")), _flat(sb.get("params"))
        for k in sorted(set(pa) | set(pb)):
            entry["params"][k] = {"a": pa.get(k), "b": pb.get(k), "changed": pa.get(k) != pb.get(k)}
        ma, mb = _flat(sa.get("metrics")), _flat(sb.get("metrics"))
        for k in sorted(set(ma) | set(mb)):
            va, vb = ma.get(k), mb.get(k)
            row = {"a": va, "b": vb, "changed": va != vb}
            if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool):
                row["delta"] = vb - va
            entry["metrics"][k] = row
        stages[name] = entry
    pipelines = {"a": a.get("pipeline"), "b": b.get("pipeline"), "same": same}
    result = {"a": a["id"], "b": b["id"], "pipelines": pipelines, "stages": stages}
    if not same:
        result["stages_left_out"] = {"a": [n for n in a["stages"] if n not in b["stages"]],
                                     "b": [n for n in b["stages"] if n not in a["stages"]]}
    return result


def previous_of_pipeline(db, run: dict) -> int | None:
    """The newest run before ``run`` of the same pipeline file (None if there is none)."""
    for other in db.runs():
        if other["id"] < run["id"] and other["pipeline"] == run.get("pipeline"):
            return other["id"]
    return None
