import json

from ascendpipe.compare import advisor


def _row(i, op, op_type="Mul", *, failed=False, overflow=None, peak=1.0, fused=False, ops=None, out=False):
    return {"index": i, "op_name": op, "op_type": op_type, "tensor": op + "_out", "golden_ops": ops or [op],
            "golden_op": (ops or [op])[-1], "golden_op_type": op_type, "failed": failed, "overflow": overflow,
            "golden_abs_max": peak, "fused": fused, "is_output": out, "side": "both",
            "reasons": ["CosineSimilarity 0.5 < 0.99"] if failed else []}


def test_overflow_keeps_the_producer_beyond_fp16_and_the_consumer_reading_the_overflowed_value():
    rows = [_row(0, "square", peak=4.9e5, overflow="fp16_range"), _row(1, "sum", "ReduceSum", failed=True,
            overflow="target", peak=1.25e8), _row(2, "sqrt", "Sqrt", failed=True, peak=1.1e4),
            _row(3, "div", "Div", failed=True, peak=0.1, out=True)]
    producers = {"square": [], "sum": ["square"], "sqrt": ["sum"], "div": ["sqrt"]}
    first = advisor.describe_failure(rows, 1, producers=producers, stage="convert")
    assert first["kind"] == "overflow" and first["op_name"] == "sum"
    item = first["advice"][0]
    # sqrt reads 1.25e8 (beyond 65504) and is kept; div reads sqrt's 1.1e4 (in range): the walk stops
    assert item["ops"] == ["square", "sum", "sqrt"]
    assert item["file"] == {"name": "keep_dtype.cfg", "content": "square\nsum\nsqrt\n"}
    assert item["set"] == "--set 'stages.convert.params.keep_dtype=[square,sum,sqrt]'"
    assert item["yaml"] == ("stages:\n  convert:\n    params:\n      keep_dtype:\n        - square\n        - sum\n"
                            "        - sqrt\n")


def test_overflow_chain_walks_forward_while_golden_values_stay_beyond_fp16():
    # a -> big (overflows) -> b (reads big, still beyond) -> c (reads b) -> d (reads c, in range)
    # plus a side consumer e of 'a' that is never touched (a is in range)
    peaks = {"a": 10.0, "big": 1e6, "b": 2e5, "c": 3.0, "d": 1.0, "e": 1.0}
    rows = [_row(i, op, peak=p, failed=op == "big", overflow="target" if op == "big" else None)
            for i, (op, p) in enumerate(peaks.items())]
    producers = {"a": [], "big": ["a"], "b": ["big"], "c": ["b"], "d": ["c"], "e": ["a"]}
    up, ops, down = advisor.overflow_chain(rows, 1, producers)
    assert (up, ops, down) == ([], ["big"], ["b", "c"])


def _norm_chain():
    """An L2 norm: x*x -> ReduceSum (overflows) -> Sqrt -> Div (the output): its rows and producers."""
    rows = [_row(0, "/Mul_1", peak=3e4), _row(1, "/ReduceSum", "ReduceSum", failed=True, overflow="target", peak=3e5),
            _row(2, "/Sqrt", "Sqrt", failed=True, peak=550.0), _row(3, "/Div", "Div", failed=True, out=True)]
    producers = {"/Mul_1": [], "/ReduceSum": ["/Mul_1"], "/Sqrt": ["/ReduceSum"], "/Div": ["/Sqrt"]}
    return rows, producers


def test_matrix_variant_target_gets_matrix_paste_lines_and_keeps_existing_entries():
    rows, producers = _norm_chain()
    first = advisor.describe_failure(rows, 1, producers=producers, stage="convert@fp16",
                                     target_settings={"keep_dtype": ["/Conv"]})
    item = first["advice"][0]
    assert item["ops"] == ["/Conv", "/ReduceSum", "/Sqrt"] and item["added"] == ["/ReduceSum", "/Sqrt"]
    assert item["set"] == "--set 'stages.convert.matrix.fp16.keep_dtype=[/Conv,/ReduceSum,/Sqrt]'"
    assert item["yaml"].startswith("stages:\n  convert:\n    matrix:\n      fp16:\n        keep_dtype:\n")


def test_overflow_without_an_overflowed_input_keeps_only_the_op():
    rows = [_row(0, "branch0", peak=3e4), _row(1, "sum", "Sum", failed=True, overflow="target", peak=7.5e4, out=True)]
    first = advisor.describe_failure(rows, 1, producers={"sum": ["branch0"]})
    assert first["advice"][0]["ops"] == ["sum"]


def test_fused_op_failing_with_passing_inputs_switches_its_rule_off():
    rows = [_row(0, "conv", "Conv"), _row(1, "bn", "BatchNormalization"),
            _row(2, "F", "FusedConv", failed=True, fused=True, ops=["bn", "conv", "relu"], out=True)]
    rows[0]["side"] = rows[1]["side"] = "golden_only"
    first = advisor.describe_failure(rows, 2)
    item = first["advice"][0]
    assert first["kind"] == "fusion" and item["kind"] == "fusion_switch"
    assert item["rules"] == ["ConvBatchnormFusionPass"]  # the ATC name, from the catalogue's patterns
    # ATC's JSON form, the pass in its catalogue section: the file fix and convert write too
    assert json.loads(item["file"]["content"]) == {"Switch": {"GraphFusion": {"ConvBatchnormFusionPass": "off"},
                                                              "UBFusion": {}}}
    assert item["set"] == "--set 'stages.convert.params.fusion_switch={ConvBatchnormFusionPass: \"off\"}'"
    named = advisor.describe_failure(rows, 2, fusion_rules={"F": "ConvBatchnormFusionPass"})
    assert named["advice"][0]["rules"] == ["ConvBatchnormFusionPass"]


def test_loss_without_overflow_offers_keep_dtype_or_allow_fp32_to_fp16():
    rows = [_row(0, "a"), _row(1, "softmax", "Softmax", failed=True), _row(2, "out", "Add", failed=True, out=True)]
    first = advisor.describe_failure(rows, 1)
    kinds = [a["kind"] for a in first["advice"]]
    assert first["kind"] == "precision_loss" and kinds == ["keep_dtype", "precision_mode"]
    assert first["advice"][0]["file"]["content"] == "softmax\n"
    assert first["advice"][1]["set"] == "--set stages.convert.params.precision_mode=allow_fp32_to_fp16"
    assert first["advice"][0]["set"] == "--set 'stages.convert.params.keep_dtype=[softmax]'"


def test_underflow_keeps_the_later_underflowing_ops_too():
    rows = [_row(0, "square", failed=True, peak=9e-9), _row(1, "var", "ReduceMean", failed=True, peak=5e-9),
            _row(2, "div", "Div", failed=True, out=True)]
    first = advisor.describe_failure(rows, 0)
    assert first["advice"][0]["ops"] == ["square", "var"] and "underflows" in first["advice"][0]["message"]


def test_single_bad_op_near_the_output_while_outputs_pass_is_likely_harmless():
    rows = [_row(0, "a"), _row(1, "transpose", "Transpose", failed=True), _row(2, "out", "Add", out=True)]
    first = advisor.describe_failure(rows, 1)
    assert first["kind"] == "harmless" and "likely harmless" in first["advice"][0]["message"]


def test_an_op_the_plan_already_keeps_in_fp32_gets_implementation_advice():
    rows = [_row(0, "a"), _row(1, "exp", "Exp", failed=True), _row(2, "out", "Add", failed=True, out=True)]
    plan = {"nodes": {"exp": {"op_type": "Exp", "dtype": "float32", "reason": "keep_dtype"}}}
    first = advisor.describe_failure(rows, 1, precision_plan=plan, convert_params={"precision_mode", "keep_dtype"})
    assert first["advice"][0]["kind"] == "implementation"
    # a convert kind without an op_select_implmode param: no paste line for it
    assert "set" not in first["advice"][0] and "op_select_implmode" not in first["advice"][0]["message"]
    from ascendpipe.stages.convert import ConvertKind

    assert advisor._convert_params() == set(ConvertKind.params_schema["properties"])
    with_param = advisor.describe_failure(rows, 1, precision_plan=plan, convert_params={"op_select_implmode"})
    assert with_param["advice"][0]["set"] == "--set stages.convert.params.op_select_implmode=high_precision"


def test_fusion_advice_carries_the_rules_already_switched_for_the_variant():
    rows = [_row(0, "conv", "Conv"), _row(1, "bn", "BatchNormalization"),
            _row(2, "F", "FusedConv", failed=True, fused=True, ops=["conv", "bn"], out=True)]
    rows[0]["side"] = rows[1]["side"] = "golden_only"
    first = advisor.describe_failure(rows, 2, stage="convert@fp16", target_settings={"fusion_switch": {"GeluFusionPass": "off"}})
    item = first["advice"][0]
    assert item["rules"] == ["ConvBatchnormFusionPass"]
    assert json.loads(item["file"]["content"])["Switch"]["GraphFusion"] == {"GeluFusionPass": "off",
                                                                           "ConvBatchnormFusionPass": "off"}
    assert item["set"] == "--set 'stages.convert.matrix.fp16.fusion_switch={GeluFusionPass: \"off\", ConvBatchnormFusionPass: \"off\"}'"


def test_a_pass_the_device_cannot_switch_off_is_never_advised_keep_dtype_instead():
    rows = [_row(0, "conv", "Conv"), _row(1, "bias", "Add"),
            _row(2, "F", "Conv", failed=True, fused=True, ops=["conv", "bias"], out=True)]
    rows[0]["side"] = rows[1]["side"] = "golden_only"
    for rules in ({"F": "AABiasaddConvFusion"}, None):  # named by the OM / fused map, or guessed from the op types
        first = advisor.describe_failure(rows, 2, fusion_rules=rules, stage="convert@fp16",
                                         target_settings={"keep_dtype": ["/head"]})
        assert [a["kind"] for a in first["advice"]] == ["keep_dtype"]
        item = first["advice"][0]
        assert item["ops"] == ["/head", "conv", "bias"] and item["added"] == ["conv", "bias"]
        assert "AABiasaddConvFusion" in item["message"] and "cannot switch off" in item["message"]
    # a fold of a switchable and an unswitchable pass: only the switchable one is proposed
    mixed = advisor.describe_failure(rows, 2, fusion_rules={"F": "AABiasaddConvFusion+ConvBatchnormFusionPass"})
    item = next(a for a in mixed["advice"] if a["kind"] == "fusion_switch")
    assert item["rules"] == ["ConvBatchnormFusionPass"]
    assert "'AABiasaddConvFusion' cannot be switched off" in item["message"]
    assert json.loads(item["file"]["content"])["Switch"] == {"GraphFusion": {"ConvBatchnormFusionPass": "off"},
                                                             "UBFusion": {}}
    # a UB fusion is never proposed: its members keep their own dtypes, its switch changes no value
    ub = advisor.describe_failure(rows, 2, fusion_rules={"F": "AABiasaddConvFusion+TbeConvDoubleInFusionPass"})
    assert [a["kind"] for a in ub["advice"]] == ["keep_dtype"]


# --- integers and bools are not fp16 values; the mode in use is not advised ---------------------------


def test_an_int32_accumulator_beyond_65504_is_no_fp16_overflow(tmp_path):
    import numpy as np

    from ascendpipe.compare.runner import compare_dumps
    from tests.compare.dumps import write_dump

    acc = np.array([70000, 120000, 5], np.int32)  # e.g. a ReduceSum over int32 indices
    square = np.array([3e5, 4e5], np.float32)
    golden = write_dump(tmp_path / "g", [("acc", "/Sum", "ReduceSum", acc), ("sq", "/Mul", "Mul", square)])
    target = write_dump(tmp_path / "t", [("acc", "/Sum", "ReduceSum", acc),
                                         ("sq", "/Mul", "Mul", np.full(2, np.inf, np.float16))])
    result = compare_dumps(golden, target)
    by_op = {r["op_name"]: r for r in result["rows"]}
    assert by_op["/Sum"]["overflow"] is None and by_op["/Sum"]["golden_abs_max"] is None
    assert not by_op["/Sum"]["float_tensor"] and by_op["/Mul"]["overflow"] == "target"
    # without a graph adjacent rows stand for producers: the int accumulator is not pulled into keep_dtype
    assert result["first_failure"]["advice"][0]["ops"] == ["/Mul"]


def test_a_failing_integer_op_gets_no_keep_dtype_and_no_precision_mode():
    rows = [_row(0, "/ArgMax", "ArgMax", failed=True, out=True)]
    rows[0].update(float_tensor=False, dtype="int64")
    first = advisor.describe_failure(rows, 0, producers={"/ArgMax": []}, convert_params={"keep_dtype", "precision_mode"})
    assert [item["kind"] for item in first["advice"]] == ["implementation"]
    assert "int64" in first["advice"][0]["message"]
    rows[0].update(float_tensor=True, dtype="float16")  # the same op as a float: keep_dtype, then the mode
    kinds = [i["kind"] for i in advisor.describe_failure(rows, 0, producers={"/ArgMax": []},
                                                         convert_params={"keep_dtype", "precision_mode"})["advice"]]
    assert kinds == ["keep_dtype", "precision_mode"]


def test_non_float_ops_in_an_overflow_chain_are_not_kept():
    rows = [_row(0, "/Shape", "Shape", peak=None), _row(1, "/Sum", "ReduceSum", failed=True, overflow="target", peak=3e5),
            _row(2, "/Cast", "Cast", failed=True, peak=None)]
    rows[0]["float_tensor"] = rows[2]["float_tensor"] = False
    rows[1]["float_tensor"] = True
    producers = {"/Shape": [], "/Sum": ["/Shape"], "/Cast": ["/Sum"]}
    item = advisor.describe_failure(rows, 1, producers=producers)["advice"][0]
    assert item["ops"] == ["/Sum"]  # /Cast reads 3e5 but outputs integers: nothing of it is fp16
    plan = {"nodes": {"/Cast": {"op_type": "Cast", "dtype": "other"}}}
    rows[2].pop("float_tensor")
    assert advisor.describe_failure(rows, 1, producers=producers, precision_plan=plan)["advice"][0]["ops"] == ["/Sum"]


def test_the_precision_mode_in_use_is_never_advised():
    rows = [_row(0, "/Conv", "Conv", failed=True, out=True)]
    known = {"keep_dtype", "precision_mode"}
    for settings in ({"precision_mode": "allow_fp32_to_fp16"}, None):
        plan = None if settings else {"precision_mode": "allow_fp32_to_fp16", "nodes": {}}
        kinds = [i["kind"] for i in advisor.describe_failure(rows, 0, target_settings=settings, precision_plan=plan,
                                                             convert_params=known)["advice"]]
        assert kinds == ["keep_dtype"]
    kinds = [i["kind"] for i in advisor.describe_failure(rows, 0, target_settings={"precision_mode": "force_fp16"},
                                                         convert_params=known)["advice"]]
    assert kinds == ["keep_dtype", "precision_mode"]


def test_an_op_the_stage_already_keeps_is_never_listed_as_added():
    rows, producers = _norm_chain()
    first = advisor.describe_failure(rows, 1, producers=producers, stage="convert",
                                     target_settings={"keep_dtype": ["/ReduceSum"]})
    item = first["advice"][0]
    assert item["ops"] == ["/ReduceSum", "/Sqrt"] and item["added"] == ["/Sqrt"]
