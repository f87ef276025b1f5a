"""A convert's key holds the mixed-precision lists it reads: a CANN install appearing (or changing) where
the environment points rebuilds the convert, through the deciding build and through the no-op memo alike."""

from __future__ import annotations

import json

import pytest

from ascendpipe.cli.main import main
from ascendpipe.engine.noop_replay import replay

ARGV = ["build", "pipeline.yaml"]
PIPELINE = """\
stages:
  convert:
    kind: convert
    model: m.onnx
    params: {precision_mode: allow_mix_precision, soc_version: Ascend310P3}
"""


@pytest.fixture
def settled(monkeypatch):
    import ascendpipe.store.hashing as hashing

    monkeypatch.setattr(hashing, "RACY_WINDOW_NS", 0)


def _states(capsys) -> dict[str, str]:
    assert main(ARGV) == 0
    out = capsys.readouterr().out
    return {line.split()[1]: line.split()[0] for line in out.splitlines()
            if line.startswith("  ") and line.split()[0] in ("ran", "restored", "fresh")}


def test_an_install_appearing_rebuilds_the_convert(ws, settled, capsys, monkeypatch):
    from ascendpipe import versions
    from tests.modelzoo import conv_bn_relu_model

    monkeypatch.setattr(versions, "OPS_INFO_HOMES", ())
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(var, raising=False)
    opp = ws.root.parent / "cann" / "opp"
    monkeypatch.setenv("ASCEND_OPP_PATH", str(opp))  # set, but nothing installed there yet
    conv_bn_relu_model(ws.root / "m.onnx")
    ws.pipeline(PIPELINE)
    assert _states(capsys) == {"convert": "ran"}
    record = json.loads((ws.root / "build/convert/convert.json").read_text())
    assert record["op_lists"]["source"] == "canndev-2022"
    assert _states(capsys) == {"convert": "fresh"}  # the deciding no-op writes the memo
    config = opp / "built-in/op_impl/ai_core/tbe/config/ascend310p"
    config.mkdir(parents=True)
    flags = {"Conv2D": {"precision_reduce": {"flag": "false"}}}
    (config / "aic-ascend310p-ops-info.json").write_text(json.dumps(flags))
    assert replay(list(ARGV)) != 0  # the memo stats the install's folders: it does not vouch any more
    capsys.readouterr()
    assert _states(capsys) == {"convert": "ran"}
    record = json.loads((ws.root / "build/convert/convert.json").read_text())
    assert record["op_lists"]["source"] == "cann-install" and record["op_lists"]["files"] == [
        "aic-ascend310p-ops-info.json"]
    plan = json.loads((ws.root / "build/convert/precision_plan.json").read_text())
    conv = next(entry for entry in plan["nodes"].values() if entry["op_type"] == "Conv")
    assert conv["dtype"] == "float32" and "black list: Conv2D" in conv["reason"]  # the install's own flag
