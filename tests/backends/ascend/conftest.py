"""Fixtures for the ascend backend tests: a tiny ONNX model, the CANN doubles on PATH, stage contexts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
DOUBLES = HERE / "doubles"
TOOLKIT = DOUBLES / "toolkit"
PYLIB = DOUBLES / "pylib"


def build_tiny_model(path: Path, *, batch: int = 2) -> Path:
    """x[batch,3,8,8] -> conv1 -> relu1 -> conv2 -> add(relu1) -> gap -> flat -> fc -> feat[batch,5]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, "w2")
    wf = numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "wf")
    bf = numpy_helper.from_array(rng.standard_normal((5,)).astype(np.float32), "bf")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a1"], name="add1"),
        helper.make_node("GlobalAveragePool", ["a1"], ["g1"], name="gap"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="flat"),
        helper.make_node("Gemm", ["f1", "wf", "bf"], ["feat"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [batch, 5])], [w1, w2, wf, bf])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    return build_tiny_model(tmp_path / "tiny.onnx")


@pytest.fixture(scope="module")
def cann_env():
    """The doubles as the installed toolkit: home, PATH (our python first for `python3`), PYTHONPATH."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _point_at_doubles(monkeypatch)


def _point_at_doubles(monkeypatch) -> Path:
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_WORK_PATH", raising=False)
    monkeypatch.delenv("TUNE_BANK_PATH", raising=False)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(TOOLKIT))
    bindir = Path(sys.executable).parent
    if not (bindir / "python3").exists():
        pytest.fail(f"{bindir} has no python3 for the ais_bench double")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PYLIB), os.environ.get("PYTHONPATH")])))
    return TOOLKIT


@pytest.fixture
def make_ctx(tmp_path):
    """A StageContext for one stage, writing into tmp_path/<name>; the log is kept open for the test."""
    yield from _context_factory(tmp_path)


def _context_factory(tmp_path: Path):
    from ascendpipe.stages.base import StageContext, Upstream

    logs = []

    def make(name: str, kind: str, params: dict | None = None, inputs: dict | None = None,
             upstream: dict | None = None, runner=None) -> StageContext:
        out = tmp_path / "build" / name
        out.mkdir(parents=True, exist_ok=True)
        log = open(tmp_path / f"{name}.log", "w+")
        logs.append(log)
        ups = {k: Upstream(stage=v[0], kind=v[1], out_dir=Path(v[2])) for k, v in (upstream or {}).items()}
        return StageContext(name=name, kind=kind, workspace=tmp_path, out_dir=out, final_out_dir=out,
                            params=dict(params or {}), inputs={k: Path(v) for k, v in (inputs or {}).items()},
                            upstream=ups, backend="ascend", log=log, run_command=runner)

    yield make
    for log in logs:
        log.close()
