"""Issue 49 item 5: compare's words and numbers follow the target's overflow mode, a mask's fill is no
cause, and a compare of the two dumps names the same first failure as the compare of the model.

The models are the plain-torch transformer blocks of tests/fix/transformer_models.py (weights seeded,
scaled past fp16's range where each family breaks); each fact the test relies on is checked on the
emulated model's own outputs with numpy."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pytest

from tests.fix import transformer_models as tm

SATURATION_SOC = "Ascend310B1"  # Atlas 200I/500 A2: saturation is its only mode (docs/emulation.md)


def _run(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


def _convert(model, out, **params):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    return convert_model(model, out, resolve({"precision_mode": "force_fp16", **params})).model_path


def _compare(golden, target, tmp_path, feeds, work):
    from ascendpipe.backends.compare_sources import run_compare
    from ascendpipe.compare import thresholds as thr

    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    result, _ = run_compare(golden, target, input_path=inputs, work_dir=tmp_path / work, limits=thr.resolve())
    return result


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """BERT's layer with query/key scaled (scores ~2e5) and an additive mask of float32's lowest over
    two padded positions, converted for a saturation SoC and for the default (inf_nan) one."""
    root = tmp_path_factory.mktemp("bert")
    model = tm.build("bert", root / "bert.onnx", scaled=True)
    feeds = tm.inputs("bert")
    assert (feeds["attention_mask"] == 0).sum() == 2  # two padded positions: the mask fills them
    saturation = _convert(model, root / "sat", soc_version=SATURATION_SOC)
    inf_nan = _convert(model, root / "inf")
    return root, model, feeds, saturation, inf_nan


def test_saturation_words_say_what_the_chip_stores(bert, tmp_path):
    from ascendpipe.compare.writers import terminal_text

    _, model, feeds, saturation, _ = bert
    out = _run(saturation, feeds)[0]
    assert np.isfinite(out).all()  # saturation: the chip never holds inf
    result = _compare(model, saturation.parent, tmp_path, feeds, "w")
    assert result["overflow_mode"] == "saturation"
    first = result["first_failure"]
    assert (first["op_name"], first["mechanism"]) == ("/MatMul", "overflow")
    words = " ".join([result["verdict"], first["reason"]] + [a["message"] for a in first["advice"]])
    assert "±65504" in words and "saturation mode" in words
    assert "become inf" not in words and "±inf" not in words and "inf/NaN" not in words
    assert "it holds ±65504" in first["reason"]
    text = terminal_text(result)
    assert "become inf" not in text and "is ±inf in fp16" not in text


def test_inf_nan_words_and_the_mask_that_really_breaks(bert, tmp_path):
    _, model, feeds, _, inf_nan = bert
    assert np.isnan(_run(inf_nan, feeds)[0]).any()  # 0 x -inf: the mask's NaN reaches the output
    result = _compare(model, inf_nan.parent, tmp_path, feeds, "w")
    first = result["first_failure"]
    assert "become ±inf" in first["advice"][0]["message"] and "saturation" not in result["verdict"]
    # the mask's constant (float32's lowest) is converted to fp16 on the host at compile time, which saturates it
    # to -65504 in every overflow mode (GE fp16_t.cc, precision/host_fp16.py): 0 x -65504 is 0, no NaN, so the
    # mask is no cause of its own here either; the NaN comes from the scores' overflow
    assert "/Mul" not in [o["op_name"] for o in first["also_failing"]]


def test_a_contained_mask_is_no_cause_where_fix_never_needs_it(bert, tmp_path):
    root, model, feeds, saturation, _ = bert
    result = _compare(model, saturation.parent, tmp_path, feeds, "w")
    first = result["first_failure"]
    assert first["also_failing"] == [] and first["restores"] is None
    mask = next(r for r in result["rows"] if r["op_name"] == "/Mul")
    assert mask["fill"]["count"] == 2 and mask["fill"]["stored_as"] == -65504.0
    assert mask["mechanism"] == "saturated_mask" and mask["reaches_output"] is False
    assert "absorbs it" in mask["contained"] and "-65504" in mask["contained"]
    assert "/Mul" in {c["op_name"] for c in result["contained"]}
    assert "/Mul" not in first["advice"][0]["ops"]
    # the advice alone (the mask left in fp16) restores the outputs: fix never needs the mask
    kept = _convert(model, root / "kept", soc_version=SATURATION_SOC, keep_dtype=first["advice"][0]["ops"])
    golden = _run(model, feeds)[0].astype(np.float64).ravel()
    fixed = _run(kept, feeds)[0].astype(np.float64).ravel()
    assert golden @ fixed / (np.linalg.norm(golden) * np.linalg.norm(fixed)) > 0.999
    assert _compare(model, kept.parent, tmp_path, feeds, "w2")["verdict"].startswith("every output passes")


def test_printed_numbers_are_finite_or_na_and_the_csv_keeps_msaccucmp(bert, tmp_path):
    from ascendpipe.compare.writers import csv_text, terminal_text

    _, model, feeds, saturation, inf_nan = bert
    for target in (saturation, inf_nan):
        result = _compare(model, target.parent, tmp_path, feeds, f"w{target.parent.name}")
        table = [line for line in terminal_text(result, worst=100).splitlines() if re.match(r"\s+\d+\s", line)]
        assert table and not any(re.search(r"\b(inf|nan|NaN)\b", line) for line in table)
    # the mask row on the saturation SoC: msaccucmp's float32 sums overflow (rmse inf, cosine 0); both
    # tensors are finite, so the printed numbers are the float64 ones: cosine 1 (same positions, same sign)
    result = _compare(model, saturation.parent, tmp_path, feeds, "w3")
    line = next(x for x in terminal_text(result, worst=100).splitlines() if " /Mul " in x)
    cosine, _, rmse = line.split()[3:6]
    assert float(cosine) == 1.0 and np.isfinite(float(rmse))
    cells = next(r for r in csv.DictReader(io.StringIO(csv_text(result))) if r["NPUDump"] == "/Mul")
    assert cells["RootMeanSquareError"] == "inf"  # msit's format: msaccucmp's own cell, unchanged


def _tiny_scale_model(path):
    """y = ((x * 1e-5) * 1e-4) * 1e8: the middle tensor (~1e-9) is below fp16's smallest subnormal (6e-8)."""
    from onnx import TensorProto, helper, save

    nodes = [helper.make_node("Mul", ["x", "a"], ["small"], name="small"),
             helper.make_node("Mul", ["small", "b"], ["tiny"], name="tiny"),
             helper.make_node("Mul", ["tiny", "c"], ["y"], name="back")]
    consts = [helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in (("a", 1e-5), ("b", 1e-4), ("c", 1e8))]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], initializer=consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    save(model, str(path))
    return path


def test_an_underflow_row_prints_no_cosine_nan(tmp_path):
    from ascendpipe.compare.writers import csv_text, terminal_text

    model = _tiny_scale_model(tmp_path / "m.onnx")
    feeds = {"x": np.random.default_rng(0).uniform(0.5, 1.0, (1, 64)).astype(np.float32)}
    converted = _convert(model, tmp_path / "conv", soc_version=SATURATION_SOC)
    assert not _run(converted, feeds)[0].any()  # the tiny values flushed to 0, and so the output
    result = _compare(model, converted.parent, tmp_path, feeds, "w")
    tiny = next(r for r in result["rows"] if r["op_name"] == "tiny")
    assert tiny["mechanism"] == "underflow" and tiny["target_abs_max"] == 0 and tiny["golden_abs_max"] > 0
    text = terminal_text(result, worst=100)
    line = next(x for x in text.splitlines() if re.match(rf"\s+{tiny['index']}\s+tiny\s", x))
    cosine, max_rel, rmse = line.split()[3:6]
    assert cosine == "n/a"  # the angle to an all-zero tensor does not exist (msaccucmp: NaN)
    assert float(rmse) == pytest.approx(float(np.sqrt(np.mean((feeds["x"].astype(np.float64) * 1e-9) ** 2))), rel=1e-3)
    assert not re.search(r"\b(nan|NaN|inf)\b", text.split("first failure")[0])
    cells = next(r for r in csv.DictReader(io.StringIO(csv_text(result))) if r["NPUDump"] == "tiny")
    assert cells["CosineSimilarity"] == "NaN"  # msaccucmp's own cell in msit's CSV, unchanged


def test_a_flushed_epsilon_on_a_saturation_soc_is_said_saturated_not_inf(tmp_path):
    from tests.compare import mechanism_models as mm

    from ascendpipe.compare.writers import terminal_text

    model = mm.log_eps_model(tmp_path / "m.onnx")
    feeds = mm.log_eps_inputs(0)
    converted = _convert(model, tmp_path / "conv", soc_version=SATURATION_SOC)
    assert np.isfinite(_run(converted, feeds)[0]).all()  # Log(0) = -inf is stored as -65504
    result = _compare(model, converted.parent, tmp_path, feeds, "w")
    first = result["first_failure"]
    assert (first["op_name"], first["mechanism"]) == ("log", "underflow")
    assert first["reason"].startswith("target is ±65504 (saturated) where the golden is finite")
    assert "stores as ±65504" in first["advice"][0]["message"]
    table = [x for x in terminal_text(result, worst=100).splitlines() if re.match(r"\s+\d+\s", x)]
    assert not any(re.search(r"\b(inf|nan|NaN)\b", x) for x in table)


def test_compare_and_compare_of_the_dumps_name_the_same_first_failure(tmp_path):
    """A decoder whose RMSNorms overflow inside their fused kernel (llama scaled, saturation SoC): the
    compare of the model names '/ln1/ReduceMean' (overflow inside the fused kernel); a compare of the
    two dumps it wrote named '/ln1/Mul' (precision loss) before the dump carried its conversion's files."""
    from ascendpipe.backends.compare_sources import run_compare
    from ascendpipe.compare import thresholds as thr

    model = tm.build("llama", tmp_path / "llama.onnx", scaled=True)
    feeds = tm.inputs("llama", past=8)
    converted = _convert(model, tmp_path / "conv", soc_version=SATURATION_SOC)
    from_model = _compare(model, converted.parent, tmp_path, feeds, "w")
    work = tmp_path / "w"
    carried = {p.name for p in (work / "target_dump").iterdir()}
    assert {"fused_map.json", "precision_plan.json", "convert.json"} <= carried
    from_dumps, _ = run_compare(work / "golden_dump", work / "target_dump", input_path=None, work_dir=tmp_path / "w2",
                                limits=thr.resolve())
    a, b = from_model["first_failure"], from_dumps["first_failure"]
    assert (a["op_name"], a["mechanism"]) == (b["op_name"], b["mechanism"]) == ("/ln1/ReduceMean", "overflow")
    assert from_model["verdict"] == from_dumps["verdict"]
    assert [o["op_name"] for o in a["also_failing"]] == [o["op_name"] for o in b["also_failing"]]


def test_only_a_negative_fill_of_some_positions_is_a_mask():
    """A saturated network's class scores (every value ~1.3e10, positive: onnx's light_squeezenet, whose
    GlobalAveragePool then overflowed to inf) are no mask: a Softmax is not indifferent to them, and the
    overflow must reach the verdict. A mask hides some positions with one negative constant."""
    from ascendpipe.compare import thresholds as thr
    from ascendpipe.compare.fills import fill_facts

    limits = thr.resolve()
    scores = np.full(1000, 1.341e10, np.float32) * np.linspace(1, 1.0005, 1000, dtype=np.float32)
    assert fill_facts(scores, np.full(1000, np.inf, np.float16), limits) is None  # every position, and positive
    positive = np.zeros(8, np.float32)
    positive[:2] = 3.4e38
    assert fill_facts(positive, np.where(positive > 0, np.float16(65504), np.float16(0)), limits) is None
    mask = np.zeros(8, np.float32)
    mask[:2] = np.finfo(np.float32).min
    facts = fill_facts(mask, np.where(mask < 0, np.float16(-65504), np.float16(0)), limits)
    assert facts["count"] == 2 and facts["stored"] == 2 and facts["rest"]["reasons"] == []
    spread = mask.copy()
    spread[:2] = [-7e4, -9e4]  # an activation's overflowing values spread: no fill
    assert fill_facts(spread, np.where(spread < 0, np.float16(-65504), np.float16(0)), limits) is None
