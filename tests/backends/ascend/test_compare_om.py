"""compare on the ascend backend with an OM target (a convert dir), and msit debug compare beside it.

The OM is dumped through the CANN doubles (ais_bench + acl.json + msaccucmp); msit is the double in
tests/backends/ascend/doubles/msit_bin (on PATH only where a test puts it there, as a pip-installed msit is).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ascendpipe.backends.ascend import msit
from ascendpipe.errors import UserError
from tests.backends.ascend.conftest import DOUBLES

SOC = "Ascend310P3"
MSIT_BIN = DOUBLES / "msit_bin"
TINY_OPS = {"conv1", "conv2", "add1", "gap", "flat", "fc"}  # the OM's ops (conv1 is conv1+relu1)


@pytest.fixture(scope="module")
def om_dir(cann_env, tmp_path_factory):
    """The tiny model (static batch 2) converted by the atc double, and a 4-row input."""
    from ascendpipe.backends.ascend import stages
    from tests.backends.ascend.conftest import _context_factory, build_tiny_model

    root = tmp_path_factory.mktemp("om")
    model = build_tiny_model(root / "tiny.onnx")
    x = np.random.default_rng(3).standard_normal((4, 3, 8, 8)).astype(np.float32)
    np.save(root / "x4.npy", x)
    factory = _context_factory(root)
    ctx = next(factory)("convert", "convert", {"soc_version": SOC, "precision_mode": "force_fp16"}, inputs={"model": model})
    stages.convert(ctx)
    yield ctx.out_dir, model, root / "x4.npy"
    next(factory, None)


def _reference(model, feeds: dict) -> dict:
    """Every tensor of the ONNX, straight from onnxruntime (independent of ascendpipe's dump)."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(model))
    for node in m.graph.node:
        for t in node.output:
            if t not in {o.name for o in m.graph.output}:
                m.graph.output.append(onnx.ValueInfoProto(name=t))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _compare(make_ctx, om_dir, params=None, name="compare"):
    from ascendpipe.stages.compare import CompareKind

    out, model, x = om_dir
    ctx = make_ctx(name, "compare", params or {}, inputs={"golden": model, "target": out, "inputs": x},
                   upstream={"target": ("convert", "convert", out)})
    result = CompareKind().run(ctx)
    ctx.log.seek(0)
    return ctx, result, ctx.log.read()


def test_om_target_is_dumped_and_mapped_through_the_om_json(cann_env, om_dir, make_ctx):
    ctx, result, log = _compare(make_ctx, om_dir, {"msit": "off", "dump_keep": "all"})
    out = ctx.out_dir
    rows = {r["op_name"]: r for r in json.loads((out / "result.json").read_text())["rows"]}
    both = {n for n, r in rows.items() if r["side"] == "both"}
    assert both == TINY_OPS
    assert rows["conv1"]["fused"] and rows["conv1"]["golden_tensor"] == "r1"  # _datadump_original_op_names
    assert rows["conv1"]["golden_ops"] == ["conv1", "relu1"]
    # the static batch (2) of the OM takes the first batch of the 4 rows, not all 4 ("Got: 4 Expected: 2")
    index = json.loads((out / "target_dump/index.json").read_text())
    assert index["inputs"]["x"]["shape"] == [2, 3, 8, 8]
    x = np.load(om_dir[2])
    ref = _reference(om_dir[1], {"x": x[:2]})
    conv1 = next(t for t in index["tensors"] if t["op_name"] == "conv1")
    np.testing.assert_allclose(np.load(out / "target_dump" / conv1["file"]), ref["r1"], rtol=1e-5, atol=1e-6)
    assert result.metrics["failed_ops"] == 0 and "msit_rows_paired" not in result.metrics
    assert "msit debug compare" not in log and not (out / "msit_result.json").exists()


def test_msit_result_beside_ours_agrees(cann_env, om_dir, make_ctx, monkeypatch):
    monkeypatch.setenv("PATH", f"{MSIT_BIN}{os.pathsep}{os.environ['PATH']}")
    ctx, result, log = _compare(make_ctx, om_dir)  # msit: auto, and msit is found
    out = ctx.out_dir
    data = json.loads((out / "msit_result.json").read_text())
    assert data["agreement"]["paired_rows"] == data["agreement"]["agree"] == len(TINY_OPS)
    assert result.metrics["msit_rows_agree"] == len(TINY_OPS) and result.metrics["msit_failed_ops"] == 0
    assert f"{len(TINY_OPS)} of {len(TINY_OPS)} paired rows agree" in log
    by_op = {r["op_name"]: r for r in data["rows"]}
    assert by_op["conv1"]["golden_ops"] == ["conv1", "relu1"] and by_op["conv1"]["golden_dtype"] == "float32"
    assert by_op["conv1"]["kl"] is None  # the CSV's NaN cell
    # the "(mean;std),(mean;std)" cell against numpy on the golden tensor (fp32 doubles: both sides equal)
    r1 = _reference(om_dir[1], {"x": np.load(om_dir[2])[:2]})["r1"].astype(np.float64)
    assert by_op["conv1"]["target_mean"] == pytest.approx(r1.mean(), abs=1e-5)
    assert by_op["conv1"]["golden_std"] == pytest.approx(r1.std(), abs=1e-5)
    assert by_op["Node_Output"]["is_output"]
    argv = data["argv"]
    assert argv[1:3] == ["debug", "compare"] and argv[argv.index("-is") + 1] == "x:2,3,8,8"
    assert not (out / "msit").exists() and (out / "msit_result.csv").is_file()


def test_msit_disagreement_is_counted(cann_env, om_dir, make_ctx, monkeypatch):
    monkeypatch.setenv("PATH", f"{MSIT_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MSIT_DOUBLE_COSINE_SHIFT", "conv2:0.01")
    ctx, result, log = _compare(make_ctx, om_dir, {"msit": "on"})
    agreement = json.loads((ctx.out_dir / "msit_result.json").read_text())["agreement"]
    assert agreement["agree"] == len(TINY_OPS) - 1
    assert [d["op_name"] for d in agreement["disagree"]] == ["conv2"]
    d = agreement["disagree"][0]
    assert d["ours"] - d["msit"] == pytest.approx(0.01, abs=2e-6)  # the CSV keeps 6 decimals
    assert result.metrics["msit_failed_ops"] == 0  # 0.99 is not below msit's threshold


def test_msit_on_without_msit_is_a_located_error(cann_env, om_dir, make_ctx):
    with pytest.raises(UserError) as err:
        _compare(make_ctx, om_dir, {"msit": "on"})
    assert err.value.location.field == "params.msit" and "no msit executable" in err.value.message


def test_msit_auto_without_msit_says_so(cann_env, om_dir, make_ctx):
    ctx, _, log = _compare(make_ctx, om_dir)
    assert "msit debug compare skipped: no msit executable" in log
    assert not (ctx.out_dir / "msit_result.json").exists()


def test_msit_double_checks_its_argv(cann_env, om_dir, tmp_path):
    out, model, x = om_dir
    base = [sys.executable, str(MSIT_BIN / "msit"), "debug", "compare", "-gm", str(model), "-om", str(out / "model.om"),
            "-o", str(tmp_path), "-i", str(x)]
    for extra in (["-is", "x=2,3,8,8"], ["--no-such-flag"]):
        proc = subprocess.run(base + extra, capture_output=True, text=True)
        assert proc.returncode == 2 and "[ERROR] msit double" in proc.stderr, extra
    proc = subprocess.run(base[:6] + base[8:], capture_output=True, text=True)  # no -om
    assert proc.returncode == 2 and "-om" in proc.stderr


def test_om_target_needs_the_ascend_backend(cann_env, om_dir, tmp_path):
    from ascendpipe.backends.compare_sources import run_compare

    out, model, x = om_dir
    with pytest.raises(UserError) as err:
        run_compare(model, out, input_path=x, work_dir=tmp_path, limits={})
    assert "--backend ascend" in err.value.message and err.value.location.field == "target"


def test_om_dir_without_convert_json_is_a_user_error(tmp_path):
    from ascendpipe.backends.compare_sources import om_input_specs, resolve_side

    (tmp_path / "model.om").write_bytes(b"om")
    assert resolve_side(tmp_path, "target").om_dir == tmp_path
    with pytest.raises(UserError) as err:
        om_input_specs(tmp_path)
    assert "convert.json" in err.value.message


def test_flat_settings_lifts_the_ascend_settings():
    from ascendpipe.backends.compare_sources import flat_settings

    record = {"backend": "ascend", "settings": {"keep_dtype": ["/ReduceSum"], "aipp": []}, "inputs": [{"name": "x"}]}
    assert flat_settings(record) == {"backend": "ascend", "keep_dtype": ["/ReduceSum"], "aipp": [], "inputs": [{"name": "x"}]}
    emulator = {"keep_dtype": ["a"], "atc_argv": ["atc"]}
    assert flat_settings(emulator) is emulator and flat_settings(None) is None


def test_cosine_agreement_pairs_by_op_and_occurrence():
    ours = [{"index": 0, "op_name": "A", "side": "both", "cosine": 0.9999},
            {"index": 1, "op_name": "B", "side": "both", "cosine": 0.95},
            {"index": 2, "op_name": "B", "side": "both", "cosine": 0.80},  # B's second output
            {"index": 3, "op_name": "C", "side": "golden_only", "cosine": None},
            {"index": 4, "op_name": "D", "side": "both", "cosine": float("nan")}]
    theirs = [{"op_name": "A", "side": "both", "cosine": 0.99985},    # |d| = 5e-5: agree
              {"op_name": "B", "side": "both", "cosine": 0.948},      # |d| = 2e-3: disagree
              {"op_name": "B", "side": "both", "cosine": 0.8005},     # |d| = 5e-4: agree
              {"op_name": "D", "side": "both", "cosine": 0.5},        # ours NaN: not paired
              {"op_name": "Node_Output", "side": "both", "cosine": 1.0},
              {"op_name": "E", "side": "target_only", "cosine": None}]
    got = msit.cosine_agreement(ours, theirs)
    assert (got["paired_rows"], got["agree"]) == (3, 2)
    assert got["disagree"] == [{"op_name": "B", "ours": 0.95, "msit": 0.948}]
    assert (got["only_ours"], got["only_msit"]) == (0, 0)
    assert msit.cosine_agreement(ours, theirs, tol=1e-5)["agree"] == 0


def test_dry_run_lists_the_device_dump_and_msit(cann_env, om_dir, make_ctx, monkeypatch):
    from ascendpipe.stages.compare import CompareKind

    out, model, x = om_dir
    monkeypatch.setenv("PATH", f"{MSIT_BIN}{os.pathsep}{os.environ['PATH']}")

    def argvs(params):
        ctx = make_ctx("compare", "compare", params, inputs={"golden": model, "target": out, "inputs": x},
                       upstream={"target": ("convert", "convert", out)})
        return CompareKind().commands(ctx)

    host, *auto = argvs({})
    # the golden ONNX is dumped on the host (in-process: a note, no argv), the OM on the device
    assert host == [] and host.note.startswith("host onnxruntime") and host.note.endswith(str(model))
    assert [a[1:3] for a in auto] == [["-m", "ais_bench"], [], ["debug", "compare"]]
    # the device's dump files are read in-process (no msaccucmp convert, which keeps the device's layout)
    assert auto[1].note.startswith("read the device's dump files in-process")
    assert auto[0][auto[0].index("--model") + 1] == str(out / "model.om") and "--acl_json_path" in auto[0]
    assert auto[2][0] == str(MSIT_BIN / "msit") and auto[2][auto[2].index("-gm") + 1] == str(model)
    assert len(argvs({"msit": "off"})) == 3


def test_a_tune_stage_is_a_compare_target(cann_env, om_dir, make_ctx):
    from ascendpipe.backends.ascend import stages
    from ascendpipe.stages.compare import CompareKind

    _, model, x = om_dir
    tune = make_ctx("tune", "tune", {"soc_version": SOC, "precision_mode": "force_fp16"}, inputs={"model": model})
    stages.tune(tune)
    record = json.loads((tune.out_dir / "convert.json").read_text())
    assert record["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float32"}]
    assert record["tune_bank"] == str(tune.out_dir / "bank") and record["aoe_argv"][0][0].endswith("aoe")
    ctx = make_ctx("compare", "compare", {"msit": "off"}, inputs={"golden": model, "target": tune.out_dir, "inputs": x},
                   upstream={"target": ("tune", "tune", tune.out_dir)})
    CompareKind().run(ctx)
    rows = json.loads((ctx.out_dir / "result.json").read_text())["rows"]
    assert {r["op_name"] for r in rows if r["side"] == "both"} == TINY_OPS
