"""Issue 43's minors on the command line: an atc line's --framework=5 pastes into convert; the
emulator's times say they are the host CPU's (new keys beside ais_bench's, which stay)."""

from __future__ import annotations

import json

import numpy as np

from ascendpipe.cli.main import main as cli
from tests import modelzoo


def test_convert_takes_atcs_framework_5_and_refuses_the_others(tmp_path, capsys):
    model = modelzoo.l2norm_model(tmp_path / "l2.onnx")
    assert cli(["convert", "--framework=5", f"--model={model}", f"--output={tmp_path / 'out'}",
                "--precision_mode=force_fp16"]) == 0
    assert (tmp_path / "out" / "model.onnx").is_file()
    capsys.readouterr()
    assert cli(["convert", "--framework=3", f"--model={model}", f"--output={tmp_path / 'tf'}"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--framework=3 (TensorFlow): ascendpipe converts ONNX models only (--framework=5); export the model to ONNX first")
    assert not (tmp_path / "tf").exists()


def test_emulated_times_are_labelled_host_time_and_the_old_keys_stay(tmp_path, capsys):
    model = modelzoo.l2norm_model(tmp_path / "l2.onnx")
    np.savez(tmp_path / "x.npz", **modelzoo.l2norm_inputs(0))
    assert cli(["infer", "--model", str(model), "--input", str(tmp_path / "x.npz"), "--output", str(tmp_path / "inf")]) == 0
    out = capsys.readouterr().out
    assert ("[INFO] emulated: these times are onnxruntime's on the host CPU (time_measured_on: host_cpu_emulation), "
            "not the NPU's; ais_bench's key names are kept for scripts") in out
    summary = json.loads((tmp_path / "inf" / "summary.json").read_text())
    assert summary["time_measured_on"] == "host_cpu_emulation"
    assert summary["host_compute_time"] == summary["NPU_compute_time"] and summary["NPU_compute_time"]["count"] >= 1


def test_dump_and_compare_name_the_same_op_for_one_overflow(tmp_path, capsys):
    """The L2 norm in fp16: the fused kernel 'sum' (square, sum, sqrt) writes 'norm' = inf. dump named the
    tensor ('norm'), compare the op ('sum'); both name the op now, dump the tensor beside it."""
    model = modelzoo.l2norm_model(tmp_path / "l2.onnx")
    np.savez(tmp_path / "x.npz", **modelzoo.l2norm_inputs(0))
    assert cli(["convert", "--model", str(model), "--output", str(tmp_path / "fp16")]) == 0
    capsys.readouterr()
    assert cli(["dump", "--model", str(tmp_path / "fp16"), "--input", str(tmp_path / "x.npz"),
                "--output", str(tmp_path / "dump")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 tensors hold NaN or Inf; first: op 'sum' (ReduceSum), tensor 'norm'"
    assert cli(["compare", "--golden", str(model), "--target", str(tmp_path / "fp16"), "--input", str(tmp_path / "x.npz"),
                "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["first_failure"]
    assert (first["op_name"], first["op_type"]) == ("sum", "ReduceSum")
