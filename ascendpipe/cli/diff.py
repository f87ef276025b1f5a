"""ascendpipe diff"""

from __future__ import annotations

from ascendpipe.cli.common import fmt_value, print_json, table

HELP = "params and metrics of two runs side by side, changed ones marked"


def add_arguments(p) -> None:
    p.add_argument("run_a", help="run id, latest, or latest~N (the build N builds before the latest, of any pipeline)")
    p.add_argument("run_b", help="run id or latest")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="also list values that did not change")
    p.add_argument("-C", "--workspace", default=None)


def main(args) -> int:
    from ascendpipe.api import diff

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
    rows = []
    for name, entry in result["stages"].items():
        for section in ("params", "metrics"):
            for k, v in entry[section].items():
                if not v["changed"] and not args.all:
                    continue
                delta = fmt_value(v.get("delta")) if "delta" in v else ""
                rows.append(["*" if v["changed"] else " ", name, section[:-1], k, fmt_value(v["a"]), fmt_value(v["b"]), delta])
    if not rows:
        print(f"runs {result['a']} and {result['b']}: no params or metrics differ")
        return 0
    print(table(rows, [" ", "stage", "what", "name", f"run {result['a']}", f"run {result['b']}", "delta"]), end="")
    return 0
