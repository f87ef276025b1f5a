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


def _overlap(a: str, b: str) -> bool:
    """The same path, or one inside the other (workspace-relative, '/'-separated)."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def check_graph(pipeline, locate=None) -> list[str]:
    """Raise a located ``UserError`` for a graph that cannot be built; return the topological order.

    ``locate(stage, path=None) -> Location`` (from the resolver) points an error at the YAML value
    of that dep or out; without it, errors name the stage's line."""

    def where(stage, path=None) -> Location:
        if locate is not None:
            return locate(stage.name, path)
        return Location(file=pipeline.path, line=stage.line, stage=stage.name)

    for stage in pipeline.stages.values():
        # outs are deleted before a stage runs: an out that is, holds or sits in one of its own
        # deps would delete or change its input
        for out in stage.outs:
            for dep in stage.deps:
                if _overlap(out, dep):
                    relation = "is" if out == dep else ("holds" if dep.startswith(out + "/") else "is inside")
                    raise UserError(
                        f"out '{out}' {relation} the stage's own dep '{dep}': outs are deleted before the stage "
                        "runs and a stage cannot read what it writes; write somewhere else",
                        where(stage, out),
                    )
    owner: dict[str, str] = {}
    holder: dict[str, str] = {}  # a folder -> a stage writing inside it
    for stage in pipeline.stages.values():
        for out in stage.outs:
            other = owner.get(out)
            if other is None:
                for anc in _ancestors(out):
                    if anc in owner:
                        other = owner[anc]
                        break
            if other is None or other == stage.name:
                # an out holding another stage's out would delete it before running
                other = holder.get(out, other)
            if other is not None and other != stage.name:
                raise UserError(
                    f"'{out}' is written by both '{other}' and '{stage.name}'; every path has one writer",
                    where(stage, out),
                )
            owner[out] = stage.name
            for anc in _ancestors(out):
                holder.setdefault(anc, stage.name)
    inside_outs: set[str] = set()
    for out in owner:
        inside_outs.update(_ancestors(out))
    graph = edges(pipeline)
    order = topo_order(pipeline, graph)
    workspace = pipeline.workspace
    for stage in pipeline.stages.values():
        for dep in stage.deps:
            made = dep in owner or dep in inside_outs or any(a in owner for a in _ancestors(dep))
            if not made and not os.path.lexists(os.path.join(workspace, dep)):
                raise UserError(
                    f"dep '{dep}' does not exist and no stage makes it; create it, fix the path, or add "
                    f"the stage that writes it",
                    where(stage, dep),
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
