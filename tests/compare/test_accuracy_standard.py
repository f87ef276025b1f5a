"""Issue 47 item 7 (issue 49 item 5): outputs that meet the device toolchain's own accuracy standard
(msprobe's "Accuracy Reached or Not", compare/standard.py) get no blamed cause, though they may be
beyond compare's (msit's) thresholds; outputs that do not keep their culprit.

The rule is checked against msprobe's own ``check_accuracy`` and constants, read from the installed
package's source (mindstudio-probe is installed with --no-deps: its pandas import keeps the module
itself from loading, so the function and the class constants are taken from the file)."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ascendpipe.compare import standard
from ascendpipe.compare.runner import compare_dumps
from tests.compare.dumps import write_dump


def _msprobe_check_accuracy():
    spec = importlib.util.find_spec("msprobe")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mindstudio-probe is not installed (pip install --no-deps mindstudio-probe)")
    root = Path(list(spec.submodule_search_locations)[0])
    const_tree = ast.parse((root / "core/common/const.py").read_text())
    cls = next(n for n in const_tree.body if isinstance(n, ast.ClassDef) and n.name == "CompareConst")
    constants = {}
    for node in cls.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value.value
    source = (root / "core/compare/multiprocessing_compute.py").read_text()
    func = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "check_accuracy")
    namespace = {"CompareConst": SimpleNamespace(**constants),
                 "logger": SimpleNamespace(warning=lambda *a, **k: None)}
    exec(compile(ast.Module(body=[func], type_ignores=[]), "check_accuracy", "exec"), namespace)
    return namespace["check_accuracy"], constants


def test_the_rule_is_msprobes_check_accuracy():
    check, constants = _msprobe_check_accuracy()
    assert (constants["COS_THRESHOLD"], constants["MAX_ABS_ERR_THRESHOLD"], constants["COS_MAX_THRESHOLD"],
            constants["MAX_ABS_ERR_MAX_THRESHOLD"]) == (standard.COS_THRESHOLD, standard.MAX_ABS_ERR_THRESHOLD,
                                                       standard.COS_MAX_THRESHOLD, standard.MAX_ABS_ERR_MAX_THRESHOLD)
    cosines = [1.0, 0.9999, 0.99, 0.98999, 0.95, 0.9, 0.89999, 0.5, -1.0]
    errors = [0.0, 0.0005, 0.001, 0.0011, 0.5, 1.0, 1.0001, 30.0]
    for cos, err in itertools.product(cosines, errors):
        assert standard.reached(cos, err) == (check(cos, err) == constants["ACCURACY_CHECK_YES"]), (cos, err)
    # where msprobe has no number its check answers "Yes" (float('Nan') compares false); ours: not known
    assert check(constants["NAN"], 0.5) == constants["ACCURACY_CHECK_YES"]
    assert standard.reached(None, 0.5) is None and standard.reached(float("nan"), 0.5) is None


def _dumps(tmp_path, golden_out, target_out):
    """x -> mul (fine) -> out (the output): golden and target dumps."""
    x = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(1, 64)
    golden = write_dump(tmp_path / "g", [("x", "x", "Input", x), ("h", "mul", "Mul", x * 2),
                                         ("y", "out", "Add", golden_out)])
    target = write_dump(tmp_path / "t", [("x", "x", "Input", x), ("h", "mul", "Mul", (x * 2).astype(np.float16)),
                                         ("y", "out", "Add", target_out)])
    return golden, target


def test_outputs_within_the_standard_blame_no_cause(tmp_path):
    """The reporters' shape: direction kept (cosine 0.9999), a few percent of scale off (relative
    Euclidean 0.066 > 0.05), values below 1: compare's thresholds fail, the standard is met."""
    rng = np.random.default_rng(0)
    golden_out = rng.uniform(-0.5, 0.5, (1, 64)).astype(np.float32)
    wobble = rng.standard_normal((1, 64)).astype(np.float32)
    target_out = (golden_out * 1.065 + 0.004 * wobble * np.abs(golden_out).mean()).astype(np.float16)
    g64, t64 = golden_out.astype(np.float64).ravel(), target_out.astype(np.float64).ravel()
    cosine = g64 @ t64 / (np.linalg.norm(g64) * np.linalg.norm(t64))
    distance = np.linalg.norm(t64 - g64) / np.linalg.norm(g64)
    assert cosine > 0.9999 and 0.06 < distance < 0.07 and np.abs(t64 - g64).max() < 1  # the facts, in numpy
    result = compare_dumps(*_dumps(tmp_path, golden_out, target_out))
    assert result["summary"]["outputs_pass"] is False  # compare's thresholds: RelativeEuclideanDistance > 0.05
    assert result["summary"]["outputs_meet_standard"] is True
    assert result["first_failure"] is None and result["failures"] == [] and result["first_reaching_failure"] is None
    assert result["verdict"].startswith("outputs meet the device's accuracy standard")
    assert "no cause blamed" in result["verdict"] and "RelativeEuclideanDistance" in result["verdict"]
    out = result["standard"]["outputs"][0]
    assert out["reached"] is True and out["cosine"] == pytest.approx(cosine, abs=1e-9)
    # msaccucmp's MaxAbsoluteError, as its six-decimal cell reads back
    assert out["max_abs_error"] == pytest.approx(np.abs(t64 - g64).max(), abs=5e-7)
    from ascendpipe.compare.writers import contract, terminal_text, write_results

    text = terminal_text(result)
    assert "no cause blamed" in text and "first failure" not in text and " FAIL" not in text and " beyond" in text
    doc = contract(result)
    assert doc["first_failure"] is None and doc["standard"]["met"] is True
    written = write_results(result, tmp_path / "out")
    assert json.loads(written["json"].read_text())["summary"]["outputs_meet_standard"] is True
    assert "No cause blamed" in written["html"].read_text()


def test_outputs_beyond_the_standard_keep_their_culprit(tmp_path):
    rng = np.random.default_rng(1)
    golden_out = rng.uniform(-4.0, 4.0, (1, 64)).astype(np.float32)
    target_out = (golden_out * 1.065).astype(np.float16)  # the same shape of error, values to 4: max abs 0.26
    target_out[0, 5] = golden_out[0, 5] + 1.5  # one element off by 1.5: beyond the standard's max abs error 1
    result = compare_dumps(*_dumps(tmp_path, golden_out, target_out))
    assert result["summary"]["outputs_meet_standard"] is False
    assert result["standard"]["outputs"][0]["reached"] is False
    assert result["first_failure"]["op_name"] == "out" and result["verdict"].startswith("outputs fail")


def test_an_output_with_no_number_is_never_said_to_meet_it(tmp_path):
    golden_out = np.linspace(0.1, 0.5, 64, dtype=np.float32).reshape(1, 64)
    target_out = golden_out.astype(np.float16)
    target_out[0, 3] = np.inf
    result = compare_dumps(*_dumps(tmp_path, golden_out, target_out))
    out = result["standard"]["outputs"][0]
    assert out["reached"] is None and out["why"] == "target inf/NaN"
    assert result["summary"]["outputs_meet_standard"] is None and result["first_failure"]["op_name"] == "out"
