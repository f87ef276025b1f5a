"""The ascend backend's precision options for Atlas A2/A3 (docs/emulation.md, "SoC classes and modes"):
``--precision_mode_v2`` and ``--allow_hf32`` reach atc as the pipeline sets them, and what atc refuses
(bf16 on a SoC without it, force_lowerprecision, both precision options) is refused before it runs;
the atc double enforces the same rules, each citing GE's sources."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ascendpipe.backends.ascend import stages
from ascendpipe.errors import UserError
from tests.backends.ascend.test_stages_with_doubles import _recording


def _convert(make_ctx, tiny_model, params):
    runner = _recording()
    ctx = make_ctx("convert", "convert", params, inputs={"model": tiny_model}, runner=runner)
    stages.convert(ctx)
    return runner.calls[0]


@pytest.mark.parametrize("params,expected,absent", [
    ({"precision_mode_v2": "origin", "allow_hf32": True}, ["--precision_mode_v2=origin", "--allow_hf32=true"],
     "--precision_mode="),
    ({"precision_mode_v2": "mixed_bfloat16"}, ["--precision_mode_v2=mixed_bfloat16"], "--allow_hf32"),
    ({"precision_mode": "must_keep_origin_dtype", "allow_hf32": False}, ["--precision_mode=must_keep_origin_dtype",
                                                                          "--allow_hf32=false"], "--precision_mode_v2"),
    # the documented default (conv on, matmul off) is atc's own: no option
    ({"precision_mode_v2": "origin", "allow_hf32": {"conv": True, "matmul": False}}, ["--precision_mode_v2=origin"],
     "--allow_hf32"),
])
def test_atc_gets_precision_mode_v2_and_allow_hf32_as_the_pipeline_sets_them(cann_env, tiny_model, make_ctx, params,
                                                                            expected, absent):
    argv = _convert(make_ctx, tiny_model, {"soc_version": "Ascend910B1", **params})
    for option in expected:
        assert option in argv
    assert not any(a.startswith(absent) for a in argv)


def test_a_switch_mix_atc_cannot_spell_is_refused(cann_env, tiny_model, make_ctx):
    with pytest.raises(UserError, match="no atc spelling"):
        _convert(make_ctx, tiny_model, {"soc_version": "Ascend910B1", "precision_mode_v2": "origin",
                                        "allow_hf32": {"conv": False, "matmul": True}})


@pytest.mark.parametrize("params", [{"precision_mode": "allow_mix_precision_bf16"}, {"precision_mode_v2": "mixed_bfloat16"},
                                    {"precision_mode": "allow_fp32_to_bf16"}])
def test_bf16_is_refused_on_310p_before_atc_runs(cann_env, tiny_model, make_ctx, params):
    with pytest.raises(UserError, match="Current soc not support dtype of BFloat16"):
        _convert(make_ctx, tiny_model, {"soc_version": "Ascend310P3", **params})


def test_force_lowerprecision_and_hif8_outside_950_are_refused(cann_env, tiny_model, make_ctx):
    with pytest.raises(UserError, match="E10001"):
        _convert(make_ctx, tiny_model, {"soc_version": "Ascend910B1", "precision_mode": "force_lowerprecision"})
    with pytest.raises(UserError, match="only on Ascend 950"):
        _convert(make_ctx, tiny_model, {"soc_version": "Ascend910B1", "precision_mode_v2": "mixed_hif8"})
    argv = _convert(make_ctx, tiny_model, {"soc_version": "Ascend950PR", "precision_mode_v2": "cube_hif8"})
    assert "--precision_mode_v2=cube_hif8" in argv


@pytest.mark.parametrize("extra,message", [
    (["--soc_version=Ascend310P3", "--precision_mode=allow_mix_precision_bf16"], "Current soc not support dtype of BFloat16"),
    (["--soc_version=Ascend910A", "--precision_mode_v2=mixed_bfloat16"], "Current soc not support dtype of BFloat16"),
    (["--soc_version=Ascend910B1", "--precision_mode=force_lowerprecision"], "bad --precision_mode"),
    (["--soc_version=Ascend910B1", "--allow_hf32=1"], "must be true or false"),
    (["--soc_version=Ascend910B1", "--precision_mode=force_fp16", "--precision_mode_v2=fp16"], "cannot be combined"),
])
def test_the_atc_double_refuses_what_atc_refuses(cann_env, tiny_model, tmp_path, extra, message):
    from tests.backends.ascend.conftest import DOUBLES

    done = subprocess.run([sys.executable, str(DOUBLES / "toolkit/bin/atc"), "--framework=5", f"--model={tiny_model}",
                           f"--output={tmp_path}/m", *extra], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_the_atc_double_takes_bf16_and_allow_hf32_on_a2(cann_env, tiny_model, tmp_path):
    from tests.backends.ascend.conftest import DOUBLES

    done = subprocess.run([sys.executable, str(DOUBLES / "toolkit/bin/atc"), "--framework=5", f"--model={tiny_model}",
                           f"--output={tmp_path}/m", "--soc_version=Ascend910B1", "--precision_mode_v2=mixed_bfloat16",
                           "--allow_hf32=true"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
