"""msit's columns in our result.csv equal msaccucmp's own output, cell for cell.

The reference is msaccucmp itself (package ``mindstudio-probe``, ``msprobe/msaccucmp``): its
``AlgorithmManager(None, "all", None).compare(npu, golden, args)`` is what fills msit's result CSV.
It is not in the test extra: its wheel pulls tensorboard, matplotlib, pandas and skl2onnx for ten
numpy functions. Install it (``pip install mindstudio-probe``) or put an unpacked wheel on PYTHONPATH
to run this module; it skips with that reason otherwise. The pairs are also run through our writer
(``compare_dumps`` + ``csv_text``) so the cells checked are the ones a user reads.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.compare import msaccucmp as ours
from ascendpipe.compare.runner import compare_dumps
from ascendpipe.compare.writers import csv_text
from tests.compare.dumps import write_dump


def _reference():
    spec = importlib.util.find_spec("msprobe")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mindstudio-probe is not installed (pip install --no-deps mindstudio-probe, as .ci/run does); it is "
                    "left out of the test extra for its tensorboard/matplotlib/pandas dependencies, which msaccucmp's "
                    "algorithms do not need")
    root = Path(list(spec.submodule_search_locations)[0]) / "msaccucmp"
    if not (root / "algorithm_manager").is_dir():
        pytest.skip(f"this mindstudio-probe has no msaccucmp/algorithm_manager ({root})")
    sys.path.insert(0, str(root))  # msaccucmp imports its modules top-level (`from cmp_utils import ...`)
    try:
        from algorithm_manager.algorithm_manager import AlgorithmManager
    except Exception as exc:  # noqa: BLE001 - any import failure of the reference is a reason to skip
        pytest.skip(f"msaccucmp does not import here: {exc}")
    finally:
        sys.path.remove(str(root))
    return AlgorithmManager(None, "all", None)


def _msaccucmp(manager, golden, target, t_file="t.npy", g_file="g.npy"):
    args = {"my_output_dump_file": t_file, "ground_truth_dump_file": g_file,
            "shape_type": __import__("cmp_utils.utils", fromlist=["x"]).get_shape_type(np.asarray(target).shape)}
    saved = np.geterr()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as msaccucmp runs: warnings are printed, values kept
            result, messages = manager.compare(np.asarray(target).reshape(-1), np.asarray(golden).reshape(-1), args)
    finally:
        np.seterr(**saved)  # msaccucmp sets numpy's error state globally
    return dict(zip(manager.get_result_title(), result)), messages


def _pairs():
    rng = np.random.default_rng(20)
    r = rng.standard_normal(1000).astype(np.float32)
    big = rng.standard_normal(1 << 20).astype(np.float32)
    z = np.zeros(64, np.float32)
    ints = rng.integers(-1000, 1000, 64).astype(np.int32)
    bools = rng.random(64) > 0.5
    with np.errstate(over="ignore"):
        ovf = (r * 1e5).astype(np.float16)
    pairs = {
        "random": (r, r + rng.standard_normal(1000).astype(np.float32) * 0.01),
        "identical": (r, r.copy()),
        "fp16 rounded": (r, r.astype(np.float16)),
        "negated": (r, -r),
        "golden all zero": (z, rng.standard_normal(64).astype(np.float32)),
        "target all zero": (rng.standard_normal(64).astype(np.float32), z),
        "both all zero": (z, z.copy()),
        "target has inf": (r[:64], np.where(np.arange(64) == 3, np.inf, r[:64]).astype(np.float32)),
        "target has nan": (r[:64], np.where(np.arange(64) == 5, np.nan, r[:64]).astype(np.float32)),
        "golden has inf and nan": (np.array([np.inf, np.nan, 1, 2], np.float32), np.array([1, 2, 3, 4], np.float32)),
        "fp16 overflowed": ((r * 1e5).astype(np.float32), ovf),
        "1e25": (r * np.float32(1e25), r * np.float32(1.001e25)),
        "1e-30": (r * np.float32(1e-30), r * np.float32(1.1e-30)),
        "float64 beyond fp32": (r.astype(np.float64) * 1e200, r.astype(np.float64) * 1.01e200),
        "float64 near 1e155": (r.astype(np.float64) * 1e155, r.astype(np.float64) * 2e155),
        "int32": (ints, ints + 1),
        "int64 vs float16": (ints.astype(np.int64), ints.astype(np.float16)),
        "bool": (bools, ~bools),
        "bool identical": (bools, bools.copy()),
        "bool all false": (np.zeros(8, bool), np.ones(8, bool)),
        "empty": (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)),
        "scalar": (np.array(2.0, np.float32), np.array(2.5, np.float32)),
        "shape all ones": (np.full((1, 1, 1), 3.0, np.float32), np.full((1, 1, 1), 4.0, np.float32)),
        "constant": (np.full(50, 7.0, np.float32), np.full(50, 7.0, np.float32)),
        "one element differs": (np.arange(100, dtype=np.float32), np.where(np.arange(100) == 7, 9, np.arange(100)).astype(np.float32)),
        "tiny golden": (np.full(16, 1e-20, np.float32), np.full(16, 2e-20, np.float32)),
        "1M+ elements": (big, big + np.float32(1e-3) * np.sign(big)),
        "large offset": (r + 1e4, r + 1e4 + 0.5),
    }
    return pairs


PAIRS = _pairs()


@pytest.fixture(scope="module")
def manager():
    return _reference()


@pytest.mark.parametrize("name", list(PAIRS))
def test_cells_equal_msaccucmps(manager, name):
    golden, target = PAIRS[name]
    expected, expected_messages = _msaccucmp(manager, golden, target)
    got, messages = ours.cells(golden, target, target_file="t.npy", golden_file="g.npy")
    assert got == expected, name
    assert messages == expected_messages


def test_at_least_25_pairs_cover_the_cases():
    assert len(PAIRS) >= 25


def test_result_csv_carries_the_same_cells(manager, tmp_path):
    """Through the runner and the writer: every msaccucmp-named column of result.csv is msaccucmp's text."""
    names = [n for n in PAIRS if n != "1M+ elements"]  # the writer test needs no second megabyte tensor
    golden = [(f"t{i}", f"/Op{i}", "Mul", PAIRS[n][0]) for i, n in enumerate(names)]
    target = [(f"t{i}", f"/Op{i}", "Mul", PAIRS[n][1]) for i, n in enumerate(names)]
    g_dir, t_dir = write_dump(tmp_path / "g", golden), write_dump(tmp_path / "t", target)
    rows = list(csv.reader(io.StringIO(csv_text(compare_dumps(g_dir, t_dir)))))
    header = rows[0]
    for i, name in enumerate(names):
        expected, _ = _msaccucmp(manager, PAIRS[name][0], PAIRS[name][1])
        row = rows[1 + i]
        for algorithm, cell in expected.items():
            assert row[header.index(algorithm)] == cell, (name, algorithm)
