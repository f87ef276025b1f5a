"""Models whose weights are ONNX external data (every LLM: past protobuf's 2 GB) through convert,
dump and compare: the graph edited without its weights, the converted model written beside its own
weights file (fp16-read weights rounded as they are streamed), the source's file referenced where no
rounding applies, and the same numbers as the same model with its weights inline. The > 2 GB run is
bench/convert_external.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ascendpipe import onnxexternal
from ascendpipe.backends.onnxruntime import dump as D
from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.errors import UserError
from ascendpipe.precision.settings import resolve
from tests import modelzoo


def _inline_copy(path: Path, target: Path) -> Path:
    onnx.save(onnx.load(str(path)), str(target))
    return target


def _run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


FEEDS = {"x": np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32) * 40}


@pytest.mark.parametrize("params", [
    {"precision_mode": "force_fp16"},
    {"precision_mode": "force_fp16", "overflow_mode": "saturation"},
    {"precision_mode": "force_fp16", "keep_dtype": ["side"], "soc_version": "Ascend910B1"},
    {"precision_mode": "allow_mix_precision"},
    # the A2 formats (issue 41) streamed too: bf16 weights, and HF32 reads of a kept MatMul
    {"precision_mode": "force_lowerprecision", "soc_version": "Ascend910B1"},
    {"precision_mode": "allow_mix_precision_bf16", "soc_version": "Ascend910B1"},
    {"precision_mode": "must_keep_origin_dtype", "soc_version": "Ascend910B1", "allow_hf32": True},
])
def test_an_external_model_converts_to_the_same_model_as_its_inline_twin(tmp_path, params):
    external = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx")
    inline = _inline_copy(external, tmp_path / "inline.onnx")
    twin = convert_model(inline, tmp_path / "inline_out", resolve(params))
    result = convert_model(external, tmp_path / "out", resolve(params))
    np.testing.assert_array_equal(_run(result.model_path, FEEDS), _run(twin.model_path, FEEDS))
    assert result.model_path.stat().st_size < 32 << 10  # the graph only (HF32 adds ~24 nodes a read): no 64 KB weight in it
    graph = onnx.load(str(result.model_path), load_external_data=False)
    big = [t for t in graph.graph.initializer if onnxexternal.tensor_nbytes(t) >= 64 << 10]
    assert big and all(onnxexternal.is_external(t) for t in big)
    onnx.checker.check_model(str(result.model_path))  # onnx reads it too (no hard link, locations inside)
    record = json.loads((result.out_dir / "convert.json").read_text())["external_data"]
    assert record["data_file"] == "model.emulated.data" and (result.out_dir / "model.emulated.data").is_file()
    assert json.loads((result.out_dir / "precision_plan.json").read_text())["counts"] == twin.counts


def test_a_weight_no_fp16_op_reads_references_the_source_file_unrounded(tmp_path):
    external = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx")
    # on an A2 SoC a kept MatMul reads fp32: w_up is read in fp16 by 'up' and in fp32 by 'side'
    result = convert_model(external, tmp_path / "out",
                           resolve({"keep_dtype": ["side"], "soc_version": "Ascend910B1"}))
    record = json.loads((result.out_dir / "convert.json").read_text())["external_data"]
    assert set(record["source_files"]) == {"source_weights/ffn.onnx.data"}
    copied = result.out_dir / "source_weights" / "ffn.onnx.data"
    assert copied.read_bytes() == (tmp_path / "src" / "ffn.onnx.data").read_bytes()
    assert os.stat(copied).st_nlink == 1  # onnx refuses a hard-linked weights file
    graph = onnx.load(str(result.model_path), load_external_data=False).graph
    locations = {t.name: onnxexternal.external_info(t)[0] for t in graph.initializer if onnxexternal.is_external(t)}
    assert locations["w_up"] == "source_weights/ffn.onnx.data"  # the fp32 reader's, unrounded
    assert locations["ascendpipe_emu/fp16_init/w_up"] == "model.emulated.data"  # the fp16 reader's copy
    loaded = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(result.model_path)).graph.initializer}
    source = onnx.numpy_helper.to_array(next(t for t in onnx.load(str(external)).graph.initializer if t.name == "w_up"))
    np.testing.assert_array_equal(loaded["w_up"], source)
    from tests.precision.ge_fp16 import ge_fp16

    rounded, expected = loaded["ascendpipe_emu/fp16_init/w_up"], ge_fp16(source)
    assert np.array_equal(np.isnan(rounded), np.isnan(expected))
    np.testing.assert_array_equal(rounded[~np.isnan(rounded)], expected[~np.isnan(expected)])


@pytest.mark.parametrize("overflow_mode", ["saturation", "inf_nan"])
def test_rounding_streams_in_chunks_with_numpys_values(tmp_path, monkeypatch, overflow_mode):
    """Big chunks round through onnxruntime's Cast, small ones through numpy: the same bits as the
    inline model's rounding (numpy, in memory), chunk by chunk, past fp16's range too."""
    from ascendpipe.backends.onnxruntime import external_weights

    external = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx", hidden=128, ffn=1024, scale=3e5)
    inline = _inline_copy(external, tmp_path / "inline.onnx")
    params = resolve({"overflow_mode": overflow_mode})
    twin = {t.name: onnx.numpy_helper.to_array(t)
            for t in onnx.load(str(convert_model(inline, tmp_path / "twin", params).model_path)).graph.initializer}
    for chunk in (external_weights.CHUNK, 70000, 1000):  # whole, through the Cast (and a numpy tail), numpy
        monkeypatch.setattr(external_weights, "CHUNK", chunk)
        result = convert_model(external, tmp_path / f"c{chunk}", params)
        weights = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(result.model_path)).graph.initializer}
        for name in ("w_up", "w_down"):
            assert weights[name].tobytes() == twin[name].tobytes(), (chunk, name)
    # converted as GE's host does in either mode (precision.fp16.host_fp16): past 2^17 +-65504, in [65520, 2^17)
    # a NaN, never inf
    w = weights["w_up"]
    assert not np.isinf(w).any() and np.nanmax(np.abs(w)) == 65504.0 and np.isnan(w).any()


def test_dump_and_compare_read_external_weights_by_reference(tmp_path):
    from ascendpipe.cli.main import main

    external = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx")
    inline = _inline_copy(external, tmp_path / "inline.onnx")
    feeds = {"x": FEEDS["x"]}
    raw, weights_dir, _ = D._model_bytes(external)
    assert weights_dir == external.resolve().parent and len(raw) < 4096  # the graph, small weights inlined
    for budget in (None, 1):  # one run, and a run per op (segments slice the references)
        D.dump_model(external, feeds, tmp_path / f"ext{budget}", fusions=False, memory_budget_bytes=budget)
        D.dump_model(inline, feeds, tmp_path / f"in{budget}", fusions=False, memory_budget_bytes=budget)
        ext = json.loads((tmp_path / f"ext{budget}" / "index.json").read_text())
        ins = json.loads((tmp_path / f"in{budget}" / "index.json").read_text())
        assert [t["name"] for t in ext["tensors"]] == [t["name"] for t in ins["tensors"]]
        for entry in ext["tensors"]:
            np.testing.assert_array_equal(np.load(tmp_path / f"ext{budget}" / entry["file"]),
                                          np.load(tmp_path / f"in{budget}" / entry["file"]))
    convert_model(external, tmp_path / "conv", resolve({}))
    np.save(tmp_path / "x.npy", feeds["x"])
    code = main(["compare", "--golden", str(external), "--target", str(tmp_path / "conv"), "--input",
                 str(tmp_path / "x.npy"), "--output", str(tmp_path / "cmp")])
    assert code == 0
    rows = json.loads((tmp_path / "cmp" / "result.json").read_text())["rows"]
    assert {r["op_name"] for r in rows} >= {"up", "down", "reshape"} and all(r["cosine"] > 0.999 for r in rows)


def test_a_missing_or_escaping_weights_file_is_one_located_line(tmp_path):
    external = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx")
    os.rename(tmp_path / "src" / "ffn.onnx.data", tmp_path / "elsewhere.data")
    with pytest.raises(UserError) as err:
        convert_model(external, tmp_path / "out", resolve({}))
    assert "tensor 'w_up': external data file 'ffn.onnx.data' is missing" in err.value.message
    model = onnx.load(str(external), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../elsewhere.data"
    onnx.save(model, str(external))
    with pytest.raises(UserError) as err:
        convert_model(external, tmp_path / "out", resolve({}))
    assert "location '../elsewhere.data' is not a file inside the model's folder" in err.value.message


def test_a_session_runs_a_model_whose_small_weights_are_external_too(tmp_path):
    """onnxruntime alone refuses it ("Cannot parse data from external tensors": its shape inference
    reads the ReduceSum's axes); the session reads the small ones in and maps the rest."""
    from ascendpipe.backends.onnxruntime.session import make_session

    external = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx")
    with pytest.raises(Exception, match="Cannot parse data from external tensors"):
        ort.InferenceSession(str(external), providers=["CPUExecutionProvider"])
    inline = _inline_copy(external, tmp_path / "inline.onnx")
    got = make_session(external).run(None, FEEDS)[0]
    np.testing.assert_array_equal(got, _run(inline, FEEDS))


def test_a_whole_run_over_big_weights_runs_alone_in_the_gate(tmp_path, monkeypatch):
    """Two dumps at once would each hold their session's weights: past ALONE_WEIGHT_BYTES a whole-model
    run waits until nothing else is held (a 2.4 GB model's compare: 2.6 GB at its peak, not 4.8 GB)."""
    from ascendpipe.backends.onnxruntime import dump_run
    from ascendpipe.backends.onnxruntime.memory_gate import MemoryGate

    held = []

    class Spy(MemoryGate):
        def hold(self, nbytes):
            held.append(nbytes)
            return super().hold(nbytes)

    external = modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx")
    monkeypatch.setattr(D, "fits_without_estimate", lambda *args: False)  # as a big model's weights make it
    D.dump_model(external, FEEDS, tmp_path / "small", fusions=False, gate=Spy(D.TOGETHER_BYTES))
    assert held and held[-1] < D.TOGETHER_BYTES  # 256 KB of weights: its tensors' estimate, as before
    monkeypatch.setattr(dump_run, "ALONE_WEIGHT_BYTES", 200 << 10)
    D.dump_model(external, FEEDS, tmp_path / "big", fusions=False, gate=Spy(D.TOGETHER_BYTES))
    assert held[-1] > D.TOGETHER_BYTES  # more than the gate holds: it runs alone


def test_an_inline_model_the_conversion_takes_past_the_limit_is_written_with_external_data(tmp_path, monkeypatch):
    """An fp16 copy of a weight also read in fp32 makes the converted model bigger than its source: past
    protobuf's limit (here lowered) its weights go to model.emulated.data instead of failing to serialise."""
    from ascendpipe.backends.onnxruntime import convert as C

    inline = _inline_copy(modelzoo.external_ffn_model(tmp_path / "src" / "ffn.onnx"), tmp_path / "inline.onnx")
    params = resolve({"keep_dtype": ["side"], "soc_version": "Ascend910B1"})
    small = convert_model(inline, tmp_path / "small", params)
    monkeypatch.setattr(C, "INLINE_LIMIT", 200 << 10)  # the source's 260 KB fit; the converted 390 KB do not
    big = convert_model(inline, tmp_path / "big", params)
    assert not (tmp_path / "small" / "model.emulated.data").exists()
    assert (tmp_path / "big" / "model.emulated.data").is_file() and big.model_path.stat().st_size < 8 << 10
    record = json.loads((tmp_path / "big" / "convert.json").read_text())["external_data"]
    assert record["data_file"] == "model.emulated.data"
    np.testing.assert_array_equal(_run(big.model_path, FEEDS), _run(small.model_path, FEEDS))
