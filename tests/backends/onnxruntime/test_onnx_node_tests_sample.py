"""One ONNX node test per op family through standalone convert + infer (bench/onnx_node_tests.py
runs them all, in five modes): none crashes, none is wrong, and a refusal is only for what the
device has no such thing as (a sequence or optional input)."""

import warnings

import pytest

from tests import benches

DEVICE_HAS_NO = ("a sequence of tensors", "an optional value")


@pytest.fixture(scope="module")
def bench():
    return benches.load("onnx_node_tests")


def test_one_node_test_per_op_family_converts_and_infers(bench, tmp_path):
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = bench.per_family(bench.load_cases())
    assert len(cases) > 150  # every op family of the installed onnx
    bad, ran = [], 0
    for case in cases:
        result = bench.run_case(case, ("force_fp16", "allow_mix_precision"), tmp_path)
        for mode, (verdict, detail) in result.items() if "skip" not in result else ():
            ran += 1
            if verdict in ("crash", "wrong") or verdict == "refused" and not any(w in detail for w in DEVICE_HAS_NO):
                bad.append(f"{case.name} [{mode}] {verdict}: {detail}")
    assert ran > 250 and not bad, "\n".join(bad)
