import math

import numpy as np
import pytest

from ascendpipe.compare import metrics as M


G = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
T = np.array([1.0, 2.0, 3.0, 5.0], dtype=np.float32)


def test_each_metric_against_hand_computed_values():
    m = M.tensor_metrics(G, T)
    assert m["cosine"] == round(34 / math.sqrt(30 * 39), 10)  # msit rounds the cosine to 10 decimals
    assert m["max_abs_error"] == 1.0
    assert m["mean_abs_error"] == 0.25
    assert m["rmse"] == 0.5
    assert m["max_rel_error"] == 0.25  # |5-4|/4
    assert m["mean_rel_error"] == 0.0625
    assert m["accumulated_rel_error"] == 0.25
    assert m["relative_euclidean"] == pytest.approx(1 / math.sqrt(30), abs=1e-15)
    p = np.exp(G.astype(float)) / np.exp(G.astype(float)).sum()
    q = np.exp(T.astype(float)) / np.exp(T.astype(float)).sum()
    # the softmax's exponentials are float32 (as msit's whole softmax is), its sums float64
    assert m["kl"] == pytest.approx(float((p * np.log(p / q)).sum()), rel=1e-6)
    assert m["target_mean"] == 2.75 and m["target_std"] == pytest.approx(math.sqrt(8.75 / 4))
    assert m["golden_mean"] == 2.5 and m["golden_std"] == pytest.approx(math.sqrt(1.25))
    assert M.cosine_similarity(G, T) == m["cosine"] and M.root_mean_square_error(G, T) == 0.5
    assert M.standard_deviation(G, T)[0] == 2.75


def test_zero_golden_elements_are_left_out_of_relative_and_absolute_errors():
    m = M.tensor_metrics(np.array([0.0, 2.0]), np.array([1.0, 3.0]))
    assert m["max_rel_error"] == 0.5 and m["mean_rel_error"] == 0.25
    # msit's max/mean absolute error leave out golden ~0 elements too (0 there), so 1.0 at 0 is not seen
    m = M.tensor_metrics(np.array([0.0, 2.0]), np.array([5.0, 3.0]))
    assert m["max_abs_error"] == 1.0 and m["mean_abs_error"] == 0.5 and m["rmse"] == pytest.approx(math.sqrt(13))


def test_cosine_of_zero_tensors():
    zeros = np.zeros(5, dtype=np.float32)
    assert M.cosine_similarity(zeros, zeros) == 1.0
    assert M.cosine_similarity(np.ones(5), zeros) == 0.0  # torch.cosine_similarity floors each norm at 1e-8
    assert M.relative_euclidean_distance(zeros, np.ones(5)) == 0.0  # msit: ||g|| ~ 0 gives 0


def test_nan_and_inf_are_counted_and_no_metric_is_computed_as_in_msit():
    target = np.array([1.0, np.nan, np.inf, 4.0], dtype=np.float16)
    m = M.tensor_metrics(G, target)
    assert (m["target_nan"], m["target_inf"], m["nonfinite_mismatch"], m["compared"]) == (1, 1, 2, 0)
    assert all(math.isnan(m[k]) for k in M.METRIC_NAMES) and m["fail_reason"] == "my_data includes NAN or inf."
    both = M.tensor_metrics(np.array([np.inf, 1.0]), np.array([np.inf, 1.0]))
    assert both["golden_inf"] == 1 and both["nonfinite_mismatch"] == 0
    assert both["fail_reason"] == "golden_data includes NAN or inf. my_data includes NAN or inf."


def test_all_nonfinite_gives_nan_metrics_without_crashing():
    m = M.tensor_metrics(np.ones(3), np.full(3, np.nan))
    assert m["compared"] == 0 and all(math.isnan(m[k]) for k in M.METRIC_NAMES)


def test_size_mismatch_is_reported():
    with pytest.raises(ValueError, match="size mismatch"):
        M.tensor_metrics(np.ones(3), np.ones(4))


def test_kl_of_large_values_does_not_overflow():
    kl = M.kullback_leibler_divergence(np.array([1000.0, 0.0]), np.array([999.0, 0.0]))
    assert math.isfinite(kl) and kl == pytest.approx(0.0, abs=1e-300)


def test_chunked_accumulation_matches_whole_tensor_float64(monkeypatch):
    rng = np.random.default_rng(3)
    g = rng.standard_normal(10_007).astype(np.float32)
    t = (g + rng.standard_normal(g.size).astype(np.float32) * 0.01).astype(np.float16)
    monkeypatch.setattr(M, "CHUNK", 1000)
    m = M.tensor_metrics(g, t)
    g64, t64 = g.astype(np.float64), t.astype(np.float64)
    assert m["cosine"] == pytest.approx(g64 @ t64 / np.linalg.norm(g64) / np.linalg.norm(t64), abs=1e-10)
    assert m["rmse"] == pytest.approx(np.sqrt(np.mean((t64 - g64) ** 2)), rel=1e-12)
    assert m["target_std"] == pytest.approx(np.std(t64), rel=1e-10)
    p = np.exp(g64 - g64.max()); p /= p.sum()
    q = np.exp(t64 - t64.max()); q /= q.sum()
    # float32 exponentials: an absolute error of ~1e-9 on the log-partition functions (the decision's
    # threshold is 0.005); here KL is 5e-5
    assert m["kl"] == pytest.approx(float(np.sum(p * np.log(p / q))), abs=1e-8)


def test_magnitude_max_ignores_nonfinite():
    assert M.magnitude_max(np.array([-7.0, np.inf, 3.0, np.nan])) == 7.0


# --- msaccucmp's cells (the CSV's msit columns), hand-computed; the package check is test_msaccucmp_reference


def test_msaccucmp_cells_by_hand():
    from ascendpipe.compare import msaccucmp

    cells, messages = msaccucmp.cells(G, T, target_file="t.npy", golden_file="g.npy")
    assert cells["CosineSimilarity"] == "%.6f" % (34 / math.sqrt(30 * 39))
    assert cells["MaxAbsoluteError"] == "1.000000" and cells["MeanAbsoluteError"] == "0.250000"
    assert cells["RootMeanSquareError"] == "0.500000" and cells["MaxRelativeError"] == "0.250000"
    assert cells["AccumulatedRelativeError"] == "0.250000" and cells["MeanRelativeError"] == "0.062500"
    assert cells["StandardDeviation"] == "(2.750;1.479),(2.500;1.118)"  # target (NPUDump) first
    # KL(npu || golden) of the min-max normalised tensors: p_t = [0,1,2,4]/7, p_g = [0,1,2,3]/6, the zero floored
    eps = float(np.finfo(np.float32).eps)
    pt = np.array([eps, 0.25, 0.5, 1.0]) / (eps + 1.75)
    pg = np.array([eps, 1 / 3, 2 / 3, 1.0]) / (eps + 2.0)
    assert float(cells["KullbackLeiblerDivergence"]) == pytest.approx(float((pt * np.log(pt / pg)).sum()), abs=2e-6)
    assert messages == []


def test_msaccucmp_special_cases():
    from ascendpipe.compare import msaccucmp

    zeros, ones = np.zeros(4, np.float32), np.ones(4, np.float32)
    cells, messages = msaccucmp.cells(zeros, ones, target_file="t.npy", golden_file="g.npy")
    assert cells["CosineSimilarity"] == "NaN"  # one side all zero: no cosine (ours gave 0)
    assert messages[0] == "Cannot compare by Cosine Similarity. All the data is zero in g.npy."
    assert cells["MaxAbsoluteError"] == "1.000000" and cells["MaxRelativeError"] == "0.000000"  # every element
    assert msaccucmp.cells(zeros, zeros)[0]["CosineSimilarity"] == "1.0"  # msaccucmp's literal
    assert msaccucmp.cells(np.array([2.0]), np.array([3.0]))[0]["CosineSimilarity"] == "1.000000"  # a scalar shape
    with_inf, _ = msaccucmp.cells(ones, np.array([1, np.inf, 1, 1], np.float32))
    assert with_inf["MaxAbsoluteError"] == "inf" and with_inf["CosineSimilarity"] == "nan"
    huge = np.full(8, 2e154)  # float64 beyond float32: inf after msaccucmp's cast, and no OverflowError
    assert msaccucmp.cells(huge, huge)[0]["MaxAbsoluteError"] == "nan"
    bools, msgs = msaccucmp.cells(np.array([True, False]), np.array([True, True]))
    assert bools["MaxAbsoluteError"] == "NaN" and "Algorithm MaxAbsoluteError does not support Boolean types." in msgs
    empty, msgs = msaccucmp.cells(np.zeros(0, np.float32), np.zeros(0, np.float32))
    assert empty["MaxAbsoluteError"] == "NaN" and empty["MeanAbsoluteError"] == "nan" and empty["CosineSimilarity"] == "1.0"


def test_our_metrics_survive_float64_beyond_1e154():
    m = M.tensor_metrics(np.full(8, 2e154), np.full(8, 3e154))  # was: OverflowError in the std
    assert m["compared"] == 8 and m["max_abs_error"] == pytest.approx(1e154) and m["target_mean"] == pytest.approx(3e154)


def test_rows_run_in_order_and_an_error_stops_the_rows_not_started(monkeypatch):
    from ascendpipe.compare import runner

    monkeypatch.setattr(runner, "row_workers", lambda: 2)
    started = []

    def make_row(i, pair):
        started.append(i)
        if i == 3:
            raise ValueError("bad pair")
        import time

        time.sleep(0.01)
        return {"i": i, "pair": pair}

    assert [r["i"] for r in runner._map_rows(lambda i, p: {"i": i, "pair": p}, list("abcdefgh"))] == list(range(8))
    with pytest.raises(ValueError, match="bad pair"):
        runner._map_rows(make_row, list(range(400)))
    assert len(started) < 400  # the queued rows were cancelled, not run
