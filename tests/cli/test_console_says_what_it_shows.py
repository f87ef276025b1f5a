"""Console and records say what they show (issue 50 item 4): standalone compare prints the output cosine (the
figure a build prints for a compare stage); the golden-only tensors are explained (what they are, whether they
matter) in the console, result.json and report.html; profile times in the build summary and `diff` say they
are the host CPU's (the onnxruntime emulation), not an NPU's; `diff` of two pipelines' runs compares only the
stages both have and names the others."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.records import diff_runs
from tests import modelzoo

SWITCH_OFF = '{"Switch": {"GraphFusion": {}, "UBFusion": {"TbeReduceElemwiseFusionPass": "off"}}}\n'


def _cli(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=cwd, capture_output=True, text=True,
                          env={**__import__("os").environ, "NO_COLOR": "1"})


def _ok(cwd: Path, *args) -> str:
    done = _cli(cwd, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """The forum's L2 norm (sum of squares ~1.25e8, past fp16's range) in a workspace: converted with
    ATC's default fusions (square -> sum -> sqrt one TbeReduceElemwiseFusionPass kernel) and with that pass
    off; a pipeline comparing both and profiling the model."""
    root = tmp_path_factory.mktemp("console")
    (root / ".ascendpipe").mkdir()
    modelzoo.l2norm_model(root / "m.onnx")
    np.save(root / "x.npy", modelzoo.l2norm_inputs()["features"])
    (root / "switch.cfg").write_text(SWITCH_OFF)
    _ok(root, "convert", "--model", "m.onnx", "--output", "fused")
    _ok(root, "convert", "--model", "m.onnx", "--output", "unfused", "--fusion-switch-file", "switch.cfg",
        "--keep-dtype", "square,sum,sqrt")
    (root / "pipeline.yaml").write_text("""\
stages:
  convert:
    kind: convert
    model: m.onnx
    matrix:
      fused: {precision_mode: force_fp16}
      kept: {precision_mode: force_fp16, keep_dtype: [square, sum, sqrt], fusion_switch_file: switch.cfg}
  compare: {kind: compare, golden: m.onnx, target: convert, inputs: x.npy}
  profile: {kind: profile, model: m.onnx, inputs: x.npy, params: {iterations: 5, warmup: 1}}
""")
    build = _ok(root, "build", "pipeline.yaml")
    return root, build


def test_standalone_compare_prints_the_output_cosine_a_build_prints(ws, tmp_path):
    root, build = ws
    for variant, target in (("fused", "fused"), ("kept", "unfused")):
        text = _ok(root, "compare", "--golden", "m.onnx", "--target", target, "--input", "x.npy",
                   "--output", str(tmp_path / variant))
        lines = text.splitlines()
        result = json.loads((tmp_path / variant / "result.json").read_text())
        piped = json.loads((root / f"build/compare__{variant}/result.json").read_text())["summary"]["output_cosine"]
        value = result["summary"]["output_cosine"]
        assert value == pytest.approx(piped, abs=1e-12)  # the stage's metric, for the same model and input
        cosine = [line for line in lines if line.startswith("output cosine: ")]
        assert cosine == [f"output cosine: {value:.6g} (the model output embedding; `build` prints it as output_cosine)"]
        # said right after the verdict, before the counts
        assert lines.index(cosine[0]) == 2 and lines[3].startswith("compared ")
        assert re.search(rf"compare@{variant} +.*output_cosine={value:.4g}\b", build), build
    assert value > 0.9999  # the kept variant: the L2 norm in fp32
    fused = json.loads((tmp_path / "fused/result.json").read_text())["summary"]["output_cosine"]
    assert fused < 0.5  # the sum of squares overflows inside the fused kernel


def test_golden_only_tensors_are_explained_where_they_are_counted(ws, tmp_path):
    root, _ = ws
    text = _ok(root, "compare", "--golden", "m.onnx", "--target", "fused", "--input", "x.npy", "--output", str(tmp_path))
    result = json.loads((tmp_path / "result.json").read_text())
    info = result["golden_only"]
    only = [r for r in result["rows"] if r["side"] == "golden_only"]
    assert info["count"] == result["summary"]["golden_only"] == len(only) == 2
    assert info["fused"] == 2 and info["no_counterpart"] == 0 and info["kernels"] == ["sum"]
    assert info["matters"] is True
    square = next(c for c in info["beyond_fp16_in_failing_kernels"] if c["op_name"] == "square")
    assert square["kernel"] == "sum" and square["golden_abs_max"] == pytest.approx(
        float(np.max(modelzoo.l2norm_inputs()["features"].astype(np.float32) ** 2)), rel=1e-6)
    assert info["explanation"].startswith("2 golden-only tensors: ops of the fp32 model with no tensor of their own in the target.")
    assert "inside kernels whose output fails" in info["why_it_matters"]
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("compared "))
    assert lines[at] == "compared 2 tensors (2 golden-only, 0 target-only): 2 failed, 1 overflow"
    assert lines[at + 1].startswith("golden-only: 2 tensors of the fp32 model have no tensor of their own in the target: "
                                    "2 inside fused kernels (compared at the kernel's output: sum)")
    assert lines[at + 2].startswith("  they matter here: 2 of them hold golden values beyond fp16's 65504")
    html = (tmp_path / "report.html").read_text()
    assert 'id="golden-only" class="aside matters"' in html and "Golden-only tensors: they matter here." in html
    assert "#0 square in kernel sum" in html

    # every op kept apart (pass off): nothing golden-only, nothing said about it
    text = _ok(root, "compare", "--golden", "m.onnx", "--target", "unfused", "--input", "x.npy", "--output", str(tmp_path / "u"))
    doc = json.loads((tmp_path / "u/result.json").read_text())["golden_only"]
    assert doc == {"count": 0, "fused": 0, "no_counterpart": 0, "kernels": [], "beyond_fp16_in_failing_kernels": [],
                   "matters": False, "explanation": "every golden tensor has a counterpart in the target"}
    assert "golden-only:" not in text and 'id="golden-only"' not in (tmp_path / "u/report.html").read_text()


def test_the_build_summary_says_profile_times_are_the_host_cpus(ws):
    _, build = ws
    lines = build.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  profile "))
    assert "latency_ms_mean=" in lines[at] and lines[at].split()[1:3] == ["(host", "CPU)"]
    assert lines[at + 1].strip() == ("times: the host CPU's, measured on the onnxruntime emulation "
                                     "(time_measured_on: host_cpu_emulation), not an NPU's")
    assert sum("time_measured_on: host_cpu_emulation" in line for line in lines) == 1  # compare stages time nothing


def test_diff_labels_host_cpu_times(ws):
    root, _ = ws
    _ok(root, "build", "pipeline.yaml", "profile", "--force")
    text = _ok(root, "diff", "latest~1", "latest")
    rows = [line for line in text.splitlines() if line.startswith("*  profile")]
    assert rows and all("(host CPU)" in line for line in rows)
    assert any("latency_ms_mean (host CPU)" in line for line in rows)
    assert text.splitlines()[-1].startswith("(host CPU): times measured on this machine's CPU by the onnxruntime emulation")
    doc = json.loads(_ok(root, "diff", "latest~1", "latest", "--json"))
    assert doc["stages"]["profile"]["time_measured_on"] == {"a": "host_cpu_emulation", "b": "host_cpu_emulation"}
    assert doc["stages"]["profile"]["kind"] == "profile"
    assert "time_measured_on" not in doc["stages"]["compare@fused"]  # a compare measures no time


def _stage(kind, metrics, params=None):
    return {"kind": kind, "state": "ran", "params": params or {}, "metrics": metrics, "outputs": {}}


def test_a_diff_across_backends_says_which_side_timed_the_npu():
    a = {"id": 1, "pipeline": "reid.yaml", "backend": "onnxruntime",
         "stages": {"infer@fp16": _stage("infer", {"latency_ms_mean": 0.2, "throughput": 5000.0})}}
    b = {**a, "id": 2, "backend": "ascend"}
    doc = diff_runs(a, b)
    assert doc["stages"]["infer@fp16"]["time_measured_on"] == {"a": "host_cpu_emulation", "b": "npu"}
    from ascendpipe.cli.diff import _time_label

    assert _time_label(doc["stages"]["infer@fp16"], "metrics", True) == " (host CPU vs NPU)"
    assert _time_label(doc["stages"]["infer@fp16"], "params", True) == ""


def test_diff_of_two_pipelines_compares_only_the_stages_both_have(tmp_path):
    root = tmp_path
    (root / ".ascendpipe").mkdir()
    modelzoo.l2norm_model(root / "m.onnx")
    (root / "a.yaml").write_text("build_dir: build/a\nstages:\n  convert: {kind: convert, model: m.onnx, "
                                 "params: {precision_mode: force_fp16}}\n  only_a: {kind: convert, model: m.onnx}\n")
    (root / "b.yaml").write_text("build_dir: build/b\nstages:\n  convert: {kind: convert, model: m.onnx, "
                                 "params: {precision_mode: force_fp32}}\n  only_b: {kind: convert, model: m.onnx}\n")
    (root / "c.yaml").write_text("build_dir: build/c\nstages:\n  other: {kind: convert, model: m.onnx}\n")
    for name in ("a", "b", "c"):
        _ok(root, "build", f"{name}.yaml")
    lines = _ok(root, "diff", "1", "2").splitlines()
    assert lines[0] == ("runs 1 and 2 are of different pipelines: run 1 built a.yaml, run 2 built b.yaml; "
                        "only stages of the same name are compared")
    assert lines[1] == "  the run before 2 of b.yaml is none (it is its first)"
    assert lines[2] == "  left out: 1 stage only in run 1 (only_a), 1 stage only in run 2 (only_b)"
    table = "\n".join(lines[3:])
    assert "precision_mode" in table and "force_fp16" in table and "force_fp32" in table
    assert "only_a" not in table and "only_b" not in table
    doc = json.loads(_ok(root, "diff", "1", "2", "--json"))
    assert list(doc["stages"]) == ["convert"] and doc["stages_left_out"] == {"a": ["only_a"], "b": ["only_b"]}
    assert doc["pipelines"] == {"a": "a.yaml", "b": "b.yaml", "same": False, "previous_of_b": None}
    nothing = _ok(root, "diff", "2", "3").splitlines()
    assert nothing[2] == ("  no stage of the same name in both runs: nothing to compare (left out: 2 stages only in run 2 "
                          "(convert, only_b), 1 stage only in run 3 (other))")
    assert len(nothing) == 3
    same = json.loads(_ok(root, "diff", "1", "1", "--json"))
    assert "stages_left_out" not in same and set(same["stages"]) == {"convert", "only_a"}
