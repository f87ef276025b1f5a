import argparse
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.stages.base import StageContext, Upstream
from ascendpipe.stages.dump import DumpKind
from ascendpipe.stages.infer import InferKind

from tests.modelzoo import emulated_model, linear_model, linear_reference, two_input_model


def _ctx(tmp_path, kind, params, inputs, upstream=None, name="s"):
    out = tmp_path / f"out-{name}"
    out.mkdir()
    return StageContext(name=name, kind=kind, workspace=tmp_path, out_dir=out, final_out_dir=tmp_path / "build" / name,
                        params=params, inputs=inputs, upstream=upstream or {}, backend="onnxruntime", log=io.StringIO())


def test_infer_stage_metrics_and_outputs(tmp_path):
    path, w, b = linear_model(tmp_path / "m.onnx")
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ctx = _ctx(tmp_path, "infer", {"batch_size": 2, "loops": 2}, {"model": tmp_path / "m.onnx", "inputs": tmp_path / "x.npy"})
    result = InferKind().run(ctx)
    assert sorted(result.metrics) == ["latency_ms_mean", "latency_ms_p99", "throughput"]
    summary = json.loads((ctx.out_dir / "summary.json").read_text())
    # timings live in the run record (metrics, info.latency); the outputs carry none (they feed keys)
    assert result.metrics["throughput"] == pytest.approx(1000 * 2 / result.info["latency"]["latency_ms"]["mean"])
    assert not {"latency_ms", "throughput", "pid", "npu_compute_time_list", "NPU_compute_time"} & set(summary)
    assert str(tmp_path) not in (ctx.out_dir / "summary.json").read_text()
    assert not (ctx.out_dir / "metrics.json").exists()
    np.testing.assert_allclose(np.load(ctx.out_dir / "outputs/y.npy"), linear_reference(x, w, b)[0], rtol=1e-5, atol=1e-6)
    assert "NPU_compute_time (ms)" in ctx.log.getvalue()


def test_infer_stage_reads_an_upstream_infer_outputs_dir(tmp_path):
    model = two_input_model(tmp_path / "two.onnx", batch=2)
    upstream = tmp_path / "build" / "prev"
    (upstream / "outputs").mkdir(parents=True)
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 2, np.float32)
    np.save(upstream / "outputs" / "a.npy", a)
    np.save(upstream / "outputs" / "b.npy", b)
    (upstream / "summary.json").write_text("{}")
    ctx = _ctx(tmp_path, "infer", {}, {"model": model, "inputs": upstream},
               upstream={"inputs": Upstream("prev", "infer", upstream)})
    InferKind().run(ctx)
    np.testing.assert_array_equal(np.load(ctx.out_dir / "outputs/out.npy"), a * b + 1)


def test_infer_stage_without_inputs_uses_seeded_random_and_says_so(tmp_path):
    linear_model(tmp_path / "m.onnx")
    ctx = _ctx(tmp_path, "infer", {"seed": 11}, {"model": tmp_path / "m.onnx"})
    InferKind().run(ctx)
    assert "random inputs (seed 11)" in ctx.log.getvalue()


def test_stage_errors_carry_the_stage_name(tmp_path):
    linear_model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.uint8))
    ctx = _ctx(tmp_path, "infer", {}, {"model": tmp_path / "m.onnx", "inputs": tmp_path / "x.npy"}, name="golden")
    with pytest.raises(UserError) as err:
        InferKind().run(ctx)
    assert "stage 'golden'" in str(err.value) and "expected float32 [N,3], given uint8 [2,3]" in str(err.value)


def test_dump_stage_auto_fusions_and_max_batch(tmp_path):
    linear_model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((20, 3), np.float32))
    ctx = _ctx(tmp_path, "dump", {"max_batch": 3}, {"model": tmp_path / "m.onnx", "inputs": tmp_path / "x.npy"}, name="g")
    result = DumpKind().run(ctx)
    index = json.loads((ctx.out_dir / "index.json").read_text())
    assert index["fusions"] is False and index["inputs"]["x"]["shape"] == [3, 3]
    assert result.metrics["tensors"] == 5  # x, mm, pre, y, head/score

    conv_dir = tmp_path / "build" / "convert"
    conv_dir.mkdir(parents=True)
    emulated_model(conv_dir / "model.onnx")
    ctx2 = _ctx(tmp_path, "dump", {}, {"model": conv_dir}, upstream={"model": Upstream("convert", "convert", conv_dir)},
                name="t")
    DumpKind().run(ctx2)
    assert json.loads((ctx2.out_dir / "index.json").read_text())["fusions"] is True


def test_dump_stage_memory_budget_runs_segments_with_the_same_bytes(tmp_path):
    linear_model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(5).standard_normal((6, 3)).astype(np.float32))
    inputs = {"model": tmp_path / "m.onnx", "inputs": tmp_path / "x.npy"}
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()  # two workspaces: no shared dump between them
    small = _ctx(tmp_path / "a", "dump", {"memory_budget_mb": 1e-5}, inputs, name="small")  # ~10 bytes
    big = _ctx(tmp_path / "b", "dump", {}, inputs, name="big")
    assert DumpKind().run(small).info["chunks"] == 4 and DumpKind().run(big).info["chunks"] == 1
    assert "4 segment(s)" in small.log.getvalue() and "dump: segment 4/4: 1 nodes, 1 tensors" in small.log.getvalue()
    assert (small.out_dir / "index.json").read_bytes() == (big.out_dir / "index.json").read_bytes()
    for name in sorted(p.name for p in (big.out_dir / "tensors").iterdir()):
        assert (small.out_dir / "tensors" / name).read_bytes() == (big.out_dir / "tensors" / name).read_bytes()


def _cli(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.main(parser.parse_args(argv))


def test_cli_infer_and_dump(tmp_path, capsys):
    from ascendpipe.cli import dump as dump_cli
    from ascendpipe.cli import infer as infer_cli

    path, w, b = linear_model(tmp_path / "m.onnx")
    x = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert _cli(infer_cli, ["--model", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "i"),
                            "--batch_size", "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["batch_size"] == 2 and shown["samples"] == 4
    assert _cli(dump_cli, ["--model", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "d"),
                           "--no-fusions"]) == 0
    assert "dumped 5 tensors (fusions off)" in capsys.readouterr().out
    index = json.loads((tmp_path / "d/index.json").read_text())
    y_entry = next(t for t in index["tensors"] if t["name"] == "y")
    np.testing.assert_allclose(np.load(tmp_path / "d" / y_entry["file"]), linear_reference(x, w, b)[0], rtol=1e-5, atol=1e-6)


def test_kind_and_cli_modules_import_no_heavy_modules():
    code = ("import sys, ascendpipe.stages.infer, ascendpipe.stages.dump, ascendpipe.cli.infer, ascendpipe.cli.dump, "
            "ascendpipe.backends.onnxruntime.stages, ascendpipe.inputs\n"
            "heavy = [m for m in ('onnx', 'onnxruntime', 'torch', 'sklearn') if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
