"""One ONNX node test per op family through convert and compare with inf, NaN and 0-d float16 values
(issue 42): a performance change broke compare on a 0-d float16 tensor holding inf or NaN and no test
noticed. Each family's first test is fed its own inputs with inf, -inf and NaN written into every float
input (a 0-d one made inf), converted with force_fp16 and compared in-process; plus every family's
first test whose output is a 0-d float. None may crash (exit 3, an internal error); a refusal (a
sequence input, an op onnxruntime lacks, values onnxruntime will not run) is one line, exit 2."""

import warnings

import numpy as np
import pytest

from tests import benches



@pytest.fixture(scope="module")
def bench():
    return benches.load("onnx_node_tests")


def nonfinite(feeds: dict) -> dict:
    """The feeds with inf, -inf and NaN in the first elements of every float input; a 0-d one is inf."""
    out = {}
    for name, value in feeds.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
            value = value.copy()
            flat = value.reshape(-1)
            for i, special in enumerate((np.inf, np.nan, -np.inf)[:flat.size]):
                flat[i] = special
        out[name] = value
    return out


def zero_d_output(case) -> bool:
    from onnx import TensorProto

    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)
    return any(o.type.HasField("tensor_type") and o.type.tensor_type.elem_type in floats
               and o.type.tensor_type.HasField("shape") and len(o.type.tensor_type.shape.dim) == 0
               for o in case.model.graph.output)


def selected(bench) -> list:
    """The first test of each op family, and the first of each family with a 0-d float output."""
    cases = bench.load_cases()
    picked = bench.per_family(cases)
    names = {c.name for c in picked}
    families = set()
    for case in cases:
        family = bench.family(case)
        if family not in families and not case.name.endswith("_expanded") and zero_d_output(case):
            families.add(family)
            if case.name not in names:
                picked.append(case)
    return picked


def test_every_op_family_compares_inf_nan_and_0d_float16_without_crashing(bench, tmp_path):
    import onnx
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = selected(bench)
        assert len(cases) > 150  # every op family of the installed onnx
        zero_d = [c.name for c in cases if zero_d_output(c)]
        assert len(zero_d) >= 5, zero_d  # a determinant, a dot product, losses: the 0-d float16 path is exercised
        bad, compared = [], 0
        for case in cases:
            feeds = bench.npz_feeds(nonfinite(bench.feeds_of(case)))
            folder = tmp_path / case.name
            folder.mkdir()
            onnx.save(case.model, str(folder / "model.onnx"))
            np.savez(folder / "inputs.npz", **feeds)
            code, line = bench.cli(["convert", "--model", str(folder / "model.onnx"), "--output", str(folder / "conv"),
                                    "--precision-mode", "force_fp16"])
            if code == 0:
                argv = ["compare", "--golden", str(folder / "model.onnx"), "--target", str(folder / "conv"),
                        "--output", str(folder / "cmp")]
                code, line = bench.cli(argv + (["--input", str(folder / "inputs.npz")] if feeds else []))
                compared += code in (0, 1)
            # exit 2 is a refusal in one line (a sequence input, an op onnxruntime lacks, values it will
            # not run); anything else but 0 and 1 is a crash
            if code not in (0, 1, 2) or "internal error" in line or "Traceback" in line:
                bad.append(f"{case.name}: exit {code}: {line}")
    assert compared > 100 and not bad, "\n".join(bad)
