"""Settings checked where they are written, as atc checks its options (issue 48 item 6).

``validate`` refuses at the value's file:line what the stage would refuse only when it runs (bf16 on a
SoC without it, precision_mode with precision_mode_v2: GE ``compiler/api/aclgrph/option_utils.cc``
L1359-1371 at ffdcbc9f, E10056), and what atc would take as another SoC (a soc_version holding a
newline); the convert command refuses a flag given empty and allow_hf32 with a switch twice; an error
naming what a file lists stays one short line; with several ``fix --case`` a mismatched case is named;
an ml_dtypes bfloat16 ``.npy`` feeds a bfloat16 input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.cli.main import main
from tests.hostile.test_corpus import snapshot
from tests.modelzoo import conv_bn_relu_inputs, conv_bn_relu_model, l2norm_model

ROOT = Path(__file__).resolve().parents[2]
BF16 = ("'allow_mix_precision_bf16' computes in bf16, which Ascend310P3 does not have: ATC refuses it (\"Current "
        "soc not support dtype of BFloat16\"); bf16 exists on Atlas A2/A3 (Ascend910B*, Ascend910_93*) and Atlas "
        "200I/500 A2 (Ascend310B*): use an fp16 mode here")
BOTH = "precision_mode and precision_mode_v2 cannot be combined (as on ATC: \"Cannot config both\"); keep one"
STAGE = "stages:\n  convert:\n    kind: convert\n    model: m.onnx\n"


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    conv_bn_relu_model(root / "m.onnx")
    monkeypatch.chdir(root)
    return root


def _refused(capsys, argv, line) -> None:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert err.splitlines() == ["ascendpipe: error: " + line], err
    assert code == 2


VALIDATE = [
    ("soc-newline", STAGE + '    params:\n      soc_version: "Ascend910B1\\n"\n', (),
     "p.yaml:6:20: stage 'convert': soc_version 'Ascend910B1\\n' holds a line break at its end: atc would take it as "
     "part of the SoC's name; write Ascend910B1"),
    ("soc-inner-space", STAGE + '    params:\n      soc_version: "Ascend 910B1"\n', (),
     "p.yaml:6:20: stage 'convert': soc_version 'Ascend 910B1' holds a space inside it: atc would take it as part of "
     "the SoC's name; write Ascend910B1"),
    ("bf16-on-310p3",
     STAGE + "    params:\n      soc_version: Ascend310P3\n      precision_mode: allow_mix_precision_bf16\n",
     (), "p.yaml:7:23: stage 'convert': precision_mode " + BF16),
    ("bf16-variant", STAGE + "    params:\n      soc_version: Ascend310P3\n    matrix:\n"
                             "      precision_mode: [force_fp16, allow_mix_precision_bf16]\n", (),
     "p.yaml:8:23: stage 'convert@allow_mix_precision_bf16': precision_mode " + BF16),
    ("both-modes", STAGE + "    params:\n      precision_mode_v2: fp16\n      precision_mode: force_fp16\n", (),
     "p.yaml:6:26: stage 'convert': " + BOTH),
    ("both-modes-across-levels", "params: {precision_mode: force_fp16}\n" + STAGE + "    matrix:\n"
                                 "      a: {overflow_mode: saturation}\n"
                                 "      b: {precision_mode_v2: mixed_float16}\n", (),
     "p.yaml:8:30: stage 'convert@b': " + BOTH),
    ("both-modes-by-set", STAGE + "    params:\n      precision_mode: force_fp16\n",
     ("--set", "stages.convert.params.precision_mode_v2=origin"),
     "--set stages.convert.params.precision_mode_v2=origin: stage 'convert': " + BOTH),
    ("inf-nan-on-310p3", STAGE + "    params:\n      soc_version: Ascend310P3\n      overflow_mode: inf_nan\n", (),
     "p.yaml:7:22: stage 'convert': overflow_mode inf_nan: Ascend310P3 supports only saturation mode "
     "(aclrtFloatOverflowMode, set_device_sat_mode); leave overflow_mode out"),
    ("tune-takes-them-too", "stages:\n  tune:\n    kind: tune\n    model: m.onnx\n    params:\n"
                            "      soc_version: Ascend310P3\n      precision_mode_v2: mixed_bfloat16\n", (),
     "p.yaml:7:26: stage 'tune': precision_mode_v2 'mixed_bfloat16' computes in bf16, which Ascend310P3 does not have: "
     "ATC refuses it (\"Current soc not support dtype of BFloat16\"); bf16 exists on Atlas A2/A3 (Ascend910B*, "
     "Ascend910_93*) and Atlas 200I/500 A2 (Ascend310B*): use an fp16 mode here"),
]


@pytest.mark.parametrize("case_id,text,extra,line", VALIDATE, ids=[c[0] for c in VALIDATE])
def test_validate_refuses_what_atc_would_at_the_values_line(ws, capsys, case_id, text, extra, line):
    (ws / "p.yaml").write_text(text)
    before = snapshot(ws)
    _refused(capsys, ["validate", "p.yaml", *extra], line)
    _refused(capsys, ["build", "p.yaml", *extra], line)  # the build refuses before anything runs
    assert snapshot(ws) == before


def test_the_settings_atc_takes_still_validate(ws, capsys):
    (ws / "p.yaml").write_text(STAGE + "    params:\n      soc_version: Ascend910B1\n    matrix:\n"
                               "      a: {precision_mode_v2: mixed_bfloat16,\n"
                               "          allow_hf32: {conv: false, matmul: false}}\n"
                               "      b: {precision_mode: allow_fp32_to_fp16, overflow_mode: saturation}\n")
    assert main(["validate", "p.yaml"]) == 0
    assert capsys.readouterr().out.startswith("p.yaml: ok, 2 stages")


CLI = [
    ("empty-precision-mode", ["--precision-mode", ""], "--precision-mode is empty (''); give a value or leave it out"),
    ("blank-precision-mode-v2", ["--precision-mode-v2", " "],
     "--precision-mode-v2 is empty (' '); give a value or leave it out"),
    ("empty-allow-hf32", ["--allow-hf32", ""], "--allow-hf32 is empty (''); give a value or leave it out"),
    ("allow-hf32-twice", ["--allow-hf32", "conv=true,conv=false"],
     "--allow-hf32 'conv=true,conv=false' sets conv twice; give each switch once (conv=true,matmul=false)"),
    ("allow-hf32-bare-part", ["--allow-hf32", "conv=true,matmul"],
     "--allow-hf32 'conv=true,matmul': 'matmul' is not SWITCH=true|false (conv=true,matmul=false)"),
    ("soc-trailing-newline", ["--soc-version", "Ascend910B1\n"],
     "--soc-version 'Ascend910B1\\n' holds a line break at its end: atc would take it as part of the SoC's name; "
     "write Ascend910B1"),
    ("soc-tab-on-ascend", ["--soc-version", "\tAscend310P3", "--backend", "ascend"],
     "--soc-version '\\tAscend310P3' holds a tab at its start: atc would take it as part of the SoC's name; "
     "write Ascend310P3"),
    ("both-modes", ["--precision-mode", "force_fp16", "--precision-mode-v2", "fp16"],
     "--precision-mode and --precision-mode-v2 cannot be combined (as on ATC: \"Cannot config both\"); keep one"),
    ("bf16-on-310p3", ["--precision-mode", "allow_mix_precision_bf16", "--soc-version", "Ascend310P3"],
     "--precision-mode " + BF16),
]


@pytest.mark.parametrize("case_id,flags,line", CLI, ids=[c[0] for c in CLI])
def test_convert_refuses_flags_atc_would_refuse_or_ignore(ws, capsys, case_id, flags, line):
    before = snapshot(ws)
    _refused(capsys, ["convert", "--model", "m.onnx", "--output", "o", *flags], line)
    assert snapshot(ws) == before  # nothing written: no o/, atc never reached on --backend ascend


def test_a_newline_in_the_soc_never_reaches_a_process_argv(ws):
    """Through a real command line (a shell's $(cat soc.txt) keeps no newline; Python's argv does)."""
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "convert", "--model", "m.onnx", "--output", "o",
                           "--soc-version", "Ascend310P3\n", "--backend", "ascend"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "holds a line break at its end" in proc.stderr
    assert not (ws / "o").exists()


def test_an_error_naming_what_a_file_lists_stays_short(ws, capsys):
    (ws / "keep.cfg").write_text("\n".join(f"op_{i}" for i in range(100_000)) + "\n")
    _refused(capsys, ["convert", "--model", "m.onnx", "--output", "o", "--keep-dtype", "keep.cfg"],
             "--keep-dtype keep.cfg: keep_dtype names ops 'op_0', 'op_1', 'op_2', 'op_3', 'op_4' and 99995 more "
             "(100000 in all) not in the model; its ops: bn, conv, fc, flatten, pool, relu")
    _refused(capsys, ["convert", "--model", "m.onnx", "--output", "o", "--keep-dtype", "conv,cnv"],
             "--keep-dtype conv,cnv: keep_dtype names op 'cnv' (did you mean 'conv'?) not in the model; its ops: bn, "
             "conv, fc, flatten, pool, relu")
    (ws / "p.yaml").write_text(STAGE + "    params:\n      keep_dtype: keep.cfg\n")
    capsys.readouterr()
    assert main(["build", "p.yaml"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if "FAILED" in line]
    assert failed[0].endswith("p.yaml:6:19: stage 'convert': keep_dtype names ops 'op_0', 'op_1', 'op_2', 'op_3', "
                              "'op_4' and 99995 more (100000 in all) not in the model; its ops: bn, conv, fc, flatten, "
                              "pool, relu"), failed
    np.savez(ws / "many.npz", **{f"x{i}": np.zeros(1, np.float32) for i in range(2000)})
    capsys.readouterr()
    assert main(["infer", "--model", "m.onnx", "--input", "many.npz", "--output", "o"]) == 2
    err = capsys.readouterr().err
    assert len(err) < 400 and "unknown x0, x1, x10, x100, x1000 and 1995 more (2000 in all)" in err, err


def test_few_names_the_first_and_counts_the_rest():
    from ascendpipe.errors import few

    assert few(["a", "b"]) == "a, b"
    assert few(list("abcdef")) == "a, b, c, d, e, f"  # one more is shown, not counted
    assert few(list("abcdefg"), show=repr) == "'a', 'b', 'c', 'd', 'e' and 2 more (7 in all)"


def test_a_mismatched_case_is_named_by_its_case(ws, capsys):
    l2norm_model(ws / "l2.onnx")
    np.savez(ws / "good.npz", **conv_bn_relu_inputs())
    np.savez(ws / "small.npz", image=np.zeros((1, 3, 8, 8), np.float32))
    before = snapshot(ws)
    _refused(capsys, ["fix", "--case", "m.onnx:good.npz", "--case", "l2.onnx:good.npz"],
             "--case l2.onnx:good.npz: good.npz: input names do not match the model (missing features; unknown image); "
             "model inputs: features; given: image")
    _refused(capsys, ["fix", "--case", "m.onnx:good.npz", "--case", "m.onnx:small.npz"],
             "--case m.onnx:small.npz: small.npz: input 'image': expected float32 [N,3,16,16], given float32 [1,3,8,8]")
    assert snapshot(ws) == before


def _bf16_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT, name="cast")
    graph = helper.make_graph([cast], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_an_ml_dtypes_bfloat16_npy_feeds_a_bfloat16_input(ws, capsys):
    import ml_dtypes

    _bf16_model(ws / "bf.onnx")
    values = np.array([[1.0, -2.5, 3.140625, 65280.0], [0.0, 1e-3, -7.0, 0.5]], np.float32)
    np.save(ws / "x.npy", values.astype(ml_dtypes.bfloat16))
    assert np.load(ws / "x.npy").dtype.str in ("<V2", "|V2")  # what ml_dtypes writes, read back by numpy alone
    assert main(["infer", "--model", "bf.onnx", "--input", "x.npy", "--output", "o"]) == 0
    np.testing.assert_array_equal(np.load(ws / "o" / "outputs" / "y.npy"),
                                  values.astype(ml_dtypes.bfloat16).astype(np.float32))  # 1e-3 rounded to bf16
    assert main(["infer", "--model", "bf.onnx", "--output", "r"]) == 0  # random bf16 inputs too
    assert np.load(ws / "r" / "outputs" / "y.npy").shape == (2, 4)
    assert main(["compare", "--golden", "bf.onnx", "--target", "bf.onnx", "--input", "x.npy", "--output", "c"]) == 0
    np.save(ws / "bits.npy", values.astype(ml_dtypes.bfloat16).view(np.uint16))  # raw bits: not taken as bf16
    capsys.readouterr()
    assert main(["infer", "--model", "bf.onnx", "--input", "bits.npy", "--output", "u"]) == 2
    assert capsys.readouterr().err == ("ascendpipe: error: bits.npy: input 'x': expected bfloat16 [N,4], given uint16 "
                                       "[2,4] (convert the data with .astype('bfloat16'))\n")


def test_a_model_with_bfloat16_outputs_runs_and_compares(ws, capsys):
    """onnxruntime's Python run returns no bfloat16 output ("No corresponding Numpy type"): infer, dump,
    compare, profile and eval read them as ml_dtypes' bfloat16 (OrtValues), byte for byte."""
    import ml_dtypes
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="same")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(ws / "id.onnx"))
    values = np.array([[1.0, -2.5, 3.140625], [65280.0, 1e-3, -7.0]], np.float32).astype(ml_dtypes.bfloat16)
    np.save(ws / "x.npy", values)
    for argv in (["infer", "--model", "id.onnx", "--input", "x.npy", "--output", "o"],
                 ["compare", "--golden", "id.onnx", "--target", "id.onnx", "--input", "x.npy", "--output", "c"],
                 ["profile", "--model", "id.onnx", "--input", "x.npy", "--output", "p"]):
        assert main(argv) == 0, argv
    out = np.load(ws / "o" / "outputs" / "y.npy")
    assert out.dtype.itemsize == 2 and out.tobytes() == values.tobytes()
    from ascendpipe.errors import Location
    from ascendpipe.stages.eval import load_array

    np.testing.assert_array_equal(load_array(ws / "o" / "outputs" / "y.npy", Location()), values.astype(np.float32))
    assert "Traceback" not in capsys.readouterr().err
