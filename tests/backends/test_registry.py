"""The backend table feeds the CLI and compare: names, choices, and who dumps a device model."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ascendpipe.backends import registry
from ascendpipe.backends.base import Backend
from ascendpipe.cli.common import add_pipeline_args
from ascendpipe.backends.compare_sources import Side, dump_om_side
from ascendpipe.errors import UserError


class RecordingOmBackend(Backend):
    """Runs OMs: its dump is a folder naming what it was asked to dump."""

    name = "om-recorder"
    device_models = (".om",)

    def dump_model(self, model, feeds, out, *, log=None, run_command=None, stage="compare"):
        out = Path(out)
        out.mkdir(parents=True)
        (out / "asked.txt").write_text(f"{model}|{sorted(feeds)}|{stage}")
        return out


@pytest.fixture
def om_recorder():
    registry.register("om-recorder", f"{__name__}:RecordingOmBackend")
    yield registry.get("om-recorder")
    registry.unregister("om-recorder")


def test_the_default_table():
    assert registry.names() == ["onnxruntime", "ascend"]
    assert registry.DEFAULT == "onnxruntime"
    assert registry.running(".om") == ["ascend"] and registry.running(".onnx") == ["onnxruntime"]
    assert registry.get("ascend") is registry.get("ascend")  # one instance per backend


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(UserError) as err:
        registry.get("npu-over-ssh")
    assert err.value.message == "unknown backend 'npu-over-ssh'; known: onnxruntime, ascend"


def test_cli_choices_come_from_the_table(om_recorder):
    parser = argparse.ArgumentParser()
    add_pipeline_args(parser)
    assert parser.parse_args(["p.yaml", "--backend", "om-recorder"]).backend == "om-recorder"
    with pytest.raises(SystemExit):
        parser.parse_args(["p.yaml", "--backend", "nope"])


def test_compare_dumps_an_om_through_the_backend_that_runs_it(tmp_path, om_recorder):
    side = Side(om_dir=tmp_path / "convert")
    out = dump_om_side(side, {"x": None}, tmp_path / "target_dump", backend="om-recorder", stage="compare@fp16")
    assert out == tmp_path / "target_dump"
    assert (out / "asked.txt").read_text() == f"{tmp_path / 'convert'}|['x']|compare@fp16"


def test_a_backend_that_cannot_run_oms_says_which_can(tmp_path, om_recorder):
    with pytest.raises(UserError) as err:
        dump_om_side(Side(om_dir=tmp_path / "convert"), {}, tmp_path / "d", backend="onnxruntime")
    assert err.value.message == (f"target '{tmp_path / 'convert'}' is an OM (an ascend convert): compare it with "
                                 "--backend ascend or --backend om-recorder, or compare a dump dir")
    assert err.value.location.field == "target"
