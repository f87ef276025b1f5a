"""Standalone fix on the modelzoo models, with every answer checked independently: the emulated
model is converted again with that keep_dtype list, run on onnxruntime, and its output compared
with numpy's cosine against the fp32 model's; dropping any kept op must break it."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

from tests import modelzoo
from tests import modelzoo as fixmodels


def _run(model_path, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _cosine(a, b) -> float:
    a, b = np.nan_to_num(np.asarray(a, np.float64).ravel(), posinf=0, neginf=0), np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na and nb else 0.0


def _emulated_cosine(model, feeds, keep, tmp_path, fusion=None) -> float:
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    out = tmp_path / f"check-{'-'.join(keep) or 'none'}-{'-'.join(fusion or {}) or 'fused'}"
    converted = convert_model(model, out, resolve({"precision_mode": "force_fp16", "keep_dtype": list(keep),
                                                   "fusion_switch": dict(fusion or {})}))
    golden = _run(model, feeds)
    target = _run(converted.model_path, feeds)
    return min(_cosine(t, g) for t, g in zip(target, golden))


CASES = {
    "l2norm": (modelzoo.l2norm_model, modelzoo.l2norm_inputs, ["square", "sum", "sqrt"]),
    "addn": (modelzoo.addn_model, modelzoo.addn_inputs, ["sum"]),
    "epsilon": (modelzoo.epsilon_model, modelzoo.epsilon_inputs, None),  # minimality checked below
    "folded_bn": (fixmodels.folded_bn_model, fixmodels.folded_bn_inputs, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_answer_restores_the_output_and_every_kept_op_is_needed(name, tmp_path):
    from ascendpipe.fix.run import fix_standalone

    build, inputs, expected = CASES[name]
    model = build(tmp_path / f"{name}.onnx")
    feeds = inputs(0)
    np.savez(tmp_path / "x.npz", **feeds)
    report = fix_standalone(model, input_path=tmp_path / "x.npz", min_cosine=0.99, output=tmp_path / "out")
    assert report.outcome.passed and report.outcome.minimal
    if expected is not None:
        assert report.keep_dtype == expected
    assert _emulated_cosine(model, feeds, [], tmp_path) < 0.99  # the failure is real
    assert _emulated_cosine(model, feeds, report.keep_dtype, tmp_path, report.fusion_switch) >= 0.99
    for op in report.keep_dtype:
        fewer = [k for k in report.keep_dtype if k != op]
        assert _emulated_cosine(model, feeds, fewer, tmp_path, report.fusion_switch) < 0.99, f"{op} was kept but is not needed"
    for rule in report.fusion_switch:
        fewer_off = {r: v for r, v in report.fusion_switch.items() if r != rule}
        assert _emulated_cosine(model, feeds, report.keep_dtype, tmp_path, fewer_off) < 0.99, f"{rule} off is not needed"
    assert (tmp_path / "out" / "keep_dtype.cfg").read_text().split() == report.keep_dtype
    assert json.loads((tmp_path / "out" / "fix.json").read_text())["keep_dtype"] == report.keep_dtype


def test_l2norm_overflow_is_real_in_numpy():
    # the reason sqrt must be kept: the fp32 sum read through fp16 is inf
    x = modelzoo.l2norm_inputs(0)["features"].astype(np.float64)
    total = (x * x).sum(axis=1)
    with np.errstate(over="ignore"):
        assert np.isinf(total.astype(np.float16)).all() and (np.sqrt(total) < 65504).all()


def test_model_without_failure_needs_nothing(tmp_path):
    from ascendpipe.fix.run import fix_standalone

    model = modelzoo.conv_bn_relu_model(tmp_path / "cbr.onnx")
    report = fix_standalone(model, min_cosine=0.99)
    assert report.outcome.passed and report.keep_dtype == [] and len(report.outcome.attempts) == 1
    assert report.outcome.final.output_cosine >= 0.99


def _cli(argv):
    from ascendpipe.cli.main import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def test_cli_json_and_exit_codes(tmp_path, capsys):
    model = modelzoo.l2norm_model(tmp_path / "l2.onnx")
    np.save(tmp_path / "x.npy", modelzoo.l2norm_inputs(0)["features"])
    code, text = _cli(["fix", "--golden", str(model), "--input", str(tmp_path / "x.npy"),
                       "--precision_mode", "force_fp16", "--min-cosine", "0.99", "--json"])
    data = json.loads(text)
    assert code == 0
    assert data["keep_dtype"] == ["square", "sum", "sqrt"]
    assert data["fusion_switch"] == {}  # the UB-fused kernel's members keep their dtypes: keep_dtype alone restores
    assert data["attempts"] == len(data["table"]) and data["metric"] >= 0.99
    code, text = _cli(["fix", "--golden", str(model), "--input", str(tmp_path / "x.npy"), "--max-attempts", "1"])
    assert code == 1 and "target not met" in text and "--max-attempts 1" in text


@pytest.mark.parametrize("argv, needle", [
    (["fix"], "give a PIPELINE file"),
    (["fix", "--golden", "missing.onnx"], "does not exist"),
    (["fix", "p.yaml", "--golden", "m.onnx"], "not both"),
    (["fix", "p.yaml"], "needs --metric"),
])
def test_user_errors_are_one_line(argv, needle, tmp_path, monkeypatch, capsys):
    from ascendpipe.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
