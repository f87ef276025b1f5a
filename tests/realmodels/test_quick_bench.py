"""The real-model bench in its quick form (``bench/real_models.py --quick``), in CI: real architectures
through convert, infer, dump, compare and fix as a user runs them, offline (the models the installed
onnx package ships; the wheel models only when bench/.models already holds them). A performance
change that breaks compare or fix on a real model (issue 42: a 0-d float16 inf crashed three) shows
here as a finding, not weeks later in a bench nobody ran."""

import json

import pytest

from tests import benches



@pytest.fixture(scope="module")
def bench():
    return benches.load("real_models")


def test_quick_real_models_pass_compare_and_fix_without_a_finding(bench, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    code = bench.main(["--quick", "--out", str(tmp_path / "work"), "--json", str(tmp_path / "r.json")])
    printed = capsys.readouterr().out
    results = {r["model"]: r for r in json.loads((tmp_path / "r.json").read_text())}
    assert code == 0 and not any(r["findings"] for r in results.values()), printed
    packaged = [results[k] for k in ("light_squeezenet", "light_shufflenet", "light_inception_v1")]
    assert all("skipped" not in r and r["convert_ok"] for r in packaged), printed
    # the constant-weight nets overflow fp16: compare names a Conv, fix runs on it and says why it stops
    for r in (results["light_squeezenet"], results["light_inception_v1"]):
        assert r["compare"]["outputs_pass"] is False and r["compare"]["overflow_ops"] > 0, printed
        assert r["compare"]["first_failure"]["mechanism"] == "overflow", printed
        assert r["fix"]["passed"] is False and r["fix"]["message"], printed
    assert results["light_shufflenet"]["compare"]["outputs_pass"] is True, printed
    assert results["light_shufflenet"]["output_cosine"] > 0.99, printed
