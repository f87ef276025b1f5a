"""Each kernel's inside, emulated, against a numpy reference written from the kernel's own source
(canndev 7290acc7 ops/built-in/tbe/impl/, lines in precision/kernel_table.py), on several seeds' data.

The references round to fp16 where the kernel computes in fp16 (``h``) and sum in fp16 by halves
where it accumulates in fp16 (``tree16``). fp32 transcendental functions may differ from onnxruntime's
in the last fp32 bit; after an fp16 rounding that is at most one fp16 step (``close16``).
"""

import json

import numpy as np
import pytest

from tests.backends.onnxruntime.conftest import run
from tests.backends.onnxruntime.graph_models import layer_norm_model, single_op_model


def h(x):
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def sat(x):
    """fp16 in saturation mode: NaN -> 0, clipped to +-65504, then rounded."""
    x = np.nan_to_num(np.asarray(x, np.float32), nan=0.0, posinf=65504.0, neginf=-65504.0)
    return h(np.clip(x, -65504.0, 65504.0))


def tree16(x, axis=-1, rnd=h):
    """Sum along ``axis`` in fp16 by halves, the odd tail paired with 0 (keepdims)."""
    x = np.moveaxis(np.asarray(x, np.float32), axis, -1)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = np.concatenate([x, np.zeros(x.shape[:-1] + (1,), np.float32)], -1)
        half = x.shape[-1] // 2
        x = rnd(x[..., :half] + x[..., half:])
    return np.moveaxis(x, -1, axis)


def close16(got, ref, steps=1):
    """Equal within ``steps`` fp16 steps of the reference (NaN and inf where it has them)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(np.isinf(got), np.isinf(ref)) and np.array_equal(got[np.isinf(got)], ref[np.isinf(ref)])
    fin = np.isfinite(ref)
    step = np.maximum(np.abs(ref[fin]) * 2.0 ** -10, 2.0 ** -24)
    assert np.all(np.abs(got[fin] - ref[fin]) <= steps * step + 1e-12), np.abs(got[fin] - ref[fin]).max()


def ln_ref(x, gamma, beta, eps, *, fp16=False, template=False, saturate=False):
    """layer_norm.py L574-709 (static; ``fp16``: the 310 high_performance path, every step in fp16) and
    dynamic/layer_norm.py L459-580 (``template``: mean and variance rounded through fp16)."""
    r = sat if saturate else h
    n = x.shape[-1]
    if fp16:
        cof = np.float32(np.float16(1.0 / n))
        mean = tree16(r(x * cof), rnd=r)
        d = r(x - mean)
        var = tree16(r(r(d * d) * cof), rnd=r)
        rstd = r(np.exp(r(r(np.log(r(var + np.float32(np.float16(eps))))) * np.float32(-0.5))))
        return r(r(gamma * r(d * rstd)) + beta)
    x64 = x.astype(np.float32)
    mean = (x64 * np.float32(1.0 / n)).sum(-1, keepdims=True, dtype=np.float32)
    if template:
        mean = r(mean)
    d = x64 - mean
    var = (d * d * np.float32(1.0 / n)).sum(-1, keepdims=True, dtype=np.float32)
    if template:
        var = r(var)
    with np.errstate(divide="ignore"):
        rstd = np.exp(np.log(var + np.float32(eps)) * np.float32(-0.5))
    return r(gamma * (d * rstd) + beta)


def _ln_weights(path):
    import onnx
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    return h(inits["gamma"]), h(inits["beta"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layer_norm_per_soc(tmp_path, convert, seed):
    """The fused LayerNorm: fp32 inside on Atlas A2 (the static vector kernel), fp16 throughout on Ascend310
    (high_performance, the ATC default), the template's fp16 mean/variance on 310P3 (a shape its tiling
    leaves on one core); activations whose variance exceeds fp16's range (std 400)."""
    model = layer_norm_model(tmp_path / "m.onnx", seed=seed, producer=False)
    gamma, beta = _ln_weights(model)
    x = (np.random.default_rng(seed).normal(0, 400, (1, 16, 64))).astype(np.float32)
    x16 = h(x)
    golden = run(model, {"x": x})[0]
    a2 = run(convert(model, soc_version="Ascend910B1").model_path, {"x": x})[0]
    close16(a2, ln_ref(x16, gamma, beta, 1e-5))
    assert np.abs(a2 - golden).max() < 0.02  # the device computes it right: no overflow at Pow
    a310 = run(convert(model, soc_version="Ascend310").model_path, {"x": x})[0]
    close16(a310, ln_ref(x16, gamma, beta, 1e-5, fp16=True), steps=2)
    assert np.abs(a310 - golden).max() > 1.0  # (x - mean)^2 overflows fp16 inside the kernel
    p3 = run(convert(model, soc_version="Ascend310P3").model_path, {"x": x})[0]
    close16(p3, ln_ref(x16, gamma, beta, 1e-5, template=True, saturate=True))
    assert np.abs(p3 - golden).max() > 1.0  # the variance saturates at 65504 mid-kernel: a mis-scaled output


def test_layer_norm_high_precision_on_310_computes_fp32(tmp_path, convert):
    """``op_select_implmode: high_precision`` (or an op_precision_mode line) casts to fp32 even on 310
    (layer_norm.py L614-623: ``or impl_mode == "high_precision"``) and restores the output."""
    model = layer_norm_model(tmp_path / "m.onnx", producer=False)
    gamma, beta = _ln_weights(model)
    x = np.random.default_rng(5).normal(0, 400, (1, 16, 64)).astype(np.float32)
    got = run(convert(model, soc_version="Ascend310", op_select_implmode="high_precision").model_path, {"x": x})[0]
    x16 = h(x)
    n = 64
    mean = (x16 * np.float32(1 / n)).sum(-1, keepdims=True, dtype=np.float32)
    d = x16 - mean
    var = (d * d * np.float32(1 / n)).sum(-1, keepdims=True, dtype=np.float32)
    close16(got, h(gamma * (d * (np.float32(1) / np.sqrt(var + np.float32(1e-5)))) + beta))  # sqrt path (L668-678)
    ini = tmp_path / "p.ini"
    ini.write_text("LayerNorm=high_precision\n")
    same = run(convert(model, soc_version="Ascend310", op_precision_mode=str(ini)).model_path, {"x": x})[0]
    np.testing.assert_array_equal(same, got)


@pytest.mark.parametrize("seed", [0, 1])
def test_softmax_subtracts_the_max_in_fp16(tmp_path, convert, seed):
    """softmax_v2.py L490-524: x - max in fp16, then exp/sum/div in fp32 (310P/910/910B); on Ascend310 exp
    is fp16 too (L499-502). Logits near 1000: x - max loses bits in fp16."""
    rng = np.random.default_rng(seed)
    x = (1000 + rng.normal(0, 3, (4, 32))).astype(np.float32)
    model = single_op_model(tmp_path / "m.onnx", "Softmax", (4, 32), {"axis": -1})
    x16 = h(x)
    d = h(x16 - x16.max(-1, keepdims=True))
    e = np.exp(d)
    got = run(convert(model, soc_version="Ascend310P3").model_path, {"x": x})[0]
    close16(got, h(e / e.sum(-1, keepdims=True)))
    e16 = h(np.exp(d))
    got310 = run(convert(model, soc_version="Ascend310").model_path, {"x": x})[0]
    close16(got310, h(e16 / e16.sum(-1, keepdims=True, dtype=np.float32)))


def test_sigmoid_is_fp16_inside_and_clamped_on_910(tmp_path, convert):
    """sigmoid.py L116-150: -x, exp, +1 and 1/. each in fp16; Ascend910's static file clamps x at
    fp16(-11.089) first (L126-133): a floor of 1.53e-5. 310P3 saturates exp(20) at 65504: 1.526e-5.
    Atlas A2 (inf/NaN mode): exp(20) is inf, 1/inf 0."""
    model = single_op_model(tmp_path / "m.onnx", "Sigmoid", (1, 4))
    x = np.array([[-20.0, -11.0, 0.5, 3.0]], np.float32)
    a910 = run(convert(model, soc_version="Ascend910A").model_path, {"x": x})[0]
    assert a910[0, 0] == h(1 / h(h(np.exp(np.float32(-np.float16(-11.089)))) + 1))[()]
    assert abs(a910[0, 0] - 1.53e-5) < 1e-7
    p3 = run(convert(model, soc_version="Ascend310P3").model_path, {"x": x})[0]
    assert p3[0, 0] == h(1 / np.float32(65504.0))[()]
    assert run(convert(model, soc_version="Ascend910B1").model_path, {"x": x})[0][0, 0] == 0.0
    close16(p3[0, 1:], h(1 / h(h(np.exp(-h(x[0, 1:]))) + 1)))


def test_reduce_mean_prescales_in_fp16_on_310(tmp_path, convert):
    """reduce_mean_d.py L63-87, L133-134: x * fp16(1/N), summed in fp16 under high_performance on 310:
    the mean of five ones is 5 * fp16(0.2) summed in fp16 = 0.99951; fp32 elsewhere, and on 310 under
    high_precision."""
    model = single_op_model(tmp_path / "m.onnx", "ReduceMean", (2, 5), {"axes": [-1], "keepdims": 1}, out_shape=(2, 1))
    x = np.ones((2, 5), np.float32)
    got = run(convert(model, soc_version="Ascend310").model_path, {"x": x})[0]
    assert got[0, 0] == tree16(h(x * np.float32(np.float16(1 / 5))))[0, 0] == np.float32(np.float16(0.99951171875))
    assert run(convert(model, soc_version="Ascend310P3").model_path, {"x": x})[0][0, 0] == 1.0
    ini = tmp_path / "p.ini"
    ini.write_text("ReduceMeanD=high_precision\n")
    assert run(convert(model, soc_version="Ascend310", op_precision_mode=str(ini)).model_path, {"x": x})[0][0, 0] == 1.0
    plan = json.loads((convert(model).out_dir / "precision_plan.json").read_text())
    assert plan["nodes"]["/reducemean"]["ge_type"] == "ReduceMeanD"


@pytest.mark.parametrize("seed", [0, 1])
def test_reduce_sum_accumulates_in_fp16_on_310(tmp_path, convert, seed):
    model = single_op_model(tmp_path / "m.onnx", "ReduceSum", (2, 300), {"keepdims": 1},
                            extra_inits=[("axes", np.array([1], np.int64))], out_shape=(2, 1))
    x = np.random.default_rng(seed).uniform(0, 3, (2, 300)).astype(np.float32)
    got = run(convert(model, soc_version="Ascend310").model_path, {"x": x})[0]
    np.testing.assert_array_equal(got, tree16(h(x)))  # reduce_sum_d.py L63: fp32 everywhere but Ascend310
    fp32 = run(convert(model, soc_version="Ascend310P3").model_path, {"x": x})[0]
    np.testing.assert_array_equal(fp32, h(h(x).sum(1, keepdims=True, dtype=np.float32)))


@pytest.mark.parametrize("keepdims", [1, 0])
def test_fp16_accumulation_needs_only_the_reduced_dims_static(tmp_path, convert, keepdims):
    """A symbolic batch dim (an exported model's) still gets the fp16 sum by halves: only the reduced
    dims must be known; the output's shape is read from the input at run time."""
    out_shape = ("batch", 1, 5) if keepdims else ("batch", 5)
    model = single_op_model(tmp_path / "m.onnx", "ReduceSum", ("batch", 300, 5), {"keepdims": keepdims},
                            extra_inits=[("axes", np.array([1], np.int64))], out_shape=out_shape)
    result = convert(model, soc_version="Ascend310")
    kernel = json.loads((result.out_dir / "precision_plan.json").read_text())["nodes"]["/reducesum"]["kernel"]
    assert kernel["emulated"] == "step by step" and "not_emulated" not in kernel
    for batch in (1, 3):
        x = np.random.default_rng(batch).uniform(0, 3, (batch, 300, 5)).astype(np.float32)
        got = run(result.model_path, {"x": x})[0]
        want = tree16(h(x), axis=1)
        np.testing.assert_array_equal(got, want if keepdims else want[:, 0])


def test_tanh_and_pow_take_fp16_steps_on_310(tmp_path, convert):
    x = np.array([[0.3, -1.7, 4.0, 0.001]], np.float32)
    tanh = single_op_model(tmp_path / "t.onnx", "Tanh", (1, 4))
    x16 = h(x)
    a = np.abs(x16)
    e = h(np.exp(h(a * -2)))
    ref = h(h(x16 - h(e * x16)) / h(h(e + 1) * h(a + np.float32(2 ** -14))))  # tanh.py L56-88 in fp16
    close16(run(convert(tanh, soc_version="Ascend310").model_path, {"x": x})[0], ref)
    power = single_op_model(tmp_path / "p.onnx", "Pow", (1, 3), extra_inits=[("e", np.float32(6.0))])
    got = run(convert(power, soc_version="Ascend310").model_path, {"x": np.array([[3.0, 2.0, 1.5]], np.float32)})[0]
    ref = h(np.exp(h(h(np.float32(6.0)) * h(np.log(np.float32([3.0, 2.0, 1.5]))))))  # dynamic/pow.py L103-124
    close16(got[0], ref)
    assert got[0, 0] != 729.0  # 3^6 through fp16 ln and exp
    # an integer exponent is read as a float (ONNX's Pow(float, int64): the node tests' pow_types)
    power = single_op_model(tmp_path / "pi.onnx", "Pow", (1, 3), extra_inits=[("e", np.int64(6))])
    got = run(convert(power, soc_version="Ascend310").model_path, {"x": np.array([[3.0, 2.0, 1.5]], np.float32)})[0]
    close16(got[0], ref)


def test_bn_without_conv_is_bninference_on_a2(tmp_path, convert):
    """Atlas A2 folds no Conv+BN (ConvBatchnormFusionPass lists no A2): the BN is BNInferenceD, whose
    (x + mean') * var' is fp16 (bninference_d.py L198-201): values near 1000 with std 1 lose their digits."""
    c = 4
    rng = np.random.default_rng(0)
    mean = (1000 + rng.normal(0, 1, c)).astype(np.float32)
    var = np.ones(c, np.float32)
    model = single_op_model(tmp_path / "m.onnx", "BatchNormalization", (1, c, 2, 2),
                            extra_inits=[("s", np.ones(c, np.float32)), ("b", np.zeros(c, np.float32)),
                                         ("m", mean), ("v", var)])
    x = (mean.reshape(1, c, 1, 1) + rng.normal(0, 1, (1, c, 2, 2))).astype(np.float32)
    got = run(convert(model, soc_version="Ascend910B1").model_path, {"x": x})[0]
    var_p = h(np.float32(1) / np.sqrt(var + np.float32(1e-5))).reshape(1, c, 1, 1)
    ref = h(h(var_p * h(h(x) + h(-mean).reshape(1, c, 1, 1))) * 1.0 + 0.0)
    np.testing.assert_array_equal(got, ref)
    exact = (x - mean.reshape(1, c, 1, 1)) / np.sqrt(var.reshape(1, c, 1, 1) + 1e-5)
    assert np.abs(got - exact).max() > 0.05  # fp16 holds 1000 +- 1 to 0.5
