"""ATC's fusion passes in the emulation: no onnxruntime fusion hides an overflow; the two-step
keep_dtype + fusion switch story from ATC's own file; saturation mode; If bodies rounded."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascendpipe.errors import UserError
from ascendpipe.precision import atc_passes
from tests.backends.onnxruntime.conftest import cosine, run
from tests.modelzoo import l2norm_inputs, l2norm_model


def _save(graph, path, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def attention_model(path, d=64, tokens=8):
    """scores = MatMul(q, kT) (beyond 65504 before the scale) * 1/sqrt(d) -> Softmax -> MatMul(v)."""
    nodes = [
        helper.make_node("MatMul", ["q", "kT"], ["scores"], name="qk"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        helper.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["out"], name="pv"),
    ]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
         (("q", [tokens, d]), ("kT", [d, tokens]), ("v", [tokens, d]))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [tokens, d])],
        initializer=[numpy_helper.from_array(np.array(1 / np.sqrt(d), np.float32), "scale")])
    return _save(graph, path)


def attention_inputs(d=64, tokens=8):
    rng = np.random.default_rng(0)
    q = rng.uniform(30, 40, (tokens, d)).astype(np.float32)  # q.k ~ 64 * 35^2 = 78400 > 65504
    k = rng.uniform(30, 40, (tokens, d)).astype(np.float32)
    return {"q": q, "kT": k.T.copy(), "v": rng.standard_normal((tokens, d)).astype(np.float32)}


def test_scaled_attention_overflows_before_the_scale_under_force_fp16(tmp_path, convert):
    model, feeds = attention_model(tmp_path / "m.onnx"), attention_inputs()
    golden = run(model, feeds)[0]
    result = convert(model)
    assert json.loads((result.out_dir / "fused_map.json").read_text())["fused"] == {}  # MatMul + Mul: no ATC pass
    assert result.plan["qk"].dtype == "float16"
    emulated = run(result.model_path, feeds)[0]
    assert not np.all(np.isfinite(emulated)) or cosine(emulated, golden) < 0.9


def test_keeping_the_matmul_and_its_reader_fixes_attention(tmp_path, convert):
    model, feeds = attention_model(tmp_path / "m.onnx"), attention_inputs()
    golden = run(model, feeds)[0]
    only_matmul = run(convert(model, keep_dtype=["qk"]).model_path, feeds)[0]  # the Mul reads the scores in fp16
    assert not np.all(np.isfinite(only_matmul)) or cosine(only_matmul, golden) < 0.9
    fixed = run(convert(model, keep_dtype=["qk", "scale"]).model_path, feeds)[0]
    assert cosine(fixed, golden) > 0.999


def test_compare_names_the_attention_matmul_first(tmp_path, convert):
    from ascendpipe.compare.runner import compare_dumps, graph_info
    from ascendpipe.backends.compare_sources import dump

    model, feeds = attention_model(tmp_path / "m.onnx"), attention_inputs()
    result = convert(model)
    golden = dump(model, feeds, tmp_path / "golden", fusions=False)
    target = dump(result.model_path, feeds, tmp_path / "target", fusions=True)
    out = compare_dumps(golden, target, graph=graph_info(model),
                        fused_map=json.loads((result.out_dir / "fused_map.json").read_text()),
                        precision_plan=json.loads((result.out_dir / "precision_plan.json").read_text()))
    first = out["first_failure"]
    assert first["op_name"] == "qk" and first["kind"] == "overflow"
    keep = next(a for a in first["advice"] if a["kind"] == "keep_dtype")
    assert keep["ops"][:2] == ["qk", "scale"]


def test_reduce_elemwise_kernel_keeps_each_members_dtype_under_keep_dtype(tmp_path, convert):
    """A UB-fused kernel's members keep the dtypes the op judge gave them (ATC inserts the Casts before UB
    fusion; the UB pass runners check no dtype: atc_passes' docstring cites where): keep_dtype on the
    reduce and the sqrt alone restores the output, and switching the pass off changes no value."""
    model, feeds = l2norm_model(tmp_path / "m.onnx"), l2norm_inputs()
    golden = run(model, feeds)[0]
    assert np.all(run(convert(model).model_path, feeds)[0] == 0)  # 700^2 overflows fp16: x / inf
    half = convert(model, keep_dtype=["sum", "sqrt"])  # the sum reads the square's fp16 inf
    assert half.plan["sum"].dtype == "float32" and half.plan["square"].dtype == "float16"
    plan = json.loads((half.out_dir / "precision_plan.json").read_text())
    assert plan["ub_fusion"]["sum"]["intermediates"] == "mixed"  # the square's fp16, the sum's fp32
    step1 = convert(model, keep_dtype=["square", "sum", "sqrt"])
    fused = json.loads((step1.out_dir / "fused_map.json").read_text())
    assert fused["fused"] == {"sum": ["sqrt", "square", "sum"]}
    assert fused["rules"] == {"sum": "TbeReduceElemwiseFusionPass"}
    kept = run(step1.model_path, feeds)[0]
    np.testing.assert_allclose(kept, golden, rtol=2e-3)  # the fp32 norm, divided in fp16
    # the same with the pass off, from ATC's own file format: the same values
    switch = tmp_path / "fusion_switch.cfg"
    switch.write_text('{"Switch":{"GraphFusion":{},"UBFusion":{"TbeReduceElemwiseFusionPass":"off"}}}')
    step2 = convert(model, keep_dtype=["square", "sum", "sqrt"], fusion_switch_file=str(switch))
    assert json.loads((step2.out_dir / "fused_map.json").read_text())["fused"] == {}
    np.testing.assert_array_equal(run(step2.model_path, feeds)[0], kept)
    assert (step2.out_dir / "fusion_switch.cfg").read_text() == switch.read_text()  # unchanged
    assert f"--fusion_switch_file={switch}" in step2.atc_argv


def test_unknown_pass_in_atc_file_is_one_line_error(tmp_path, convert):
    switch = tmp_path / "fusion_switch.cfg"
    switch.write_text("MatMulScaleFusion:off\n")
    with pytest.raises(UserError) as err:
        convert(l2norm_model(tmp_path / "m.onnx"), fusion_switch_file=str(switch))
    assert "MatMulScaleFusion" in str(err.value) and "TbeReduceElemwiseFusionPass" in str(err.value)
    assert "\n" not in str(err.value)


def test_saturation_turns_the_overflow_into_65504(tmp_path, convert):
    model, feeds = l2norm_model(tmp_path / "m.onnx"), l2norm_inputs()
    inf = convert(model, keep_dtype=["square", "sum"], fusion_switch={"TbeReduceElemwiseFusionPass": "off"})
    sat = convert(model, keep_dtype=["square", "sum"], fusion_switch={"TbeReduceElemwiseFusionPass": "off"},
                  overflow_mode="saturation")
    norm_inf = run(inf.model_path, feeds, outputs=None)
    tensors = {}
    for name, result in (("inf", inf), ("sat", sat)):
        m = onnx.load(str(result.model_path))
        for tensor in ("ascendpipe_emu/round/sum_sq", "norm"):  # the sum as sqrt reads it in fp16, sqrt's output
            m.graph.output.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, None))
        onnx.save(m, str(tmp_path / f"{name}.onnx"))
        tensors[name] = run(tmp_path / f"{name}.onnx", feeds)[1:]
    assert np.all(np.isposinf(tensors["inf"][0])) and np.all(np.isposinf(tensors["inf"][1]))  # 1.25e8 in fp16
    assert np.all(tensors["sat"][0] == 65504.0)
    assert np.allclose(tensors["sat"][1], np.sqrt(65504.0), rtol=1e-3)
    assert np.all(norm_inf[0] == 0)
    record = json.loads((sat.out_dir / "convert.json").read_text())
    assert record["overflow_mode"] == "saturation"


def test_overflow_mode_defaults_follow_the_soc():
    assert atc_passes.default_overflow_mode("Ascend310P3") == "saturation"
    assert atc_passes.default_overflow_mode("Ascend910B2") == "inf_nan"
    assert atc_passes.default_overflow_mode("Ascend910A") == "saturation"
    assert atc_passes.default_overflow_mode("Ascend310") == "inf_nan"  # undocumented: the side that shows inf
    assert atc_passes.default_overflow_mode(None) == "inf_nan"


def if_model(path):
    """out = If(flag) then: x * 30000 (overflows fp16 for x > 2.2) else: x."""
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "big"], ["then_out"], name="then_mul")], "then", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(30000.0, np.float32), "big")])
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["else_out"], name="else_id")], "else", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("If", ["flag"], ["y"], name="branch", then_branch=then_graph, else_branch=else_graph),
             helper.make_node("Div", ["y", "big2"], ["out"], name="div")]
    graph = helper.make_graph(
        nodes, "with_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4])],
        initializer=[numpy_helper.from_array(np.array(30000.0, np.float32), "big2")])
    return _save(graph, path)


def test_overflow_inside_an_if_branch_shows(tmp_path, convert):
    model = if_model(tmp_path / "m.onnx")
    feeds = {"x": np.array([3.0, 4.0, 1.0, 0.5], np.float32), "flag": np.array(True)}
    golden = run(model, feeds)[0]
    np.testing.assert_allclose(golden, feeds["x"], rtol=1e-6)
    emulated = run(convert(model).model_path, feeds)[0]
    assert np.all(np.isposinf(emulated[:2])) and np.all(np.isfinite(emulated[2:]))
    kept = run(convert(model, keep_dtype=["then_mul", "div", "branch"]).model_path, feeds)[0]
    np.testing.assert_allclose(kept, feeds["x"], rtol=1e-3)


def test_catalogue_entries_cite_their_page_and_section():
    for entry in atc_passes.CATALOGUE:
        assert entry.kind in ("GraphFusion", "UBFusion")
        if entry.in_reference:  # a documented pass: its page; canndev's ONNX passes: their source file
            assert entry.page.startswith("https://www.hiascend.com/") and entry.effect in ("fold", "ub") and entry.chain
        else:
            assert entry.page.endswith("_fusion_pass.cc") and entry.effect == "kernel" and entry.switchable
    text = json.loads(__import__("ascendpipe.precision.remedy", fromlist=["x"]).format_fusion_switch(
        {"TbeReduceElemwiseFusionPass": "off", "ConvBatchnormFusionPass": "off"}))
    assert text == {"Switch": {"GraphFusion": {"ConvBatchnormFusionPass": "off"},
                               "UBFusion": {"TbeReduceElemwiseFusionPass": "off"}}}


def _conv_bn_model(path):
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([3000.0, 0.5, 2.0, 1.0], np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
             numpy_helper.from_array(np.array([1e-4, 1.0, 2.0, 0.5], np.float32), "var")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["y"], name="bn")]
    graph = helper.make_graph(nodes, "cbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], initializer=inits)
    return _save(graph, path)


def test_conv_bn_folds_in_fp32_then_reads_the_folded_weights_in_fp16(tmp_path, convert):
    from tests.backends.onnxruntime.conftest import r16

    model = _conv_bn_model(tmp_path / "m.onnx")
    result = convert(model)
    emu = onnx.load(str(result.model_path))
    assert [n.op_type for n in emu.graph.node if not n.name.startswith("ascendpipe_emu")] == ["Conv"]
    weights = {i.name: numpy_helper.to_array(i) for i in emu.graph.initializer}
    w = numpy_helper.to_array(onnx.load(str(model)).graph.initializer[0]).astype(np.float64)
    factor = np.array([3000.0, 0.5, 2.0, 1.0]) / np.sqrt(np.array([1e-4, 1.0, 2.0, 0.5]) + 1e-5)
    folded = weights["ascendpipe_emu/fold/conv/W"]
    from tests.precision.ge_fp16 import ge_fp16

    expected = ge_fp16((w * factor.reshape(-1, 1, 1, 1)).astype(np.float32))  # GE's host conversion, bit by bit
    assert np.array_equal(np.isnan(folded), np.isnan(expected))
    np.testing.assert_array_equal(folded[~np.isnan(folded)], expected[~np.isnan(expected)])
    # 3000 / sqrt(1.1e-4) scales weights past 65504: folded in fp32, then converted on the host, where a value
    # past 2^17 becomes +-65504 and one in [65520, 2^17) a NaN (precision.fp16.host_fp16); none becomes inf
    assert not np.isinf(folded).any() and (np.abs(folded[0]) == 65504).any()
    off = convert(model, fusion_switch={"ConvBatchnormFusionPass": "off"})
    assert "bn" in off.plan and json.loads((off.out_dir / "fused_map.json").read_text())["rules"] == {}


def _matmul_bias_model(path):
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["y"], name="bias")]
    graph = helper.make_graph(nodes, "mmb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              initializer=[numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w"),
                                           numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32), "b")])
    return _save(graph, path)


def test_matmul_bias_fuses_only_on_the_socs_the_reference_lists(tmp_path, convert):
    model = _matmul_bias_model(tmp_path / "m.onnx")
    a2 = convert(model, soc_version="Ascend910B2")
    assert json.loads((a2.out_dir / "fused_map.json").read_text())["rules"] == {"mm": "MatMulBiasAddFusionPass"}
    assert a2.plan["mm"].reason and "bias" not in a2.plan
    other = convert(model, soc_version="Ascend310P3")
    assert {"mm", "bias"} <= set(other.plan)  # not listed for Atlas inference products: the rounding stays
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)}
    np.testing.assert_allclose(run(a2.model_path, feeds)[0], run(model, feeds)[0], rtol=2e-2, atol=2e-2)


# --- the catalogue as its pages document it (graphubfusionref page ids in atc_passes.CATALOGUE) ------

def _conv_model(path, *, bias_add=False, conv_bias=False, tail=()):
    """x -> Conv [-> Add(per-channel const)] then the ``tail`` op types (Add reads a second input)."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")]
    conv_inputs = ["x", "w"]
    if conv_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "cb"))
        conv_inputs.append("cb")
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], name="conv", pads=[1, 1, 1, 1])]
    last = "c"
    if bias_add:
        inits.append(numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["c", "b"], ["cb_out"], name="bias"))
        last = "cb_out"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])]
    for i, op in enumerate(tail):
        ins = [last, "skip"] if op == "Add" else [last]
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"{op.lower()}{i}"))
        last = f"t{i}"
    if "Add" in tail:
        inputs.append(helper.make_tensor_value_info("skip", TensorProto.FLOAT, [1, 4, 5, 5]))
    graph = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 4, 5, 5])],
                              initializer=inits)
    return _save(graph, path)


def test_aabiasaddconv_cannot_be_switched_off_as_on_the_device(tmp_path, convert):
    model = _conv_model(tmp_path / "m.onnx", bias_add=True)
    with pytest.raises(UserError) as err:
        convert(model, fusion_switch={"AABiasaddConvFusion": "off"})
    message = str(err.value)
    assert "cannot be switched off" in message and "keep_dtype" in message and "atlasrr_30_0152" in message
    assert "\n" not in message
    # ALL: off "only turns off the rules that can be switched off": the bias still folds
    everything_off = convert(model, fusion_switch={"ALL": "off"})
    assert everything_off.fusion["passes"] == {"AABiasaddConvFusion": 1} and "bias" not in everything_off.plan
    # "if the Conv operator already has Bias, fusion is not supported"
    with_bias = convert(_conv_model(tmp_path / "b.onnx", bias_add=True, conv_bias=True))
    assert with_bias.fusion["passes"] == {} and "bias" in with_bias.plan
    # A3 is not in its availability list
    assert convert(model, soc_version="Ascend910_9391").fusion["passes"] == {}


def test_conv_batchnorm_is_not_folded_on_atlas_a2_a3(tmp_path, convert):
    model = _conv_bn_model(tmp_path / "m.onnx")
    assert convert(model, soc_version="Ascend310P3").fusion["passes"] == {"ConvBatchnormFusionPass": 1}
    for soc in ("Ascend910B2", "Ascend910_9391"):
        result = convert(model, soc_version=soc)
        assert result.fusion["passes"] == {} and "bn" in result.plan


def test_conv_with_two_elementwise_ops_is_tbeconvdoublein_and_conv_relu_is_not_fused(tmp_path, convert):
    double = convert(_conv_model(tmp_path / "d.onnx", tail=("Add", "Relu")), soc_version="Ascend310P3")
    fused = json.loads((double.out_dir / "fused_map.json").read_text())
    assert fused["fused"] == {"conv": ["add0", "conv", "relu1"]}
    assert fused["rules"] == {"conv": "TbeConvDoubleInFusionPass"}
    assert convert(_conv_model(tmp_path / "d.onnx", tail=("Add", "Relu")), soc_version="Ascend910B2").fusion["passes"] == {}
    single = convert(_conv_model(tmp_path / "s.onnx", tail=("Relu",)), soc_version="Ascend310P3")
    assert single.fusion["passes"] == {}  # AutomaticUbFusion fuses leftover elementwise ops, not a conv


def test_reduce_elemwise_fuses_static_shapes_only_its_dynamic_twin_the_rest(tmp_path, convert):
    from ascendpipe.backends.onnxruntime import fusion

    model = l2norm_model(tmp_path / "m.onnx")
    static = convert(model, input_shape="features:2,256")
    assert static.fusion["passes"] == {"TbeReduceElemwiseFusionPass": 1} and static.fusion["dynamic_shape"] is False
    dynamic = convert(model, input_shape="features:-1,256")
    assert dynamic.fusion["dynamic_shape"] is True
    assert dynamic.fusion["passes"] == {"TbeDynamicElemwiseReduceFusionPass": 1}
    rules = json.loads((dynamic.out_dir / "fused_map.json").read_text())["rules"]
    assert rules == {"sum": "TbeDynamicElemwiseReduceFusionPass"}
    # the symbolic batch axis without input_shape: atc requires one, the pipeline gives a static one
    assert fusion.dynamic_shape(onnx.load(str(model))) is False
    assert fusion.dynamic_shape(onnx.load(str(model)), input_shape_range="features:[1~8],256") is True


def test_not_modelled_passes_sit_in_their_own_section_with_a_page():
    from ascendpipe.precision.remedy import format_fusion_switch

    assert atc_passes.section_of("TbeFullyconnectionElemwiseDequantFusionPass") == "UBFusion"
    assert atc_passes.section_of("AutomaticUbFusion") == "UBFusion"
    assert atc_passes.section_of("SoftmaxFusionPass") == "GraphFusion"
    assert json.loads(format_fusion_switch({"AutomaticUbFusion": "off"}))["Switch"]["UBFusion"] == {"AutomaticUbFusion": "off"}
    assert "AutomaticUbFusion" not in atc_passes.BY_NAME and "AutomaticUbFusion" in atc_passes.known_names()
    # the one the reference says "cannot be disabled"; canndev's ONNX passes switch off as GE honours any registered
    # pass outside ForbiddenClosedPass (test_graph_fusions.py)
    assert [p.name for p in atc_passes.CATALOGUE if not p.switchable] == ["AABiasaddConvFusion"]
    assert {p.name: p.shapes for p in atc_passes.CATALOGUE if p.shapes != "any"} == {
        "AABiasaddConvFusion": "static", "TbeConv3dElemwisePass": "static",
        "TbeReduceElemwiseFusionPass": "static", "TbeDynamicElemwiseReduceFusionPass": "dynamic"}
