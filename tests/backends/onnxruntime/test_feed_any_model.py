"""Feed what the model takes, emulate every op: 0-d, string, stateful (batch on axis 1), sequence
and ai.onnx.ml models through the standalone convert + infer (the CLI's own entry)."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ascendpipe.cli.main import main


def save(tmp_path, nodes, inputs, outputs, name="m", opsets=(("", 17),), inits=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def infer(tmp_path, model, feeds=None, *extra, mode="force_fp16", convert=True, convert_args=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if convert:
        assert main(["convert", "--model", str(model), "--output", str(tmp_path / "conv"), "--precision-mode", mode,
                     *convert_args]) == 0
        model = tmp_path / "conv"
    argv = ["infer", "--model", str(model), "--output", str(tmp_path / "out"), "--warmup", "0", *extra]
    if feeds is not None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        np.savez(tmp_path / "feeds.npz", **feeds)
        argv += ["--input", str(tmp_path / "feeds.npz")]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    return {name: np.load(tmp_path / "out" / entry["file"]) for name, entry in summary["outputs"].items()}, summary


def seq_info(name):
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [None, 3])))


def r16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def test_zero_d_inputs_stay_zero_d_and_outputs_keep_the_models_shapes(tmp_path):
    f, i = TensorProto.FLOAT, TensorProto.INT64
    model = save(tmp_path, [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
                            helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0)],
                 [helper.make_tensor_value_info("start", i, []), helper.make_tensor_value_info("limit", i, []),
                  helper.make_tensor_value_info("delta", i, []), helper.make_tensor_value_info("x", f, [3, 4])],
                 [helper.make_tensor_value_info("r", i, ["n"]), helper.make_tensor_value_info("total", f, [4])],
                 inits=[helper.make_tensor("axes", i, [1], [0])])
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    out, summary = infer(tmp_path, model, {"start": np.array(2), "limit": np.array(9), "delta": np.array(3), "x": x})
    np.testing.assert_array_equal(out["r"], [2, 5, 8])  # a 0-d limit fed as [1] made Range fail or [1]-shaped
    assert out["total"].shape == (4,)  # no leading axis of 1: the output has no batch
    # no SoC given: Ascend310's ReduceSumD, which accumulates in fp16 (precision/kernels.py), by halves:
    # the 3 rows padded to 4, (x0 + x2) and (x1 + 0) rounded, then their sum rounded
    x16 = r16(x)
    np.testing.assert_array_equal(out["total"], r16(r16(x16[0] + x16[2]) + r16(x16[1])))
    assert summary["batches"] == 1


def test_string_input_from_numpy_unicode(tmp_path):
    s = TensorProto.STRING
    model = save(tmp_path, [helper.make_node("StringConcat", ["text", "text"], ["twice"])],
                 [helper.make_tensor_value_info("text", s, ["N"])], [helper.make_tensor_value_info("twice", s, ["N"])],
                 opsets=(("", 20),))
    out, _ = infer(tmp_path, model, {"text": np.array(["AbC", "dE"])})
    assert out["twice"].tolist() == ["AbCAbC", "dEdE"] and out["twice"].dtype.kind == "U"


def test_stateful_model_with_its_batch_on_axis_1_runs_standalone(tmp_path, capsys):
    f = TensorProto.FLOAT
    model = save(tmp_path, [helper.make_node("Add", ["x", "state"], ["y"]),
                            helper.make_node("Mul", ["state", "two"], ["next_state"])],
                 [helper.make_tensor_value_info("x", f, ["B", 4]), helper.make_tensor_value_info("state", f, [2, "S", 4])],
                 [helper.make_tensor_value_info("y", f, [2, "B", 4]), helper.make_tensor_value_info("next_state", f, [2, "S", 4])],
                 inits=[helper.make_tensor("two", f, [], [2.0])])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((5, 4)).astype(np.float32), "state": rng.standard_normal((2, 5, 4)).astype(np.float32)}
    whole, summary = infer(tmp_path / "whole", model, feeds, convert=False)  # as given: one run
    assert summary["batches"] == 1 and whole["y"].shape == (2, 5, 4)
    np.savez(tmp_path / "feeds.npz", **feeds)
    argv = ["infer", "--model", str(model), "--input", str(tmp_path / "feeds.npz"), "--output", str(tmp_path / "o"),
            "--batch-size", "2"]
    assert main(argv) == 2  # batches asked, but the samples' axis of 'state' is not said
    assert "--batch-axes state=1" in capsys.readouterr().err
    split, summary = infer(tmp_path / "split", model, feeds, "--batch-size", "2", "--batch-axes", "state=1", convert=False)
    assert summary["batches"] == 3
    for name in ("y", "next_state"):
        np.testing.assert_array_equal(split[name], whole[name])


def test_a_sequence_producing_if_under_force_fp16_loads_and_rounds_its_elements(tmp_path):
    f, b = TensorProto.FLOAT, TensorProto.BOOL
    then = helper.make_graph([helper.make_node("Exp", ["x"], ["ex"]), helper.make_node("SequenceConstruct", ["ex", "x"], ["s1"])],
                             "then", [], [seq_info("s1")])
    other = helper.make_graph([helper.make_node("SplitToSequence", ["x"], ["s2"], axis=0, keepdims=1)],
                              "else", [], [seq_info("s2")])
    model = save(tmp_path, [helper.make_node("If", ["cond"], ["seq"], then_branch=then, else_branch=other),
                            helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
                 [helper.make_tensor_value_info("cond", b, []), helper.make_tensor_value_info("x", f, [2, 3])],
                 [helper.make_tensor_value_info("y", f, [None, 3])])
    x = (np.arange(6, dtype=np.float32).reshape(2, 3) + 0.1) / 3
    out, _ = infer(tmp_path / "t", model, {"cond": np.array(True), "x": x})
    np.testing.assert_array_equal(out["y"], np.concatenate([r16(np.exp(r16(x))), r16(x)]))
    plan = json.loads((tmp_path / "t" / "conv" / "precision_plan.json").read_text())
    assert any(entry["type"] == "seq(tensor(float))" for entry in plan["not_rounded"].values())
    out, _ = infer(tmp_path / "e", model, {"cond": np.array(False), "x": x})
    np.testing.assert_array_equal(out["y"], r16(x))


def test_an_all_ai_onnx_ml_model_gets_the_casts_opset(tmp_path, capsys):
    f = TensorProto.FLOAT
    model = save(tmp_path, [helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=1.0)],
                 [helper.make_tensor_value_info("x", f, [4])], [helper.make_tensor_value_info("y", f, [4])],
                 opsets=(("ai.onnx.ml", 1),))
    x = np.array([0.5, 1.0001, 2.0, -3.0], np.float32)
    # ATC documents ai.onnx ops only: refused unless emulated anyway
    assert main(["convert", "--model", str(model), "--output", str(tmp_path / "refused")]) == 2
    assert "ai.onnx.ml.Binarizer at 'Binarizer_0'" in capsys.readouterr().err
    out, _ = infer(tmp_path, model, {"x": x}, convert_args=("--allow-custom-ops",))
    np.testing.assert_array_equal(out["y"], (r16(x) > 1.0).astype(np.float32))
    converted = onnx.load(str(tmp_path / "conv" / "model.onnx"))
    assert {o.domain for o in converted.opset_import} >= {"", "ai.onnx.ml"}


def test_a_converted_model_that_does_not_load_names_the_op_not_a_temp_file(tmp_path):
    from ascendpipe.backends.onnxruntime.convert import check_loads
    from ascendpipe.errors import UserError

    f = TensorProto.FLOAT
    nodes = [helper.make_node("SplitToSequence", ["x"], ["ascendpipe_emu/raw/seq"], name="split"),
             helper.make_node("Cast", ["ascendpipe_emu/raw/seq"], ["h"], name="ascendpipe_emu/out_fp16/seq", to=10),
             helper.make_node("Cast", ["h"], ["seq"], name="ascendpipe_emu/out_fp32/seq", to=1)]
    graph = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", f, [2])],
                              [seq_info("seq")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / ".tmp-model.onnx.abc.tmp"
    onnx.save(model, str(path))
    with pytest.raises(UserError) as err:
        check_loads(str(path), {"seq": {"op_name": "split", "op_type": "SplitToSequence"}})
    text = str(err.value)
    assert "split" in text and str(path) not in text and ".tmp" not in text and "\n" not in text


def test_compare_of_an_npy_whose_header_claims_terabytes_is_one_located_line(tmp_path, capsys):
    import numpy.lib.format as fmt

    f = TensorProto.FLOAT
    model = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", f, ["N", 3])],
                 [helper.make_tensor_value_info("y", f, ["N", 3])])
    assert main(["convert", "--model", str(model), "--output", str(tmp_path / "conv")]) == 0
    bad = tmp_path / "x.npy"
    with open(bad, "wb") as fh:
        fmt.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40, 3, 64, 64)})
        fh.write(b"\0" * 16)
    capsys.readouterr()
    assert main(["compare", "--golden", str(model), "--target", str(tmp_path / "conv"), "--input", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "damaged or truncated" in err and "PiB" in err


def test_batch_axes_option_is_name_equals_axis(capsys):
    from ascendpipe.cli.common import batch_axis_item

    assert batch_axis_item("state=1") == ("state", 1) and batch_axis_item("sr=none") == ("sr", None)
    assert batch_axis_item("a=b=2") == ("a=b", 2)
    for command in ("infer", "dump", "compare", "profile", "fix"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--batch-axes", "state", "--model", "m", "--golden", "m", "--target", "t", "--output", "o"])
        assert exit_.value.code == 2
        assert "expected NAME=AXIS" in capsys.readouterr().err
