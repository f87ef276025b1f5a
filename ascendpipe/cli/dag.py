"""ascendpipe dag"""

from __future__ import annotations

from ascendpipe.cli.common import add_pipeline_args, print_json

HELP = "print the stage graph as text, Mermaid or Graphviz dot"


def add_arguments(p) -> None:
    add_pipeline_args(p)
    p.add_argument("--format", choices=["text", "mermaid", "dot"], default="text")
    p.add_argument("--json", action="store_true",
                   help='print {"pipeline", "order": [NAME...], "stages": {NAME: {"kind", "needs": [NAME...]}}}')


def as_json(pipeline, graph) -> dict:
    from ascendpipe.graph.dag import topo_order

    order = topo_order(pipeline, graph)
    return {"pipeline": pipeline.path, "order": order,
            "stages": {n: {"kind": pipeline.stages[n].kind, "needs": list(graph[n])} for n in order}}


def render(pipeline, graph, fmt: str) -> str:
    from ascendpipe.graph.dag import topo_order

    order = topo_order(pipeline, graph)
    ids = {n: f"s{i}" for i, n in enumerate(order)}
    if fmt == "mermaid":
        lines = ["flowchart TD"]
        lines += [f'    {ids[n]}["{n} ({pipeline.stages[n].kind})"]' for n in order]
        lines += [f"    {ids[u]} --> {ids[n]}" for n in order for u in graph[n]]
        return "\n".join(lines) + "\n"
    if fmt == "dot":
        lines = ["digraph ascendpipe {", "    rankdir=TB;", "    node [shape=box];"]
        lines += [f'    "{n}" [label="{n}\\n{pipeline.stages[n].kind}"];' for n in order]
        lines += [f'    "{u}" -> "{n}";' for n in order for u in graph[n]]
        return "\n".join(lines + ["}"]) + "\n"
    lines = []
    for n in order:
        ups = graph[n]
        arrow = f"  <- {', '.join(ups)}" if ups else ""
        lines.append(f"{n} [{pipeline.stages[n].kind}]{arrow}")
    return "\n".join(lines) + "\n"


def main(args) -> int:
    from ascendpipe.api import load
    from ascendpipe.graph.dag import edges

    pipeline = load(args.pipeline, set=args.overrides, backend=args.backend)
    if args.json:
        print_json(as_json(pipeline, edges(pipeline)))
        return 0
    print(render(pipeline, edges(pipeline), args.format), end="")
    return 0
