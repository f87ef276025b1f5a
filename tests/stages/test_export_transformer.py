"""Exporting nn.TransformerEncoder (issue 43): PyTorch's attention fast path has no ONNX form (the export
failed and torch printed ~60 lines of its IR); the export stage turns it off while exporting, and a
failure from it anyway gets one line saying what to do."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ascendpipe.stages.export import ExportKind, export_hint
from tests.stages.test_export_source import export_params

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="exporting needs torch: pip install -e '.[torch]'")

NET = '''
import torch
from torch import nn

def build():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
'''


@needs_torch
def test_a_transformer_encoder_exports_and_matches_torch(tmp_path, make_ctx, capfd):
    import onnxruntime as ort
    import torch

    (tmp_path / "net.py").write_text(NET)
    params = export_params(factory_args={}, input_shapes={"x": [1, 5, 16]}, dynamic_axes=None, extra_args=[],
                           output_names=["y"])
    ctx = make_ctx("export", params, {"model": tmp_path / "net.py"})
    result = ExportKind().run(ctx)
    assert "Torch IR graph" not in capfd.readouterr().out
    assert result.metrics["export_cosine"] > 0.99999
    assert torch.backends.mha.get_fastpath_enabled()  # put back as it was
    x = np.random.default_rng(1).normal(size=(1, 5, 16)).astype(np.float32)
    got = ort.InferenceSession(str(ctx.out_dir / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    import importlib.util as iu
    import sys

    spec = iu.spec_from_file_location("net_te", tmp_path / "net.py")
    module = iu.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build().eval()
    with torch.no_grad():  # the fast path, as a user runs the model
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-4)
    sys.modules.pop("net_te", None)


def test_the_fast_path_failure_gets_a_one_line_hint():
    message = "Exporting the operator 'aten::_transformer_encoder_layer_fwd' to ONNX opset version 17 is not supported"
    hint = export_hint(message)
    assert hint.startswith("; this is PyTorch's attention fast path (nn.TransformerEncoder / MultiheadAttention in eval "
                           "mode): call torch.backends.mha.set_fastpath_enabled(False) before exporting")
    assert "\n" not in hint and export_hint("Unsupported: prim::PythonOp") == ""
