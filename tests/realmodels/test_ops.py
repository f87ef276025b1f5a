"""Ops that fp16 cannot change or ATC would refuse, keep_dtype's one rule for cube ops, and keep
lists as users paste them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.errors import UserError
from ascendpipe.precision.settings import resolve
from tests import modelzoo


def _run(path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], capture_output=True, text=True)


def test_integer_and_quantized_ops_are_never_fp16_nor_keep_candidates(tmp_path):
    model = modelzoo.int8_dynamic_model(tmp_path / "m.onnx")
    result = convert_model(model, tmp_path / "out", resolve({"precision_mode": "force_fp16"}))
    nodes = json.loads((tmp_path / "out" / "precision_plan.json").read_text())["nodes"]
    for name in ("quant", "mm_int", "bias_int"):
        assert nodes[name]["dtype"] == "other" and nodes[name]["keepable"] is False, name
    assert {n for n, e in nodes.items() if e["keepable"]} == {"to_float", "scales", "dequant"}
    assert result.counts == {"float16": 3, "float32": 0, "other": 3}
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    golden, target = _run(model, {"x": x})[0], _run(result.model_path, {"x": x})[0]
    np.testing.assert_allclose(target, golden, rtol=2e-3)  # int8 arithmetic exact; fp16 only at the float end


def test_a_custom_domain_op_is_refused_or_emulated_when_allowed_and_listed(tmp_path):
    model = modelzoo.custom_domain_model(tmp_path / "m.onnx")
    with pytest.raises(UserError) as err:
        convert_model(model, tmp_path / "refused", resolve({}))
    assert "com.microsoft.Gelu at 'gelu'" in err.value.message and err.value.location.op == "gelu"
    assert not (tmp_path / "refused" / "model.onnx").exists()
    result = convert_model(model, tmp_path / "out", resolve({}), allow_custom_ops=True)
    listed = [{"op_name": "gelu", "op_type": "Gelu", "domain": "com.microsoft"}]
    record = json.loads((tmp_path / "out" / "convert.json").read_text())
    assert record["custom_domain_ops"] == listed and record["allow_custom_ops"] is True
    assert json.loads((tmp_path / "out" / "precision_plan.json").read_text())["custom_domain_ops"] == listed
    assert len(result.warnings) == 1 and "gelu (com.microsoft.Gelu)" in result.warnings[0]
    assert "ATC would reject" in result.warnings[0]
    refused = _cli("convert", "--model", str(model), "--output", str(tmp_path / "cli0"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "com.microsoft.Gelu at 'gelu'" in refused.stderr and "--allow-custom-ops" in refused.stderr
    cli = _cli("convert", "--model", str(model), "--output", str(tmp_path / "cli"), "--allow-custom-ops")
    assert cli.returncode == 0 and "gelu (com.microsoft.Gelu)" in cli.stderr
    plain = convert_model(modelzoo.l2norm_model(tmp_path / "l2.onnx"), tmp_path / "l2", resolve({}))
    assert plain.warnings == [] and json.loads((tmp_path / "l2" / "convert.json").read_text())["custom_domain_ops"] == []
    assert "allow_custom_ops" not in json.loads((tmp_path / "l2" / "convert.json").read_text())


def test_a_40_op_keep_list_on_the_command_line_is_a_list_not_a_file(tmp_path):
    model = modelzoo.long_chain_model(tmp_path / "m.onnx")
    ops = modelzoo.long_chain_ops()
    assert len(",".join(ops)) > 255  # longer than a file name may be
    cli = _cli("convert", "--model", str(model), "--output", str(tmp_path / "out"), "--keep-dtype", ",".join(ops))
    assert cli.returncode == 0, cli.stderr
    assert "0 ops fp16, 40 ops fp32" in cli.stdout
    assert (tmp_path / "out" / "keep_dtype.cfg").read_text().split() == ops
    # a value ending in .cfg is a file, and a missing one says so
    missing = _cli("convert", "--model", str(model), "--output", str(tmp_path / "o2"), "--keep-dtype", "keep.cfg")
    assert missing.returncode == 2 and "cannot read keep_dtype file" in missing.stderr
    (tmp_path / "keep").write_text(ops[0] + "\n")  # an existing file without the suffix is still a file
    settings = resolve({"keep_dtype": str(tmp_path / "keep")})
    assert settings.keep_dtype == [ops[0]]


def test_keep_dtype_naming_an_op_not_in_the_model_suggests_close_names(tmp_path):
    model = modelzoo.if_outer_model(tmp_path / "m.onnx")
    with pytest.raises(UserError) as err:
        convert_model(model, tmp_path / "out", resolve({"keep_dtype": ["sqare", "inner_then_o", "zzz"]}))
    message = err.value.message
    assert "'sqare' (did you mean 'square'?)" in message
    assert "'inner_then_o' (did you mean 'inner_then_op'" in message  # body ops are names too
    assert "'zzz' not in the model" in message and err.value.location.field == "keep_dtype"


@pytest.mark.parametrize("soc, mode, keep, reads", [
    (None, "force_fp16", ["conv"], "float16"),            # unknown SoC: the cube reads fp16, the input overflows
    ("Ascend310P3", "force_fp16", ["conv"], "float16"),   # Atlas inference: fp16/int8 cube (saturates at 65504)
    ("Ascend910B1", "force_fp16", ["conv"], "hf32"),      # Atlas A2: fp32 cube input, HF32 by default (allow_hf32)
    ("Ascend910B1", "force_fp32", [], "float16"),         # force_fp32: cube fp16 in / fp32 out on every SoC
    ("Ascend910B1", "must_keep_origin_dtype", [], "hf32"),
])
def test_one_keep_dtype_rule_for_cube_ops_per_soc(tmp_path, soc, mode, keep, reads):
    """What a kept (or fp32) Conv reads, per SoC: fp16 (the big input overflows), or fp32 on an A2
    cube, rounded to HF32 while ``allow_hf32``'s conv switch is on (its default; issue 41) and exact
    with it off."""
    model = modelzoo.big_input_conv_model(tmp_path / "m.onnx")
    feeds = modelzoo.big_input_conv_inputs()
    params = {"precision_mode": mode, "keep_dtype": keep, **({"soc_version": soc} if soc else {})}
    golden = _run(model, feeds)[0]
    result = convert_model(model, tmp_path / "out", resolve(params))
    (y,) = _run(result.model_path, feeds)
    entry = json.loads((tmp_path / "out" / "precision_plan.json").read_text())["nodes"]["conv"]
    assert entry["dtype"] == "float32" and entry["reads_fp16"] is (reads == "float16")
    assert entry.get("reads") == ("hf32" if reads == "hf32" else None)
    with np.errstate(invalid="ignore"):
        if reads == "float16":
            assert not np.allclose(y, golden, rtol=1e-5)
            return
        # HF32 keeps 11 mantissa bits of each input: within a few 2^-12 of fp32, never exact here
        assert np.allclose(y, golden, rtol=2.0 ** -9) and not np.allclose(y, golden, rtol=1e-5)
    exact = convert_model(model, tmp_path / "exact", resolve({**params, "allow_hf32": False}))
    np.testing.assert_allclose(_run(exact.model_path, feeds)[0], golden, rtol=1e-5)
