"""Extra fp16 failure models for the fix tests and benchmark (the shared ones are in tests/modelzoo.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.modelzoo import _const, _save


def folded_bn_model(path: Path | str, channels: int = 4) -> Path:
    """Conv -> BatchNormalization whose folded weights overflow fp16 only when the two are fused.

    BN's scale gamma / sqrt(var) is 1e7 and the conv weights 0.01: folded, the weights are 1e5 >
    65504 (inf in fp16), unfused every tensor fits. Input ``image`` [1, 3, 8, 8] (values ~1e-3, see
    ``folded_bn_inputs``); output ``bn_out``. Nodes: ``conv``, ``bn``.
    """
    from onnx import TensorProto, helper

    f32 = np.float32
    inits = [
        _const("conv.w", np.full((channels, 3, 3, 3), 0.01, f32)),
        _const("bn.scale", np.full(channels, 1e5, f32)),
        _const("bn.bias", np.zeros(channels, f32)),
        _const("bn.mean", np.zeros(channels, f32)),
        _const("bn.var", np.full(channels, 1e-4, f32)),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv.w"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv_out", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["bn_out"],
                         name="bn", epsilon=1e-12),
    ]
    graph = helper.make_graph(nodes, "folded_bn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("bn_out", TensorProto.FLOAT, [1, channels, 8, 8])],
                              initializer=inits)
    return _save(graph, path)


def folded_bn_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": rng.uniform(0.5e-3, 1.5e-3, size=(1, 3, 8, 8)).astype(np.float32)}
