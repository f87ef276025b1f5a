"""atc has no parser for ops outside ai.onnx (E19010): the ascend convert refuses them by name before
atc runs, allow_custom_ops or not (it emulates them on onnxruntime only)."""

from __future__ import annotations

import pytest

from ascendpipe.backends.ascend import stages
from ascendpipe.backends.ascend.runner import RecordingRunner
from ascendpipe.errors import UserError
from tests import modelzoo

SOC = "Ascend310P3"


@pytest.mark.parametrize("params", [{}, {"allow_custom_ops": True}])
def test_fused_contrib_ops_are_refused_before_atc_runs(cann_env, make_ctx, tmp_path, params):
    model = modelzoo.fused_bert_model(tmp_path / "bert.onnx")
    runner = RecordingRunner()
    ctx = make_ctx("convert", "convert", {"soc_version": SOC, **params}, inputs={"model": model}, runner=runner)
    with pytest.raises(UserError) as err:
        stages.convert(ctx)
    message = err.value.message
    assert "ATC cannot convert 4 op(s) outside ONNX's published schemas" in message
    assert "com.microsoft.EmbedLayerNormalization at 'embed'" in message and "--allow-custom-ops" not in message
    assert err.value.location.stage == "convert" and err.value.location.op == "embed"
    assert runner.calls == []  # atc never ran


def test_allow_custom_ops_on_a_standard_model_changes_nothing_atc_gets(cann_env, make_ctx, tiny_model):
    runner = RecordingRunner()
    ctx = make_ctx("convert", "convert", {"soc_version": SOC, "allow_custom_ops": True}, inputs={"model": tiny_model},
                   runner=runner)
    try:
        stages.convert(ctx)
    except Exception:  # noqa: BLE001 - the recording runner makes no OM; the argv is what matters here
        pass
    assert runner.calls and not any(arg.split("=")[0] in ("--allow_custom_ops", "--allow-custom-ops") for arg in runner.calls[0])
