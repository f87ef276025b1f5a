"""A decoder's prefill with an empty KV cache (past length 0) through a pipeline's dump, infer and
compare stages, as the standalone commands run it (issue 50 item 2). The pipeline's stages key their
shared dumps on the feeds' bytes, and an empty feed once crashed there (``memoryview: cannot cast view
with zeros in shape or strides``) where standalone compare, dump and fix ran.

Two models: the torch decoder layer of tests/fix/transformer_models.py (``llama``: RMSNorm, RoPE, SDPA
over ``past_key``/``past_value`` [1, 2, past, 16]; ``scaled``: its RMSNorm's mean of squares past
fp16's range), and an onnx.helper attention step whose graph holds an empty tensor of its own (the
cache scaled by a Mul, 0 rows long) and returns it as an output."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.store.dump_cache import feeds_digest

DIM = 16


def _cli(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=cwd, capture_output=True, text=True)


def _ok(cwd: Path, *args) -> str:
    done = _cli(cwd, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_an_empty_feed_is_keyed_by_its_shape_and_a_full_one_keeps_its_key():
    empty = np.zeros((1, 2, 0, 16), np.float32)
    assert feeds_digest({"past_key": empty}) == feeds_digest({"past_key": empty.copy()})
    assert feeds_digest({"past_key": empty}) != feeds_digest({"past_key": np.zeros((1, 2, 0, 8), np.float32)})
    assert feeds_digest({"past_key": empty}) != feeds_digest({"past_key": np.zeros((1, 2, 0, 16), np.float16)})
    # the key of a feed with bytes is what it was before empty feeds were taken (cached dumps stay found)
    ids = np.arange(8, dtype=np.int64).reshape(1, 8)
    h = hashlib.sha256()
    for name, array in (("input_ids", ids), ("past_key", empty)):
        h.update(json.dumps([name, array.dtype.str, list(array.shape)]).encode())
        h.update(array.tobytes())
    assert feeds_digest({"past_key": empty, "input_ids": ids}) == h.hexdigest()


# --- the torch decoder: first failure and output cosine as standalone compare gives them ------------------

@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    pytest.importorskip("torch")
    from tests.fix import transformer_models as tm

    root = tmp_path_factory.mktemp("prefill")
    (root / ".ascendpipe").mkdir()
    tm.build("llama", root / "models/llama.onnx", scaled=True)
    feeds = tm.inputs("llama", past=0)
    assert feeds["past_key"].shape == (1, 2, 0, 16) and feeds["input_ids"].shape == (1, 8)
    (root / "data").mkdir()
    np.savez(root / "data/prefill.npz", **feeds)
    (root / "pipeline.yaml").write_text("""\
stages:
  convert:
    kind: convert
    model: models/llama.onnx
    matrix:
      fp16: {precision_mode: force_fp16}
      fp32: {precision_mode: force_fp32}
  dump: {kind: dump, model: convert, inputs: data/prefill.npz}
  dump_golden: {kind: dump, model: models/llama.onnx, inputs: data/prefill.npz}
  infer: {kind: infer, model: convert, inputs: data/prefill.npz}
  compare: {kind: compare, golden: models/llama.onnx, target: convert, inputs: data/prefill.npz}
  compare_dumps: {kind: compare, golden: dump_golden, target: dump}
""")
    out = _ok(root, "build", "pipeline.yaml")
    return root, out


def test_the_prefill_pipeline_builds_every_stage(llama):
    root, out = llama
    assert "FAILED" not in out
    assert "11 stages: 11 ran" in out, out
    index = json.loads((root / "build/dump__fp16/index.json").read_text())
    shapes = {t["name"]: t["shape"] for t in index["tensors"]}
    assert shapes["past_key"] == shapes["past_value"] == [1, 2, 0, 16]
    present = np.load(root / "build/infer__fp16/outputs/present_key.npy")
    assert present.shape == (1, 2, 8, 16)  # the cache after the prefill: the 8 new positions only


def test_pipeline_compare_names_what_standalone_compare_names(llama):
    root, _ = llama
    for variant, failing in (("fp16", True), ("fp32", False)):
        piped = json.loads((root / f"build/compare__{variant}/result.json").read_text())
        alone = json.loads(_ok(root, "compare", "--golden", "models/llama.onnx", "--target", f"build/convert__{variant}",
                               "--input", "data/prefill.npz", "--json"))
        assert (piped["first_failure"] or {}).get("op_name") == (alone["first_failure"] or {}).get("op_name")
        assert piped["summary"]["output_cosine"] == pytest.approx(alone["summary"]["output_cosine"], abs=1e-9)
        assert (piped["first_failure"] is not None) is failing
        if failing:  # the scaled RMSNorm's mean of squares (~1.6e5) overflows fp16: the layer's output is lost
            assert piped["first_failure"]["op_name"] == "/ln1/ReduceMean"
            assert piped["summary"]["output_cosine"] < 0.5
        else:
            assert piped["summary"]["output_cosine"] > 0.9999
    # the compare of the two dump stages reads the same tensors
    dumps = json.loads((root / "build/compare_dumps__fp16/result.json").read_text())
    assert dumps["first_failure"]["op_name"] == "/ln1/ReduceMean"


def test_pipeline_dump_holds_what_standalone_dump_holds(llama, tmp_path):
    root, _ = llama
    _ok(root, "dump", "--model", "build/convert__fp16", "--input", "data/prefill.npz", "--output", str(tmp_path / "d"))
    alone = json.loads((tmp_path / "d/index.json").read_text())["tensors"]
    piped = json.loads((root / "build/dump__fp16/index.json").read_text())["tensors"]
    assert [(t["name"], t["shape"]) for t in piped] == [(t["name"], t["shape"]) for t in alone]
    for a, b in zip(alone, piped):
        np.testing.assert_array_equal(np.load(tmp_path / "d" / a["file"]), np.load(root / "build/dump__fp16" / b["file"]))


# --- an empty tensor inside the graph and as an output; batching over a folder --------------------------

def _attention_step(path: Path) -> Path:
    """x [batch, seq, 16] and a cache past_key/past_value [batch, past, 16] -> ctx, present_key,
    present_value, and past_rotated (the cache through a Mul: [batch, 0, 16] for an empty cache)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((DIM, DIM)) / 4).astype(np.float32), n) for n in ("wq", "wk", "wv")]
    scalars = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
               numpy_helper.from_array(np.array(4.0, np.float32), "sqrt_d")]
    node = helper.make_node
    nodes = [node("MatMul", ["x", "wq"], ["q"], name="q_proj"), node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
             node("MatMul", ["x", "wv"], ["v"], name="v_proj"),
             node("Mul", ["past_key", "one"], ["past_rotated"], name="rotate_past"),
             node("Concat", ["past_rotated", "k"], ["present_key"], name="concat_key", axis=1),
             node("Concat", ["past_value", "v"], ["present_value"], name="concat_value", axis=1),
             node("Transpose", ["present_key"], ["key_t"], name="key_t", perm=[0, 2, 1]),
             node("MatMul", ["q", "key_t"], ["scores"], name="scores"),
             node("Div", ["scores", "sqrt_d"], ["scaled"], name="scale"),
             node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
             node("MatMul", ["probs", "present_value"], ["ctx"], name="ctx")]
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "prefill", [
        helper.make_tensor_value_info("x", f, ["batch", "seq", DIM]),
        helper.make_tensor_value_info("past_key", f, ["batch", "past", DIM]),
        helper.make_tensor_value_info("past_value", f, ["batch", "past", DIM])], [
        helper.make_tensor_value_info("ctx", f, ["batch", "seq", DIM]),
        helper.make_tensor_value_info("present_key", f, ["batch", "total", DIM]),
        helper.make_tensor_value_info("present_value", f, ["batch", "total", DIM]),
        helper.make_tensor_value_info("past_rotated", f, ["batch", "past", DIM])], weights + scalars)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def test_an_empty_tensor_in_the_graph_and_among_the_outputs(tmp_path):
    root = tmp_path
    (root / ".ascendpipe").mkdir()
    _attention_step(root / "models/step.onnx")
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((3, 5, DIM)).astype(np.float32),
             "past_key": np.zeros((3, 0, DIM), np.float32), "past_value": np.zeros((3, 0, DIM), np.float32)}
    (root / "data/dir").mkdir(parents=True)
    np.savez(root / "data/prefill.npz", **feeds)
    np.savez(root / "data/dir/a.npz", **{k: v[:2] for k, v in feeds.items()})
    np.savez(root / "data/dir/b.npz", **{k: v[2:] for k, v in feeds.items()})
    (root / "pipeline.yaml").write_text("""\
stages:
  convert: {kind: convert, model: models/step.onnx, params: {precision_mode: force_fp16}}
  dump: {kind: dump, model: convert, inputs: data/dir, params: {max_batch: 1}}
  infer: {kind: infer, model: convert, inputs: data/dir, params: {batch_size: 1}}
  compare: {kind: compare, golden: models/step.onnx, target: convert, inputs: data/dir}
""")
    out = _ok(root, "build", "pipeline.yaml")
    assert "4 stages: 4 ran" in out, out

    # infer in batches of one, over two files: the same outputs as standalone infer of the whole input
    _ok(root, "infer", "--model", "build/convert", "--input", "data/prefill.npz", "--output", str(tmp_path / "i"))
    for name in ("ctx", "present_key", "present_value", "past_rotated"):
        piped, alone = np.load(root / f"build/infer/outputs/{name}.npy"), np.load(tmp_path / f"i/outputs/{name}.npy")
        assert piped.shape == alone.shape
        np.testing.assert_allclose(piped, alone, rtol=1e-6, atol=1e-6)
    assert np.load(root / "build/infer/outputs/past_rotated.npy").shape == (3, 0, DIM)

    index = json.loads((root / "build/dump/index.json").read_text())
    shapes = {t["name"]: t["shape"] for t in index["tensors"]}
    assert shapes["past_rotated"] == [1, 0, DIM] and shapes["ctx"] == [1, 5, DIM]  # max_batch: 1 sample

    result = json.loads((root / "build/compare/result.json").read_text())
    empty = next(r for r in result["rows"] if r["op_name"] == "rotate_past")
    assert empty["empty"] and not empty["failed"]
    assert result["first_failure"] is None
    assert result["summary"]["output_cosine"] > 0.9999
    alone = json.loads(_ok(root, "compare", "--golden", "models/step.onnx", "--target", "build/convert",
                           "--input", "data/dir", "--json"))
    assert alone["summary"]["output_cosine"] == pytest.approx(result["summary"]["output_cosine"], abs=1e-9)
    assert [r["op_name"] for r in alone["rows"]] == [r["op_name"] for r in result["rows"]]
