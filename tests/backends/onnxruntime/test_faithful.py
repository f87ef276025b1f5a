"""The fp16 failures the emulation must reproduce, and the remedies that must fix them."""

import json

import numpy as np
import onnx
from onnx import numpy_helper

from tests.backends.onnxruntime.conftest import cosine, r16, run
from tests.modelzoo import (addn_inputs, addn_model, conv_bn_relu_inputs, conv_bn_relu_model, epsilon_inputs,
                            epsilon_model, l2norm_inputs, l2norm_model)


def test_l2norm_collapses_under_force_fp16(tmp_path, convert):
    model, feeds = l2norm_model(tmp_path / "m.onnx"), l2norm_inputs()
    golden = run(model, feeds)[0]
    emulated = run(convert(model).model_path, feeds)[0]
    assert cosine(emulated[0], golden[0]) < 0.5
    assert np.all(emulated == 0)  # x / inf


def test_keep_dtype_on_the_norm_chain_restores_it(tmp_path, convert):
    # square -> sum -> sqrt is one TbeReduceElemwiseFusionPass kernel whose intermediates stay fp16:
    # keep_dtype restores the chain only with that pass off (tests/backends/onnxruntime/test_atc_fusion.py)
    model, feeds = l2norm_model(tmp_path / "m.onnx"), l2norm_inputs()
    golden = run(model, feeds)[0]
    emulated = run(convert(model, keep_dtype=["square", "sum", "sqrt"],
                           fusion_switch={"TbeReduceElemwiseFusionPass": "off"}).model_path, feeds)[0]
    for row in range(len(golden)):
        assert cosine(emulated[row], golden[row]) >= 0.999


def test_keeping_square_and_sum_alone_still_overflows_at_sqrt(tmp_path, convert):
    # sqrt runs in fp16 and reads the fp32 sum (~1.25e8) through a cast to fp16: inf, as on the device
    model, feeds = l2norm_model(tmp_path / "m.onnx"), l2norm_inputs()
    result = convert(model, keep_dtype=["square", "sum"])
    assert result.plan["sqrt"].dtype == "float16" and result.plan["sum"].dtype == "float32"
    assert np.all(run(result.model_path, feeds)[0] == 0)


def test_allow_fp32_to_fp16_keeps_the_norm_fp32(tmp_path, convert):
    model, feeds = l2norm_model(tmp_path / "m.onnx"), l2norm_inputs()
    golden = run(model, feeds)[0]
    result = convert(model, precision_mode="allow_fp32_to_fp16")
    assert {d.dtype for d in result.plan.values()} == {"float32"}
    np.testing.assert_allclose(run(result.model_path, feeds)[0], golden, rtol=1e-6)


def test_addn_overflows_and_keeping_the_sum_fixes_it(tmp_path, convert):
    model, feeds = addn_model(tmp_path / "m.onnx"), addn_inputs()
    x = feeds["x"]
    assert np.all(r16(x * 30000) < 65504)  # every branch fits in fp16
    assert np.all(np.isposinf(run(convert(model).model_path, feeds)[0]))
    fixed = run(convert(model, keep_dtype=["sum"]).model_path, feeds)[0]
    x16 = r16(x)
    expected = sum(r16(x16 * r16(scale)) for scale in (30000, 25000, 20000))  # 25000 is not an fp16 value
    np.testing.assert_allclose(fixed, expected, rtol=1e-6)
    assert np.all(fixed > 65504)


def test_epsilon_and_tiny_variance_underflow(tmp_path, convert):
    model, feeds = epsilon_model(tmp_path / "m.onnx"), epsilon_inputs()
    result = convert(model)
    emu = onnx.load(str(result.model_path))
    eps = {i.name: numpy_helper.to_array(i) for i in emu.graph.initializer}["eps"]
    assert float(eps) == 0.0
    golden_norm, golden_var = run(model, feeds)
    assert 0 < golden_var.item() < 3e-8
    normalized, variance = run(result.model_path, feeds)
    assert variance.item() == 0.0
    assert not np.all(np.isfinite(normalized))
    # square -> var is a TbeReduceElemwiseFusionPass kernel with an fp16 intermediate: switch it off too
    kept = run(convert(model, keep_dtype=["OpType::Mul", "OpType::ReduceMean", "add_eps", "sqrt", "div"],
                       fusion_switch={"TbeReduceElemwiseFusionPass": "off"}).model_path, feeds)
    assert kept[1].item() > 0


def _all_tensors(model_path, feeds, tmp_path):
    """Run the emulated model returning every original tensor (the values the device holds)."""
    model = onnx.load(str(model_path))
    meta = json.loads({p.key: p.value for p in model.metadata_props}["ascendpipe.emulation"])
    names = [t for t in meta["tensor_producer"] if t not in {o.name for o in model.graph.output}]
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in names)
    path = tmp_path / "all.onnx"
    onnx.save(model, str(path))
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out_names = [o.name for o in session.get_outputs()]
    return model, dict(zip(out_names, session.run(None, feeds)))


def test_each_op_output_is_the_fp16_rounding_of_its_fp32_result(tmp_path, convert):
    model = conv_bn_relu_model(tmp_path / "m.onnx")
    feeds = conv_bn_relu_inputs()
    result = convert(model, fusion_switch={"ALL": "off"})
    emu, values = _all_tensors(result.model_path, feeds, tmp_path)
    w = {i.name: numpy_helper.to_array(i) for i in emu.graph.initializer}
    for name in ("conv.w", "conv.b", "fc.w", "fc.b"):
        assert np.array_equal(w[name], r16(w[name]))  # weights pre-rounded
    x = r16(feeds["image"])
    conv = np.zeros((1, 8, 16, 16), np.float32)  # direct 3x3 convolution in float64
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 16, j:j + 16], w["conv.w"][:, :, i, j])
    conv += w["conv.b"].reshape(1, -1, 1, 1)
    got_conv = values["conv_out"]
    assert np.array_equal(got_conv, r16(got_conv))
    np.testing.assert_allclose(got_conv, r16(conv), rtol=1e-3, atol=1e-3)  # within one fp16 ulp
    # BatchNormalization -> BNInferenceD (HostBNFusionPass): mean' = -mean and var' = 1/sqrt(var + eps) made in
    # fp32 on the host, read in fp16; (x + mean') * var' in fp16, and on Ascend310 (no SoC given) * scale + bias
    # in fp16 too (bninference_d.py L198-221)
    from tests.precision.ge_fp16 import ge_fp16

    s, b, m, v = (w[f"bn.{k}"].reshape(1, -1, 1, 1) for k in ("scale", "bias", "mean", "var"))
    mean_p, var_p = ge_fp16(-m), ge_fp16(np.float32(1) / np.sqrt(v + np.float32(1e-5)))
    bn = r16(r16(r16(var_p * r16(got_conv + mean_p)) * ge_fp16(s)) + ge_fp16(b))
    np.testing.assert_array_equal(values["bn_out"], bn)
    assert np.array_equal(values["relu_out"], np.maximum(values["bn_out"], 0))
    assert np.array_equal(values["pooled"], r16(values["relu_out"].mean(axis=(2, 3), keepdims=True)))
    logits = values["flat"].astype(np.float64) @ w["fc.w"].T + w["fc.b"]
    np.testing.assert_array_equal(run(result.model_path, feeds)[0], r16(logits))


def test_elementwise_chain_matches_numpy_rounding_exactly(tmp_path, convert):
    model = l2norm_model(tmp_path / "m.onnx")
    feeds = {"features": np.random.default_rng(3).uniform(0.5, 2.0, (2, 256)).astype(np.float32)}
    _, values = _all_tensors(convert(model).model_path, feeds, tmp_path)
    x = r16(feeds["features"])
    assert np.array_equal(values["squared"], r16(x * x))
    np.testing.assert_allclose(values["sum_sq"], r16(values["squared"].sum(1, keepdims=True)), rtol=1e-3)
    assert np.array_equal(values["sum_sq"], r16(values["sum_sq"]))
    assert np.array_equal(values["norm"], r16(np.sqrt(values["sum_sq"])))
    assert np.array_equal(run(convert(model).model_path, feeds)[0], r16(x / values["norm"]))


def _mul_by_constant_node(path, factor):
    """x -> Mul by a factor from a Constant node (a Paddle export's weights), not an initializer."""
    from onnx import TensorProto, helper

    const = helper.make_node("Constant", [], ["c"], name="c", value=numpy_helper.from_array(np.float32(factor), "v"))
    mul = helper.make_node("Mul", ["x", "c"], ["y"], name="scale")
    graph = helper.make_graph([const, mul], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_kept_op_reads_its_constant_node_weight_in_fp32(tmp_path, convert):
    """A Constant node is a weight, as an initializer is: an op kept in fp32 reads it in fp32; an fp16
    op reads it as GE converts it on the host (1e6 -> 65504: precision.fp16.host_fp16)."""
    model = _mul_by_constant_node(tmp_path / "m.onnx", 1e6)
    feeds = {"x": np.array([[0.5, -2.0, 1e-3, 3.0], [0.25, 1.0, -1e-3, 0.0]], np.float32)}
    golden = run(model, feeds)[0]
    fp16 = run(convert(model, soc_version="Ascend910B1").model_path, feeds)[0]
    # 0.5 * 65504 fits; 2 * 65504 is inf
    np.testing.assert_array_equal(fp16, r16(r16(feeds["x"]) * np.float32(65504.0)))
    assert np.isinf(fp16[0, 1]) and fp16[0, 0] == 32752.0
    kept = run(convert(model, soc_version="Ascend910B1", keep_dtype=["scale"]).model_path, feeds)[0]
    np.testing.assert_allclose(kept, golden, rtol=1e-6)
