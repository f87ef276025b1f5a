import importlib.util
import json
import sys

import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.stages.export import ExportKind, cosine_and_max_error
from ascendpipe.stages.source import SourceKind

def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


needs_torch = pytest.mark.skipif(not _importable("torch"), reason="exporting needs torch: pip install -e '.[torch]'")

NET = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.fc = nn.Linear(3, width)

    def forward(self, x, inference=False):
        y = self.fc(x)
        return torch.tanh(y) if inference else y * 100.0

def build(width=4):
    return Net(width)
'''


def export_params(**extra):
    params = {"factory": "build", "factory_args": {"width": 4}, "input_names": ["x"], "input_shapes": {"x": [2, 3]},
              "input_dtypes": {}, "output_names": ["y"], "dynamic_axes": {"x": {"0": "batch"}}, "opset": 17,
              "extra_args": [True], "seed": 0, "min_cosine": 0.999}
    params.update(extra)
    return params


@needs_torch
def test_export_takes_the_inference_branch_and_records_the_check(tmp_path, make_ctx):
    import onnxruntime as ort
    import torch

    (tmp_path / "net.py").write_text(NET)
    torch.manual_seed(0)
    sys.path.insert(0, str(tmp_path))
    try:
        import net as net_module
    finally:
        sys.path.remove(str(tmp_path))
    reference = net_module.build(4)
    torch.save(reference.state_dict(), tmp_path / "w.pt")
    ctx = make_ctx("export", export_params(), {"model": tmp_path / "net.py", "checkpoint": tmp_path / "w.pt"})
    result = ExportKind().run(ctx)
    x = np.random.default_rng(5).normal(size=(7, 3)).astype(np.float32)  # batch 7: the dynamic axis works
    got = ort.InferenceSession(str(ctx.out_dir / "model.onnx")).run(None, {"x": x})[0]
    # independent reference from the checkpoint's weights, in numpy
    w, b = reference.fc.weight.detach().numpy(), reference.fc.bias.detach().numpy()
    np.testing.assert_allclose(got, np.tanh(x @ w.T + b), atol=1e-6)
    report = json.loads((ctx.out_dir / "export.json").read_text())
    assert report["checker"] == "ok"
    assert report["versions"]["torch"] == torch.__version__
    assert result.metrics["export_cosine"] > 0.999999
    assert 0 <= result.metrics["export_max_abs_error"] < 1e-5


@needs_torch
def test_checkpoint_that_does_not_fit_is_a_user_error(tmp_path, make_ctx):
    import torch

    (tmp_path / "net.py").write_text(NET)
    torch.save({"fc.weight": torch.zeros(9, 3)}, tmp_path / "w.pt")
    ctx = make_ctx("export", export_params(), {"model": tmp_path / "net.py", "checkpoint": tmp_path / "w.pt"})
    with pytest.raises(UserError, match="does not fit the model"):
        ExportKind().run(ctx)


def test_export_without_torch_says_how_to_install(tmp_path, make_ctx, monkeypatch):
    (tmp_path / "net.py").write_text(NET)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    ctx = make_ctx("export", export_params(), {"model": tmp_path / "net.py"})
    with pytest.raises(UserError, match=r"needs PyTorch; install it with: pip install torch "):
        ExportKind().run(ctx)


def test_cosine_and_max_error_against_hand_values():
    assert cosine_and_max_error([1, 0], [0, 1]) == (0.0, 1.0)
    cos, err = cosine_and_max_error([3, 4], [6, 8])
    assert cos == pytest.approx(1.0) and err == pytest.approx(4.0)
    assert cosine_and_max_error([1, 2], [1, np.inf])[0] == 0.0


def _tiny_onnx(path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_source_checks_and_copies(tmp_path, make_ctx):
    _tiny_onnx(tmp_path / "m.onnx")
    ctx = make_ctx("source", {"full_check": True}, {"model": tmp_path / "m.onnx"})
    result = SourceKind().run(ctx)
    assert (ctx.out_dir / "model.onnx").read_bytes() == (tmp_path / "m.onnx").read_bytes()
    assert result.metrics["nodes"] == 1


def test_source_keeps_external_weights_in_their_files(tmp_path, make_ctx):
    """A model past 2 GB keeps its weights as external data: the stage copies the files beside its
    model.onnx (never inlined into the protobuf, which would meet its 2 GB limit)."""
    import numpy as np
    import onnx

    from tests import modelzoo

    source = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx")
    ctx = make_ctx("source", {"full_check": True}, {"model": source})
    result = SourceKind().run(ctx)
    written = ctx.out_dir / "model.onnx"
    assert written.stat().st_size < 4096 and result.metrics["nodes"] == 8
    assert (ctx.out_dir / "ffn.onnx.data").read_bytes() == (tmp_path / "src" / "ffn.onnx.data").read_bytes()
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(written)).graph.initializer}
    original = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(source)).graph.initializer}
    assert all(np.array_equal(weights[n], original[n]) for n in original)
    (tmp_path / "src" / "ffn.onnx.data").unlink()
    with pytest.raises(UserError, match="rejects|missing"):
        SourceKind().run(make_ctx("source", {"full_check": True}, {"model": source}, name="src2"))


def test_source_rejects_a_broken_model(tmp_path, make_ctx):
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    ctx = make_ctx("source", {"full_check": True}, {"model": tmp_path / "bad.onnx"}, name="src")
    with pytest.raises(UserError, match="not a readable ONNX model") as err:
        SourceKind().run(ctx)
    assert "stage 'src'" in str(err.value)


def test_the_legacy_exporter_is_asked_for_only_where_torch_takes_it():
    """torch 2.13's export wants onnxscript unless dynamo=False; an older torch refuses the argument."""
    from ascendpipe.stages.export import legacy_exporter_kwargs

    def old_export(model, args, f, input_names=None, opset_version=None):
        return None

    def new_export(model, args, f, *, dynamo=True, opset_version=None):
        return None

    assert legacy_exporter_kwargs(old_export) == {}
    assert legacy_exporter_kwargs(new_export) == {"dynamo": False}
    torch = pytest.importorskip("torch", reason="pip install torch (the examples extra)")
    import inspect

    takes = "dynamo" in inspect.signature(torch.onnx.export).parameters
    assert legacy_exporter_kwargs(torch.onnx.export) == ({"dynamo": False} if takes else {})
