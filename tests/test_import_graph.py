"""The import graph of ``ascendpipe/`` has no cycles, counting imports inside functions too (a lazy
import is still a dependency: it only moves the cost). The graph is read from the source with
``ast``, so the test needs no heavy module and sees every import a run could make."""

from __future__ import annotations

import ast
from pathlib import Path

import ascendpipe

PACKAGE_ROOT = Path(ascendpipe.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_nodes(tree: ast.AST, top_level_only: bool):
    """Import statements; with ``top_level_only``, those run when the module is imported (not the
    ones inside functions, which run when the function is called)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            stack.append(child)


def import_graph(root: Path = PACKAGE_ROOT, *, top_level_only: bool = False) -> dict[str, set[str]]:
    """module -> the ascendpipe modules it imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    files = {module_name(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in _import_nodes(ast.parse(path.read_text(), str(path)), top_level_only):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            for target in targets:
                while target and target not in files:  # 'a.b.func' -> 'a.b'
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    deps.add(target)  # (a module importing its own package's __init__ is not a cycle)
        graph[name] = deps
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_graph_is_read_from_every_module():
    graph = import_graph()
    assert "ascendpipe.contract" in graph and "ascendpipe.backends.registry" in graph
    # a lazy import inside a function is an edge too, but not a top-level one
    assert "ascendpipe.backends.registry" in graph["ascendpipe.stages.base"]
    top = import_graph(top_level_only=True)
    assert "ascendpipe.backends.registry" not in top["ascendpipe.stages.base"]
    assert "ascendpipe.contract" in top["ascendpipe.stages.base"]


def test_find_cycles_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_ascendpipe():
    cycles = find_cycles(import_graph())
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_leaf_modules_import_only_errors():
    """The contract, versions, backend base and registry import nothing that could lead back to them."""
    graph = import_graph()
    for leaf in ("ascendpipe.contract", "ascendpipe.versions", "ascendpipe.errors", "ascendpipe.fsutil"):
        assert graph[leaf] <= {"ascendpipe.errors", "ascendpipe.fsutil"}, (leaf, graph[leaf])
    assert graph["ascendpipe.backends.registry"] <= {"ascendpipe.errors"}
    assert graph["ascendpipe.backends.base"] <= {"ascendpipe.errors", "ascendpipe.contract"}


# what a stage kind may import of backends/: the table, and the compare's sources (which pick the
# backend through the table; the golden runs on the host's onnxruntime whatever the backend)
BACKEND_NEUTRAL = {"ascendpipe.backends.registry", "ascendpipe.backends.compare_sources"}


def test_stage_kinds_never_name_a_backend():
    graph = import_graph()
    for module, deps in graph.items():
        if module.startswith("ascendpipe.stages"):
            named = {d for d in deps if d.startswith("ascendpipe.backends.") and d not in BACKEND_NEUTRAL}
            assert not named, (module, named)


def test_compare_reads_its_feeds_stats_without_a_backend():
    """tensor_stats is pure numpy in a neutral module: the check of a compare's feeds (NaN/inf) loads no
    backend implementation, and the dump writers use the same function."""
    import subprocess
    import sys

    assert import_graph()["ascendpipe.tensorstats"] == set()
    code = ("import sys, numpy as np\n"
            "from ascendpipe.backends.compare_sources import nonfinite_inputs\n"
            "print(nonfinite_inputs([{'x': np.array([1.0, np.nan, np.inf], np.float32), 'n': np.arange(3)}]))\n"
            "print(sorted(m for m in sys.modules if m.startswith(('ascendpipe.backends.onnxruntime', 'ascendpipe.backends.ascend'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["x: 1 NaN, 1 inf", "[]"]
    from ascendpipe.backends.onnxruntime import dump, dump_write
    from ascendpipe.tensorstats import tensor_stats

    assert dump.tensor_stats is tensor_stats and dump_write.tensor_stats is tensor_stats


# The lower layers keep to themselves: the store (hashes, objects, the database), the precision
# policy (pure logic) and the compare (metrics over two dumps) are used by the engine, the config
# and the backends, never the other way round, so each can be tested and reused without them.
LOWER_LAYERS = ("ascendpipe.store", "ascendpipe.precision", "ascendpipe.compare")
UPPER_LAYERS = ("ascendpipe.engine", "ascendpipe.config", "ascendpipe.backends")


def test_lower_layers_import_no_upper_layer():
    graph = import_graph()
    wrong = sorted((module, target) for module, targets in graph.items() if module.startswith(LOWER_LAYERS)
                   for target in targets if target.startswith(UPPER_LAYERS))
    assert wrong == []
