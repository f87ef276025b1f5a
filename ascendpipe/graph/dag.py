"""The stage graph: edges from stage references and from paths, and the checks that must pass before
anything runs (cycles, two writers of one path, deps that nothing makes).
"""

from __future__ import annotations

import os

from ascendpipe.errors import Location, UserError


def _ancestors(path: str):
    parts = [p for p in path.split("/") if p]
    for i in range(len(parts) - 1, 0, -1):
        yield "/".join(parts[:i])


def edges(pipeline) -> dict[str, list[str]]:
    """stage -> upstream stages, in a stable order."""
    writer: dict[str, str] = {}
    for stage in pipeline.stages.values():
        for out in stage.outs:
            writer[out] = stage.name
    containing: dict[str, set[str]] = {}  # a folder -> stages writing something inside it
    for out, name in writer.items():
        for anc in _ancestors(out):
            containing.setdefault(anc, set()).add(name)
    result: dict[str, list[str]] = {}
    for stage in pipeline.stages.values():
        ups: list[str] = list(dict.fromkeys(stage.upstream.values()))
        for dep in stage.deps:
            producers = []
            if dep in writer:
                producers.append(writer[dep])
            else:
                producers.extend(writer[a] for a in _ancestors(dep) if a in writer)
            producers.extend(sorted(containing.get(dep, ())))
            for p in producers:
                if p != stage.name and p not in ups:
                    ups.append(p)
        result[stage.name] = ups
    return result


def topo_order(pipeline, graph: dict[str, list[str]] | None = None) -> list[str]:
    graph = graph or edges(pipeline)
    order: list[str] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(name: str, trail: list[str]):
        mark = state.get(name)
        if mark == 2:
            return
        if mark == 1:
            cycle = trail[trail.index(name):] + [name]
            stage = pipeline.stages[name]
            raise UserError(
                f"the stages form a cycle: {' -> '.join(cycle)}; a stage cannot depend on its own outputs",
                Location(file=pipeline.path, line=stage.line, stage=name),
            )
        state[name] = 1
        trail.append(name)
        for up in graph.get(name, ()):
            visit(up, trail)
        trail.pop()
        state[name] = 2
        order.append(name)

    for name in pipeline.stages:
        visit(name, [])
    return order


def check_graph(pipeline) -> list[str]:
    """Raise a located ``UserError`` for a graph that cannot be built; return the topological order."""
    owner: dict[str, str] = {}
    for stage in pipeline.stages.values():
        for out in stage.outs:
            other = owner.get(out)
            if other is None:
                for anc in _ancestors(out):
                    if anc in owner:
                        other = owner[anc]
                        break
            if other is not None and other != stage.name:
                raise UserError(
                    f"'{out}' is written by both '{other}' and '{stage.name}'; every path has one writer",
                    Location(file=pipeline.path, line=stage.line, stage=stage.name),
                )
            owner[out] = stage.name
    inside_outs: set[str] = set()
    for out in owner:
        inside_outs.update(_ancestors(out))
    graph = edges(pipeline)
    order = topo_order(pipeline, graph)
    workspace = pipeline.workspace
    for stage in pipeline.stages.values():
        for dep in stage.deps:
            made = dep in owner or dep in inside_outs or any(a in owner for a in _ancestors(dep))
            if not made and not os.path.exists(os.path.join(workspace, dep)):
                raise UserError(
                    f"dep '{dep}' does not exist and no stage makes it; create it, fix the path, or add "
                    f"the stage that writes it",
                    Location(file=pipeline.path, line=stage.line, stage=stage.name),
                )
    return order


def downstream_of(graph: dict[str, list[str]], names) -> set[str]:
    children: dict[str, list[str]] = {}
    for child, ups in graph.items():
        for up in ups:
            children.setdefault(up, []).append(child)
    seen: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        for c in children.get(n, ()):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return seen


def upstream_closure(graph: dict[str, list[str]], names) -> set[str]:
    seen: set[str] = set(names)
    todo = list(names)
    while todo:
        for up in graph.get(todo.pop(), ()):
            if up not in seen:
                seen.add(up)
                todo.append(up)
    return seen
