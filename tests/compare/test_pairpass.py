"""pairpass computes, in one streamed set of passes, msaccucmp's cells (the same text as over whole
tensors) and the decision's metrics (the values of ``metrics.tensor_metrics``)."""

import math

import numpy as np
import pytest

from ascendpipe.compare import metrics as M
from ascendpipe.compare import msaccucmp, pairpass, runner
from tests.compare.dumps import write_dump
from tests.compare.test_msaccucmp_blocked import cases, whole


def test_widen_into_equals_numpys_cast_for_every_float16():
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    got = pairpass.widen_into(every, np.empty(every.size, np.float32))
    want = every.astype(np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.0 and the negative NaNs keep their sign
    finite = np.isfinite(want)
    assert got.view(np.uint32)[finite].tobytes() == want.view(np.uint32)[finite].tobytes()


def test_the_msaccucmp_mask_is_the_same_in_float32():
    assert float(pairpass._MSACCUCMP_EPS) == float(msaccucmp.EPS)  # 2^-52: a float32 value


def test_buffered_sum_fed_in_pieces_equals_numpys_float64_reduction():
    rng = np.random.default_rng(4)
    for _ in range(20):
        n = int(rng.integers(1, 120_000))
        x = (rng.standard_normal(n) * rng.uniform(1e-3, 1e5) + rng.uniform(-50, 50)).astype(np.float32)
        acc = pairpass._BufferedSum()
        cuts = np.sort(rng.integers(0, n, 6))
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, n]):
            piece = x[a:b]
            acc.feed(piece if rng.random() < 0.5 else piece.astype(np.float64))
        assert acc.result().tobytes() == np.add.reduce(x, dtype=np.float64).tobytes(), n


@pytest.mark.parametrize("name, golden, target", list(cases()), ids=[c[0] for c in cases()])
@pytest.mark.parametrize("widen_whole", [True, False])
def test_cells_with_the_decision_equal_the_whole_tensor_cells(monkeypatch, name, golden, target, widen_whole):
    """The runner's path (decision on: msaccucmp's means from float64 copies, its standard deviations
    from the decision's sums where they prove the text), streamed or widened once."""
    monkeypatch.setattr(msaccucmp, "BLOCK", 1000)
    if not widen_whole:  # streamed: widened block by block, the pdfs computed again for the KL pass
        monkeypatch.setattr(pairpass, "WIDEN_WHOLE", 0)
        monkeypatch.setattr(pairpass, "PDF_WHOLE", 0)
    cells, messages, metrics, _ = pairpass.pair_pass(golden, target, target_file="t.npy", golden_file="g.npy",
                                                     block=1000)
    assert (cells, messages) == whole(golden, target)
    assert metrics is not None


def decision_pairs():
    rng = np.random.default_rng(9)
    g = (rng.standard_normal(70_001) * 2).astype(np.float32)
    yield "fp16 target", g, (g + rng.standard_normal(g.size).astype(np.float32) * 0.01).astype(np.float16)
    relu = np.maximum(g, 0)
    yield "relu, zeros on both sides", relu, relu.astype(np.float16)
    yield "offset", g + np.float32(300), (g + np.float32(300)).astype(np.float16)
    yield "fp32 target", g, g * np.float32(1.01)
    yield "target scaled far down", g, (g * np.float32(1e-6) + rng.standard_normal(g.size).astype(np.float32) * 1e-9)


@pytest.mark.parametrize("name, golden, target", list(decision_pairs()), ids=[c[0] for c in decision_pairs()])
def test_decision_metrics_equal_tensor_metrics(name, golden, target):
    _, _, got, _ = pairpass.pair_pass(golden, target)
    want = M.tensor_metrics(golden, target.astype(np.float32))
    for key in pairpass.NOT_COMPUTED:  # msit's own values, which the runner takes from msaccucmp's cells
        assert key not in got
    assert set(got) == set(want) - set(pairpass.NOT_COMPUTED)
    for key in ("golden_nan", "golden_inf", "target_nan", "target_inf", "nonfinite_mismatch", "compared", "fail_reason"):
        assert got[key] == want[key]
    for key in ("cosine", "exact_cosine", "rmse", "relative_euclidean", "target_mean", "target_std", "golden_mean",
                "golden_std"):
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key
    # float32 element-wise terms (pairpass' docstring): 2^-24 relative per element at most
    assert got["rmse_fp16_floor"] == pytest.approx(want["rmse_fp16_floor"], rel=1e-6)
    assert got["significant_mean_rel_error"] == pytest.approx(want["significant_mean_rel_error"], rel=1e-5)
    assert got["significant_elements"] == want["significant_elements"]
    assert got["kl"] == pytest.approx(want["kl"], abs=1e-8)


def test_nonfinite_pairs_count_as_tensor_metrics_does_and_compute_no_metric():
    rng = np.random.default_rng(2)
    g = rng.standard_normal(50_000).astype(np.float32)
    t = g.astype(np.float16)
    t[[7, 40_000]] = [np.inf, np.nan]
    g2 = g.copy()
    g2[123] = -np.inf
    for golden, target in ((g, t), (g2, t), (g2, g.astype(np.float16))):
        _, _, got, _ = pairpass.pair_pass(golden, target, block=4096)
        want = M.tensor_metrics(golden, target)
        assert {k: got[k] for k in M._COUNT_KEYS} == {k: want[k] for k in M._COUNT_KEYS}
        assert got["fail_reason"] == want["fail_reason"] and got["compared"] == 0
        assert all(math.isnan(got[k]) for k in ("cosine", "rmse", "kl", "exact_cosine"))


def test_flushed_counts_golden_values_below_fp16s_normal_range_held_as_zero():
    g = np.full(80_000, 0.5, np.float32)
    g[:10] = 3e-5  # below 2^-14: fp16 holds them as subnormals, or 0 when flushed
    g[10:15] = 0.0  # zero on both sides: not a flush
    t = g.astype(np.float16)
    t[:7] = 0
    assert pairpass.pair_pass(g, t)[3] == 7


def test_every_block_is_handed_back_in_every_pass(monkeypatch):
    monkeypatch.setattr(pairpass, "PDF_WHOLE", 0)  # as a pair large enough to hand its pages back
    rng = np.random.default_rng(1)
    g = rng.standard_normal(300_000).astype(np.float32)
    seen = []
    pairpass.pair_pass(g, g.astype(np.float16), block=1 << 15, drop=lambda a, b: seen.append((a, b)))
    one_pass = seen[: len(seen) // 3]
    assert len(seen) % 3 == 0 and one_pass * 3 == seen  # passes A, B and C read the same blocks
    assert one_pass[0][0] == 0 and one_pass[-1][1] == g.size
    assert all(a[1] == b[0] for a, b in zip(one_pass, one_pass[1:]))  # contiguous: every element once


def test_mean_std_text_proves_the_cell_or_declines():
    rng = np.random.default_rng(6)
    proved = 0
    for _ in range(300):
        n = int(rng.integers(2, 5000))
        x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-5, 3) + rng.choice([0, 1, 1e3, 1e6])).astype(np.float32)
        x64 = x.astype(np.float64)
        got = pairpass.mean_std_text(float(np.sum(x64 * x64)), float(np.sum(x64[::-1])), n)
        if got is None:
            continue
        proved += 1
        numpy_cell = msaccucmp._std_cell([np.mean(x, dtype=np.float64), np.std(x, dtype=np.float64)] * 2)
        assert msaccucmp._std_cell(list(got) * 2) == numpy_cell
    assert proved > 200
    # a mean of 1e6 and a spread near a rounding boundary of the third decimal: not provable from the sums
    assert pairpass.mean_std_text(1e12 * 1000 + 1000 * 0.0005**2, 1e6 * 1000, 1000) is None
    # a mean on a boundary of the third decimal
    assert pairpass.mean_std_text(1000 * 0.0125**2, 1000 * 0.0125, 1000) is None


def test_unprovable_means_and_deviations_are_summed_as_numpy_does(monkeypatch):
    rng = np.random.default_rng(12)
    g = (rng.standard_normal(100_000) + 1e4).astype(np.float32)  # a large mean over a small spread
    t = g.astype(np.float16)
    monkeypatch.setattr(pairpass, "mean_std_text", lambda *a: None)  # every side summed again
    cells, _, _, _ = pairpass.pair_pass(g, t, block=1 << 14)
    assert cells == whole(g, t)[0]
    g[::3] = 0  # golden zeros in every block: the relative error's masked quotients
    assert pairpass.pair_pass(g, t, block=1 << 14)[0] == whole(g, t)[0]


def test_the_runner_reads_large_pairs_in_one_pass_with_the_same_row(tmp_path, monkeypatch):
    rng = np.random.default_rng(8)
    g = (rng.standard_normal((4, 128, 300)) * 3).astype(np.float32)
    t = (g + rng.standard_normal(g.shape).astype(np.float32) * 0.01).astype(np.float16)
    write_dump(tmp_path / "g", [("x", "op", "Conv", g)])
    write_dump(tmp_path / "t", [("x", "op", "Conv", t)])
    streamed = runner.compare_dumps(tmp_path / "g", tmp_path / "t", graph={})["rows"][0]
    assert runner._one_pass(g, t)
    monkeypatch.setattr(runner, "_one_pass", lambda *a: False)
    separate = runner.compare_dumps(tmp_path / "g", tmp_path / "t", graph={})["rows"][0]
    assert streamed["msaccucmp"] == separate["msaccucmp"]
    for key in ("failed", "reasons", "flushed", "golden_abs_max", "overflow", "cosine", "rmse"):
        assert streamed[key] == separate[key], key
    for key, value in separate["decision"].items():
        assert streamed["decision"][key] == pytest.approx(value, rel=1e-5, abs=1e-8), key


def _rss_file_kb() -> int | None:
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("RssFile:"))
    except (OSError, StopIteration):
        return None


def test_a_mapped_tensor_hands_its_pages_back_and_reads_the_same_after(tmp_path):
    from ascendpipe.compare import npymap

    x = np.random.default_rng(3).standard_normal((64, 1 << 17)).astype(np.float32)  # 32 MB
    np.save(tmp_path / "x.npy", x)
    mapped = npymap.map_npy(tmp_path / "x.npy")
    assert mapped.array.shape == x.shape and np.array_equal(mapped.array, x)
    before = _rss_file_kb()
    if before is None:
        pytest.skip("no /proc/self/status RssFile here")
    flat = mapped.array.reshape(-1)
    mapped.drop(0, flat.size)
    after = _rss_file_kb()
    assert before - after > 30_000  # the 32 MB read are no longer resident in this process
    assert float(flat[:1000].sum()) == float(x.reshape(-1)[:1000].sum())  # read again from the page cache
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    assert np.array_equal(npymap.map_npy(tmp_path / "f.npy").array, x)  # Fortran order: loaded as numpy does


def test_a_large_pair_that_hands_its_pages_back_gives_the_same_row(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    g = (rng.standard_normal((3, 100_000)) * 3).astype(np.float32)
    t = (g * 1.001).astype(np.float16)
    write_dump(tmp_path / "g", [("x", "op", "MatMul", g)])
    write_dump(tmp_path / "t", [("x", "op", "MatMul", t)])
    kept = runner.compare_dumps(tmp_path / "g", tmp_path / "t", graph={})["rows"][0]
    drops = []
    real = pairpass.pair_pass
    monkeypatch.setattr(runner, "DROP_BYTES", 0)
    monkeypatch.setattr(runner, "pair_pass", lambda *a, **k: drops.append(k["drop"]) or real(*a, **k))
    dropped = runner.compare_dumps(tmp_path / "g", tmp_path / "t", graph={})["rows"][0]
    assert drops and drops[0] is not None
    assert dropped == kept


def test_a_compare_on_the_calling_thread_leaves_no_kept_arrays(tmp_path, monkeypatch):
    g = np.random.default_rng(0).standard_normal(200_000).astype(np.float32)
    write_dump(tmp_path / "g", [("x", "op", "Relu", g)])
    write_dump(tmp_path / "t", [("x", "op", "Relu", g.astype(np.float16))])
    monkeypatch.setattr(runner, "row_workers", lambda: 1)
    pairpass._wide("t_src", 10)  # as a previous pair leaves it
    assert runner.compare_dumps(tmp_path / "g", tmp_path / "t", graph={})["rows"][0]["side"] == "both"
    assert not hasattr(pairpass._LOCAL, "wide") and not hasattr(pairpass._LOCAL, "work")


def test_rows_start_largest_first_and_come_back_in_order(monkeypatch):
    from ascendpipe.compare.mapping import Pair

    monkeypatch.setattr(runner, "row_workers", lambda: 2)
    sizes = [3, 50, 7, 1000, 20, 1]
    pairs = [Pair({"name": f"g{k}", "shape": [n]}, {"name": f"t{k}", "shape": [n]}) for k, n in enumerate(sizes)]
    pairs.append(Pair({"name": "only", "shape": [10**6]}, None))  # one-sided: nothing to compute
    assert runner._largest_first(pairs) == [3, 1, 4, 2, 0, 5, 6]
    assert [r["i"] for r in runner._map_rows(lambda i, p: {"i": i}, pairs)] == list(range(len(pairs)))
