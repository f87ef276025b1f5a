"""ascendpipe diff"""

from __future__ import annotations

from ascendpipe.cli.common import fmt_value, print_json, table

HELP = "params and metrics of two runs side by side, changed ones marked"

# how a time's cell names where it was measured (records.time_measured_on)
_WHERE = {"host_cpu_emulation": "host CPU", "npu": "NPU"}
HOST_NOTE = ("(host CPU): times measured on this machine's CPU by the onnxruntime emulation (time_measured_on: "
             "host_cpu_emulation), not on an NPU: they compare settings on this machine, not device latencies")


def add_arguments(p) -> None:
    p.add_argument("run_a", help="run id, latest, or latest~N (the build N builds before the latest, of any pipeline)")
    p.add_argument("run_b", help="run id or latest")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="also list values that did not change")
    p.add_argument("-C", "--workspace", default=None)


def _left_out(result: dict) -> str:
    """``left out: 3 stages only in run 1 (train, eval, ...), 2 only in run 2 (...)``."""
    parts = []
    for side in ("a", "b"):
        names = (result.get("stages_left_out") or {}).get(side) or []
        if names:
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            parts.append(f"{len(names)} stage{'s' if len(names) != 1 else ''} only in run {result[side]} ({shown})")
    return "left out: " + ", ".join(parts) if parts else ""


def _time_label(entry: dict, section: str, kind_metric: bool) -> str:
    """`` (host CPU)``, `` (host CPU vs NPU)``: where a time metric was measured; '' for the rest."""
    measured = entry.get("time_measured_on")
    if section != "metrics" or not measured or not kind_metric:
        return ""
    where = [_WHERE.get(measured[s], measured[s]) for s in ("a", "b") if measured.get(s)]
    return f" ({where[0]})" if len(set(where)) == 1 else f" ({where[0]} vs {where[1]})" if where else ""


def main(args) -> int:
    from ascendpipe.api import diff
    from ascendpipe.records import is_time_metric

    result = diff(args.run_a, args.run_b, args.workspace)
    if args.json:
        print_json(result)
        return 0
    pipes = result["pipelines"]
    if not pipes["same"]:  # said first: stage by stage, two pipelines differ in everything
        print(f"runs {result['a']} and {result['b']} are of different pipelines: run {result['a']} built "
              f"{pipes['a']}, run {result['b']} built {pipes['b']}; only stages of the same name are compared")
        before = pipes.get("previous_of_b")
        print(f"  the run before {result['b']} of {pipes['b']} is "
              + (f"run {before}: ascendpipe diff {before} {result['b']}" if before else "none (it is its first)"))
        left = _left_out(result)
        if not result["stages"]:
            print(f"  no stage of the same name in both runs: nothing to compare ({left})" if left else
                  "  no stage of the same name in both runs: nothing to compare")
            return 0
        if left:
            print(f"  {left}")
    rows, host = [], False
    for name, entry in result["stages"].items():
        kind = entry.get("kind")
        for section in ("params", "metrics"):
            for k, v in entry[section].items():
                if not v["changed"] and not args.all:
                    continue
                label = _time_label(entry, section, is_time_metric(kind, k))
                host = host or "host CPU" in label
                delta = fmt_value(v.get("delta")) if "delta" in v else ""
                rows.append(["*" if v["changed"] else " ", name, section[:-1], k + label, fmt_value(v["a"]),
                             fmt_value(v["b"]), delta])
    if not rows:
        print(f"runs {result['a']} and {result['b']}: no params or metrics differ")
        return 0
    print(table(rows, [" ", "stage", "what", "name", f"run {result['a']}", f"run {result['b']}", "delta"]), end="")
    if host:
        print(HOST_NOTE)
    return 0
