"""A 0-d float16 tensor holding inf or NaN through compare and fix: three real third-party models
stopped with an internal error here (``pairpass.widen_into`` fed a (1,)-shaped copy of a 0-d tensor)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ascendpipe.compare import pairpass, runner


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], capture_output=True, text=True)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan, 1.5, 0.0, -65504.0])
def test_a_0d_float16_widens_to_the_same_0d_float32(value):
    half = np.array(value, np.float16)
    got = runner._widened(half)
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_array_equal(got, half.astype(np.float32))
    # the same through a (1,)-shaped contiguous copy, as np.ascontiguousarray makes of a 0-d array
    got = pairpass.widen_into(np.ascontiguousarray(half), np.empty((), np.float32))
    np.testing.assert_array_equal(got, half.astype(np.float32))


def _scalar_overflow_model(path):
    """x[4] -> ReduceSum (0-d) -> Mul 1 -> y: four values of 3e4 sum past fp16's 65504 (inf in fp16);
    Sub(y, y) of that inf is NaN, a second 0-d output."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Mul", ["s", "one"], ["y"], name="scale"),
        helper.make_node("Sub", ["y", "y"], ["z"], name="diff"),
    ]
    graph = helper.make_graph(
        nodes, "scalar_overflow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_compare_and_fix_of_0d_float16_inf_and_nan_outputs_finish(tmp_path):
    model = _scalar_overflow_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.full(4, 3e4, np.float32))
    conv = _cli("convert", "--model", str(model), "--output", str(tmp_path / "conv"),
                "--precision-mode", "force_fp16")
    assert conv.returncode == 0, conv.stderr
    cmp = _cli("compare", "--golden", str(model), "--target", str(tmp_path / "conv"),
               "--input", str(tmp_path / "in.npz"), "--output", str(tmp_path / "cmp"), "--json")
    assert cmp.returncode in (0, 1) and "Traceback" not in cmp.stderr, cmp.stderr
    result = json.loads((tmp_path / "cmp" / "result.json").read_text())
    assert result["first_failure"]["op_name"] == "sum" and result["first_failure"]["kind"] == "overflow"
    assert result["summary"]["overflow_ops"] == 2 and result["summary"]["outputs_pass"] is False
    fix = _cli("fix", "--golden", str(model), "--input", str(tmp_path / "in.npz"), "--output",
               str(tmp_path / "fix"), "--json")
    assert fix.returncode in (0, 1) and "Traceback" not in fix.stderr, fix.stderr
    assert json.loads(fix.stdout)["passed"] is True
