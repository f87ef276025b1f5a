"""The ascend dump stage picks its feed as the onnxruntime dump does (docs/contracts.md "Inputs"):
a file whose arrays fit the model runs as given; ``max_batch`` caps a batch, it does not re-batch
inputs whose first axes are the model's dims rather than a common batch."""

from __future__ import annotations

import json

import numpy as np

from ascendpipe.backends.ascend import stages


def _concat_model(path):
    """a[N,4], b[M,4] -> Concat(axis 0) -> y[N+M,4]: N and M are dims of their own, not one batch."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=0)], "cat",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, ["M", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["S", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_feed_that_fits_a_dynamic_dims_om_is_dumped_as_given(cann_env, make_ctx, tmp_path):
    model = _concat_model(tmp_path / "cat.onnx")
    cctx = make_ctx("convert", "convert", {"soc_version": "Ascend310P3", "input_shape": "a:-1,4;b:-1,4",
                                           "dynamic_dims": "2,3;4,5"}, inputs={"model": model})
    stages.convert(cctx)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = -np.arange(12, dtype=np.float32).reshape(3, 4)
    np.savez(tmp_path / "feeds.npz", a=a, b=b)
    ctx = make_ctx("dump", "dump", {"max_batch": 2}, inputs={"model": cctx.out_dir, "inputs": tmp_path / "feeds.npz"})
    stages.dump(ctx)
    index = json.loads((ctx.out_dir / "index.json").read_text())
    by_name = {t["name"]: t for t in index["tensors"]}
    np.testing.assert_array_equal(np.load(ctx.out_dir / by_name["a"]["file"]), a)
    np.testing.assert_array_equal(np.load(ctx.out_dir / by_name["b"]["file"]), b)
    np.testing.assert_array_equal(np.load(ctx.out_dir / by_name["y"]["file"]), np.concatenate([a, b]))
