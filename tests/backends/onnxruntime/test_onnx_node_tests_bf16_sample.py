"""ONNX node tests in the bf16 modes on Ascend910B1 (bench/onnx_node_tests.py runs them all), against
the per-tensor bf16 reference (ml_dtypes): one test of every third op family through standalone convert
+ infer; none crashes, none is wrong, and a refusal is only for what the device has no such thing as."""

import warnings

import pytest

from tests import benches

pytest.importorskip("ml_dtypes", reason="ml_dtypes (installed with onnx) is the bf16 reference")

DEVICE_HAS_NO = ("a sequence of tensors", "an optional value")


@pytest.fixture(scope="module")
def bench():
    return benches.load("onnx_node_tests")


def test_every_third_op_family_in_the_bf16_modes(bench, tmp_path):
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = bench.per_family(bench.load_cases())[::3]
    assert len(cases) > 50
    bad, ran = [], 0
    for case in cases:
        result = bench.run_case(case, ("force_lowerprecision", "allow_mix_precision_bf16"), tmp_path, "Ascend910B1")
        for mode, (verdict, detail) in result.items() if "skip" not in result else ():
            ran += 1
            if verdict in ("crash", "wrong") or verdict == "refused" and not any(w in detail for w in DEVICE_HAS_NO):
                bad.append(f"{case.name} [{mode}] {verdict}: {detail}")
    assert ran > 90 and not bad, "\n".join(bad)


def test_the_bf16_reference_is_not_the_fp16_one(bench):
    # the judge's bf16 step is 8x fp16's: a value off by 3 fp16 steps passes bf16's, not fp16's
    import numpy as np

    ref = np.float32([1.0, 2.0])
    got = np.float32([1.0 + 3 * 2 ** -10, 2.0])
    assert bench.judge(got, ref, ref, 1, "bfloat16") is None
    assert bench.judge(got, ref, ref, 1, "float16") is not None
