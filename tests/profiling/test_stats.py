import numpy as np
import pytest

from ascendpipe.profiling import stats


def test_latency_stats_match_hand_computed_values():
    samples = [1.0, 2.0, 3.0, 4.0, 100.0]
    s = stats.latency_stats(samples, batch_size=8)
    assert s["mean"] == pytest.approx(22.0)
    assert s["median"] == pytest.approx(3.0)
    assert s["min"] == 1.0 and s["max"] == 100.0 and s["count"] == 5
    # numpy's linear interpolation: p99 lies between 4 and 100 at 0.96 of the way
    assert s["p99"] == pytest.approx(4.0 + 0.96 * 96.0)
    assert s["throughput"] == pytest.approx(1000.0 * 8 / 22.0)


def test_latency_stats_refuses_no_samples():
    with pytest.raises(ValueError):
        stats.latency_stats([])


def test_clear_speedup_is_significant_with_its_noise_range():
    base = [10.0, 10.2, 9.8, 10.1, 9.9]
    cand = [5.0, 5.1, 4.9, 5.05, 4.95]
    r = stats.speedup(base, cand)
    assert r["improvement_pct"] == pytest.approx(50.0)
    # quartiles: base 9.9/10.1, candidate 4.95/5.05
    assert r["noise_low_pct"] == pytest.approx(100 * (9.9 - 5.05) / 10.0)
    assert r["noise_high_pct"] == pytest.approx(100 * (10.1 - 4.95) / 10.0)
    assert r["significant"]
    assert "Performance improved by 50.0%" in stats.improvement_line(r)


def test_result_inside_the_noise_is_no_improvement():
    rng = np.random.default_rng(3)
    base = list(10 + rng.normal(0, 1, 15))
    cand = list(9.8 + rng.normal(0, 1, 15))  # 2% better on average, 10% noise
    r = stats.speedup(base, cand)
    assert not r["significant"]
    assert r["noise_low_pct"] < 0 < r["noise_high_pct"]
    line = stats.improvement_line(r)
    assert "No performance improvement" in line and "improved by" not in line


def test_small_but_clean_gain_below_the_minimum_is_not_claimed():
    base = [10.0] * 5
    cand = [9.95] * 5  # 0.5%, no spread
    assert not stats.speedup(base, cand, min_gain_pct=1.0)["significant"]
    assert stats.speedup(base, cand, min_gain_pct=0.1)["significant"]


def test_paired_gain_interval_by_hand():
    base = [10.0, 11.0, 10.5, 12.0]
    cand = [5.0, 5.6, 5.1, 6.2]
    r = stats.paired_gain(base, cand, min_gain_pct=2.0)
    d = np.log(np.array(base) / np.array(cand))
    half = 3.182 * d.std(ddof=1) / 2  # t(0.975, 3) * sd / sqrt(4)
    assert r["improvement_pct"] == pytest.approx(100 * (1 - np.exp(-d.mean())))
    assert r["noise_low_pct"] == pytest.approx(100 * (1 - np.exp(-(d.mean() - half))))
    assert r["noise_high_pct"] == pytest.approx(100 * (1 - np.exp(-(d.mean() + half))))
    assert r["pairs"] == 4 and r["speedup_x"] == pytest.approx(np.exp(d.mean())) and r["significant"]
    assert "95% interval" in stats.improvement_line(r) and "4 paired rounds" in stats.improvement_line(r)


def test_paired_gain_follows_a_drifting_machine_that_unpaired_quartiles_miss():
    # the host slows down 3x over the run; the candidate is 10% faster in every adjacent pair
    drift = np.linspace(1.0, 3.0, 8)
    base, cand = list(10 * drift), list(9 * drift)
    assert not stats.speedup(base, cand, min_gain_pct=2.0)["significant"]
    paired = stats.paired_gain(base, cand, min_gain_pct=2.0)
    assert paired["significant"] and paired["improvement_pct"] == pytest.approx(10.0)


def test_paired_gain_inside_the_noise_is_none_and_more_pairs_are_asked_for():
    rng = np.random.default_rng(5)
    base = list(10 * np.exp(rng.normal(0, 0.2, 5)))
    cand = list(9.9 * np.exp(rng.normal(0, 0.2, 5)))
    r = stats.paired_gain(base, cand, min_gain_pct=2.0)
    assert not r["significant"] and r["noise_low_pct"] < 0 < r["noise_high_pct"]
    assert stats.undecided(r, 2.0)
    slower = stats.paired_gain([10.0, 10.1, 9.9], [20.0, 20.3, 19.7], min_gain_pct=2.0)
    assert not slower["significant"] and not stats.undecided(slower, 2.0) and slower["noise_high_pct"] < 0
    with pytest.raises(ValueError):
        stats.paired_gain([1.0], [1.0])
