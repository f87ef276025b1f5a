"""The resolved-pipeline cache is keyed on every module that shapes a resolved pipeline."""

from __future__ import annotations

import os
import shutil

import pytest

from ascendpipe.backends import registry
from ascendpipe.engine import plan
from ascendpipe.stages.registry import KINDS
from tests.test_import_graph import PACKAGE_ROOT, import_graph

# what resolution runs: the loader, the resolver and its checks, every kind module, the backend table
RESOLUTION_ROOTS = ["ascendpipe.config.pipeline", "ascendpipe.config.schema", "ascendpipe.config.overrides",
                    "ascendpipe.config.matrix", "ascendpipe.graph.dag", "ascendpipe.stages.registry",
                    "ascendpipe.backends.registry", "ascendpipe.engine.plan"]
RESOLUTION_ROOTS += [target.partition(":")[0] for target in KINDS.values()]


def _fingerprinted(module: str) -> bool:
    rel = module.removeprefix("ascendpipe.").replace(".", "/")
    for item in plan.FINGERPRINTED:
        if item.endswith("/") and (rel + "/").startswith(item):
            return True
        if rel + ".py" == item or rel + "/__init__.py" == item:
            return True
    return module == "ascendpipe" or module.count(".") == 1 and (PACKAGE_ROOT / rel / "__init__.py").exists()


def test_every_module_resolution_imports_is_fingerprinted():
    graph = import_graph(top_level_only=True)
    seen, todo = set(), list(RESOLUTION_ROOTS)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    missing = sorted(m for m in seen if not _fingerprinted(m))
    assert missing == [], f"modules that shape a resolved pipeline but are not in plan.FINGERPRINTED: {missing}"
    # the kinds' params schemas take their enums from precision/: it must be among them
    assert "ascendpipe.precision.settings" in seen


@pytest.fixture
def package_copy(tmp_path):
    copy = tmp_path / "ascendpipe"
    shutil.copytree(PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _touch(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_editing_a_precision_enum_module_changes_the_stamp(package_copy):
    before = plan.code_stamp(str(package_copy))
    _touch(package_copy / "precision" / "settings.py")
    assert plan.code_stamp(str(package_copy)) != before


def test_editing_the_backend_table_or_a_kind_changes_the_stamp(package_copy):
    before = plan.code_stamp(str(package_copy))
    _touch(package_copy / "backends" / "registry.py")
    after_registry = plan.code_stamp(str(package_copy))
    assert after_registry != before
    _touch(package_copy / "stages" / "convert.py")
    assert plan.code_stamp(str(package_copy)) != after_registry


def test_a_new_module_in_a_fingerprinted_folder_changes_the_stamp(package_copy):
    before = plan.code_stamp(str(package_copy))
    (package_copy / "stages" / "quantize.py").write_text("# a new kind\n")
    assert plan.code_stamp(str(package_copy)) != before


def test_a_backend_implementation_does_not_invalidate_plans(package_copy):
    before = plan.code_stamp(str(package_copy))
    _touch(package_copy / "backends" / "onnxruntime" / "infer.py")
    assert plan.code_stamp(str(package_copy)) == before


def test_registering_a_backend_changes_the_fingerprint():
    before = plan.fingerprint(b"stages: {}", [], None)
    registry.register("elsewhere", "tests.backends.test_echo_backend:EchoBackend")
    try:
        assert plan.fingerprint(b"stages: {}", [], None) != before
    finally:
        registry.unregister("elsewhere")
    assert plan.fingerprint(b"stages: {}", [], None) == before


def test_every_input_of_a_resolved_pipeline_makes_the_cache_miss(tmp_path, monkeypatch):
    """The validated-config cache (issue 32): the file's bytes, its path, `--set`, the overrides file,
    the backend flag and a declared environment variable each resolve anew, into a plan file of its
    own; the same inputs again reuse one."""
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    pipe = root / "p.yaml"
    text = ("env: [GREETING]\nparams: {n: 1}\nstages:\n  a:\n    kind: run\n"
            "    cmd: echo {{ env.GREETING }} {{ params.n }} > a.txt\n    outs: [a.txt]\n")
    pipe.write_text(text)
    monkeypatch.setenv("GREETING", "hi")
    plans = root / ".ascendpipe" / "plans"

    def resolved(path=pipe, overrides=(), backend=None):
        before = set(os.listdir(plans)) if plans.exists() else set()
        p = plan.resolve(str(path), list(overrides), backend)
        return p, set(os.listdir(plans)) - before

    first, made = resolved()
    assert len(made) == 1 and "echo hi 1" in first.stages["a"].cmd
    assert resolved()[1] == set()  # the same inputs: the cached plan

    pipe.write_text(text.replace("n: 1", "n: 2"))
    p, made = resolved()
    assert len(made) == 1 and "echo hi 2" in p.stages["a"].cmd
    copy = root / "q.yaml"
    copy.write_text(pipe.read_text())
    assert len(resolved(copy)[1]) == 1  # another file of the same bytes: its own plan (its own path in messages)
    p, made = resolved(overrides=["params.n=3"])
    assert len(made) == 1 and "echo hi 3" in p.stages["a"].cmd
    (root / "p.overrides").write_text("params.n=4\n")
    p, made = resolved()
    assert len(made) == 1 and "echo hi 4" in p.stages["a"].cmd
    (root / "p.overrides").unlink()
    assert len(resolved(backend="ascend")[1]) == 1
    monkeypatch.setenv("GREETING", "hello")
    p, made = resolved()
    assert "echo hello 2" in p.stages["a"].cmd  # one plan file per fingerprint: rewritten with the new value
    monkeypatch.setenv("GREETING", "hi")
    assert "echo hi 2" in resolved()[0].stages["a"].cmd
