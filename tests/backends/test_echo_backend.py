"""A third backend added without touching ``ascendpipe/stages/``: a toy "echo" backend registered
here runs convert and infer through the registry, appears in the schema's backend enum, keys its
stages on its own tool versions and answers --dry-run with its own command lines."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

import ascendpipe
from ascendpipe.backends import registry
from ascendpipe.backends.base import Backend
from ascendpipe.contract import StageResult, find_model_file, write_metrics
from ascendpipe.errors import UserError

ECHO_VERSION = {"echo-tool": "1.0"}


class EchoBackend(Backend):
    """convert copies the model and records its digest; infer 'runs' it by echoing the digest."""

    name = "echo"
    kinds = ("convert", "infer")
    device_models = (".echo",)

    def tool_versions(self, kind):
        return dict(ECHO_VERSION)

    def commands(self, kind, ctx):
        return [["echo", kind, str(ctx.inputs.get("model", "MODEL"))]]

    def run(self, kind, ctx):
        if kind not in self.kinds:
            raise self.unsupported(kind, ctx)
        out = Path(ctx.out_dir)
        if kind == "convert":
            data = find_model_file(Path(ctx.inputs["model"])).read_bytes()
            (out / "model.echo").write_bytes(data)
            metrics = {"bytes": len(data)}
        else:
            data = find_model_file(Path(ctx.inputs["model"]), suffixes=(".echo",)).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            (out / "echo.json").write_text(json.dumps({"digest": digest, "params": ctx.params}))
            metrics = {"loops": ctx.params.get("loops", 1), "digest_prefix": int(digest[:6], 16)}
        write_metrics(out, metrics)
        return StageResult(metrics=metrics, info={"ran_on": "echo"})


PIPELINE = """\
backend: echo
stages:
  convert:
    kind: convert
    model: net.onnx
  infer:
    kind: infer
    model: convert
    params: {loops: 3}
"""


@pytest.fixture
def echo(tmp_path, monkeypatch):
    registry.register("echo", f"{__name__}:EchoBackend")
    monkeypatch.setenv("RUNLOG", str(tmp_path / "runs.log"))
    (tmp_path / ".ascendpipe").mkdir()
    (tmp_path / "net.onnx").write_bytes(b"not really onnx, the echo backend only copies it")
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    yield tmp_path
    registry.unregister("echo")


def test_echo_backend_runs_convert_and_infer_through_the_registry(echo):
    record = ascendpipe.build(str(echo / "pipeline.yaml"), quiet=True)
    assert record["backend"] == "echo"
    stages = record["stages"]
    assert stages["convert"]["state"] == "ran" and stages["infer"]["state"] == "ran"
    assert stages["convert"]["metrics"] == {"bytes": len((echo / "net.onnx").read_bytes())}
    digest = hashlib.sha256((echo / "net.onnx").read_bytes()).hexdigest()
    assert json.loads((echo / "build/infer/echo.json").read_text()) == {"digest": digest, "params": {"loops": 3, "warmup": 1, "seed": 0}}
    assert stages["infer"]["tools"] == ECHO_VERSION

    again = ascendpipe.build(str(echo / "pipeline.yaml"), quiet=True)
    assert {s["state"] for s in again["stages"].values()} == {"fresh"}


def test_echo_tool_version_keys_its_stages(echo):
    ascendpipe.build(str(echo / "pipeline.yaml"), quiet=True)
    ECHO_VERSION["echo-tool"] = "2.0"
    try:
        status = ascendpipe.status(str(echo / "pipeline.yaml"))
    finally:
        ECHO_VERSION["echo-tool"] = "1.0"
    assert status["stages"]["convert"] == {"state": "stale", "reasons": ["tool echo-tool 1.0 -> 2.0"]}
    assert status["stages"]["infer"]["reasons"] == ["tool echo-tool 1.0 -> 2.0", "upstream 'convert' is stale"]


def test_echo_backend_in_schema_and_dry_run(echo):
    from ascendpipe.config.schema import pipeline_schema

    assert pipeline_schema()["properties"]["backend"]["enum"] == ["onnxruntime", "ascend", "echo"]
    printed = io.StringIO()
    record = ascendpipe.build(str(echo / "pipeline.yaml"), dry_run=True, stream=printed)
    assert record["would_run"] == ["convert", "infer"]
    assert f"echo convert {echo / 'net.onnx'}" in printed.getvalue()
    assert f"echo infer {echo / 'build/convert'}" in printed.getvalue()


def test_a_kind_the_backend_does_not_run_is_a_located_error(echo):
    (echo / "pipeline.yaml").write_text(PIPELINE + "  dump:\n    kind: dump\n    model: convert\n")
    record = ascendpipe.build(str(echo / "pipeline.yaml"), quiet=True, keep_going=True)
    dump = record["stages"]["dump"]
    assert dump["state"] == "failed"
    assert "backend 'echo' does not run stage kind 'dump' (it runs: convert, infer)" in json.dumps(dump)


def test_unregistered_backend_is_refused_with_the_known_names(echo):
    registry.unregister("echo")
    with pytest.raises(UserError) as err:
        ascendpipe.load(str(echo / "pipeline.yaml"))
    assert "onnxruntime, ascend" in str(err.value)
    registry.register("echo", f"{__name__}:EchoBackend")
