"""Our decision metrics (``tensor_metrics``) equal msit's LLM-compare formulas on a table of edge cases (result.csv's
msit columns are msaccucmp's instead: test_msaccucmp_reference.py).

The reference is msit's own code path, restated here from its source (package ``msit`` 8.2.0):
``components.utils.cmp_algorithm`` (the functions of ``CMP_ALG_MAP``) called by ``compare_tensor`` /
``check_tensor`` of ``msit_llm.compare.cmp_utils``: both tensors flattened and cast to float32
(``reshape(-1).float()``); any NaN or inf on either side -> no metric at all, only a fail reason.
msit evaluates in float32 (the cosine in float64); we evaluate in float64, hence the tolerances.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ascendpipe.compare import metrics as M

torch = pytest.importorskip("torch", reason="msit's reference formulas run on torch, as msit does")

FLOAT_EPSILON = torch.finfo(torch.float).eps  # cmp_algorithm.FLOAT_EPSILON


# --- msit's formulas (cmp_algorithm), restated -------------------------------------------------------
def msit_cosine_similarity(g, t):
    if torch.all(g == 0) and torch.all(t == 0):
        return 1.0
    return round(torch.cosine_similarity(g.double(), t.double(), dim=0).item(), 10)


def msit_max_relative_error(g, t):
    return torch.where(torch.abs(g) > FLOAT_EPSILON, torch.abs(t / g - 1), torch.tensor(0, dtype=g.dtype)).max().item()


def msit_mean_relative_error(g, t):
    return torch.where(torch.abs(g) > FLOAT_EPSILON, torch.abs(t / g - 1), torch.tensor(0, dtype=t.dtype)).mean().item()


def msit_max_absolute_error(g, t):
    return torch.where(torch.abs(g) > FLOAT_EPSILON, torch.abs(t - g), torch.tensor(0, dtype=t.dtype)).max().item()


def msit_mean_absolute_error(g, t):
    return torch.where(torch.abs(g) > FLOAT_EPSILON, torch.abs(t - g), torch.tensor(0, dtype=t.dtype)).mean().item()


def msit_kl_divergence(g, t):
    from torch.nn import functional as F

    return max(F.kl_div(F.log_softmax(t, dim=-1), F.softmax(g, dim=-1), reduction="sum").item(), 0)


def msit_relative_euclidean_distance(g, t):
    square = (g**2).sum()
    if square**0.5 <= FLOAT_EPSILON:
        return 0.0
    return torch.sqrt(((t - g) ** 2).sum() / square).item()


MSIT = {
    "cosine": msit_cosine_similarity,
    "max_rel_error": msit_max_relative_error,
    "mean_rel_error": msit_mean_relative_error,
    "max_abs_error": msit_max_absolute_error,
    "mean_abs_error": msit_mean_absolute_error,
    "kl": msit_kl_divergence,
    "relative_euclidean": msit_relative_euclidean_distance,
}


def msit_compare_tensor(golden: np.ndarray, target: np.ndarray) -> dict:
    """compare_tensor + check_tensor: the reasons, or every metric."""
    g = torch.as_tensor(np.asarray(golden)).reshape(-1).float()
    t = torch.as_tensor(np.asarray(target)).reshape(-1).float()
    reasons = []
    if not torch.all(torch.isfinite(g)):
        reasons.append("golden_data includes NAN or inf.")
    if not torch.all(torch.isfinite(t)):
        reasons.append("my_data includes NAN or inf.")
    if reasons:
        return {"fail_reason": " ".join(reasons)}
    return {name: float(f(g, t)) for name, f in MSIT.items()}


# --- the table -----------------------------------------------------------------------------------------
_rng = np.random.default_rng(7)
_normal = _rng.standard_normal(4096).astype(np.float32)
_huge = (_rng.uniform(3e4, 1e6, 512) * _rng.choice([-1, 1], 512)).astype(np.float32)

CASES = {
    "both all zeros": (np.zeros(8, np.float32), np.zeros(8, np.float32)),
    "golden all zeros": (np.zeros(8, np.float32), np.arange(8, dtype=np.float32)),
    "target all zeros": (np.arange(1, 9, dtype=np.float32), np.zeros(8, np.float32)),
    "some golden zeros": (np.array([0, 0, 1, 2, 3], np.float32), np.array([0.5, 0, 1.1, 2, 2.5], np.float32)),
    "inf in target": (np.ones(4, np.float32), np.array([1, np.inf, 1, 1], np.float16)),
    "nan in target": (np.ones(4, np.float32), np.array([1, np.nan, 1, 1], np.float16)),
    "nan in golden": (np.array([1, np.nan, 1, 1], np.float32), np.ones(4, np.float16)),
    "-inf in both": (np.array([1, -np.inf], np.float32), np.array([1, -np.inf], np.float32)),
    "tiny, below eps": (np.array([1e-9, 2e-9, -3e-9], np.float32), np.array([1.5e-9, 3e-9, -4.5e-9], np.float32)),
    "tiny, around eps": (np.array([1e-7, 1.2e-7, 2e-7, 5e-7], np.float32), np.array([2e-7, 2e-7, 1e-7, 5e-7], np.float32)),
    "tiny, subnormal fp32": (np.array([1e-40, 3e-41, 1.0], np.float32), np.array([0.0, 3e-41, 1.0], np.float32)),
    "huge, fp16 saturated": (_huge, np.clip(_huge, -65504, 65504).astype(np.float16)),
    "huge, 0.1% off": (_huge, (_huge * 1.001).astype(np.float32)),
    "fp16 vs fp32": (_normal, _normal.astype(np.float16)),
    "fp16 vs fp32, shifted logits": (_normal * 4 + 10, (_normal * 4 + 10).astype(np.float16)),
    "one element": (np.array([2.0], np.float32), np.array([3.0], np.float32)),
    "one element, zero golden": (np.array([0.0], np.float32), np.array([3.0], np.float32)),
    "sign flipped": (np.array([1.0, -2.0, 3.0], np.float32), np.array([-1.0, 2.0, -3.0], np.float32)),
    "2-D, fp16 target": (_normal.reshape(64, 64), (_normal.reshape(64, 64) * 0.9).astype(np.float16)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_metric_values_equal_msits(case):
    golden, target = CASES[case]
    ours = M.tensor_metrics(golden, target)
    theirs = msit_compare_tensor(golden, target)
    if "fail_reason" in theirs:
        assert ours["fail_reason"] == theirs["fail_reason"]
        assert all(math.isnan(ours[name]) for name in MSIT)
        return
    assert ours["fail_reason"] == ""
    for name, value in theirs.items():
        if name == "cosine":  # float64 in msit too, rounded to 10 decimals
            assert ours[name] == pytest.approx(value, abs=2e-10), name
        else:  # msit's float32 arithmetic against our float64
            assert ours[name] == pytest.approx(value, rel=2e-5, abs=1e-6 * max(1.0, abs(value))), name


def test_the_table_reaches_each_edge():
    """The cases above do what their names say (so the comparison is not vacuous)."""
    assert M.tensor_metrics(*CASES["target all zeros"])["cosine"] == 0.0
    assert M.tensor_metrics(*CASES["both all zeros"])["cosine"] == 1.0
    below = M.tensor_metrics(*CASES["tiny, below eps"])
    assert below["max_rel_error"] == 0.0 and below["max_abs_error"] == 0.0 and 0 < below["cosine"] < 1
    assert M.tensor_metrics(*CASES["tiny, around eps"])["max_rel_error"] == pytest.approx(2 / 3, rel=1e-6)
    assert M.tensor_metrics(*CASES["huge, fp16 saturated"])["max_rel_error"] > 0.9
    assert M.tensor_metrics(*CASES["one element"])["mean_rel_error"] == 0.5
    assert M.tensor_metrics(*CASES["sign flipped"])["cosine"] == -1.0
    assert M.tensor_metrics(*CASES["-inf in both"])["nonfinite_mismatch"] == 0


def test_accumulated_relative_error_and_rmse_use_the_same_elements():
    """Not in msit's source (msaccucmp writes them): the sum of msit's relative errors, and the plain RMS error."""
    golden, target = CASES["some golden zeros"]
    m = M.tensor_metrics(golden, target)
    assert m["accumulated_rel_error"] == pytest.approx(m["mean_rel_error"] * golden.size)
    assert m["rmse"] == pytest.approx(math.sqrt(np.mean((target.astype(float) - golden.astype(float)) ** 2)))
