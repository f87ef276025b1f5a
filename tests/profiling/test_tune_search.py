"""tune's search as pure logic (issue 44): a fake timing oracle with a known fastest point and the two
path dependencies seen on real models, from every start the bench uses."""

import pytest

from ascendpipe.profiling import search

DEFAULTS = {"graph_optimization_level": "ORT_ENABLE_ALL", "intra_op_num_threads": 0,
            "execution_mode": "ORT_SEQUENTIAL", "disabled_optimizers": []}
CORES = 4  # threads 0 (onnxruntime's choice: the cores), 1, 2, 4: a graph space of 4 x 4 x 2 = 32


def trap_ms(s: dict) -> float:
    """ms per run. Traps: (1) under ORT_PARALLEL one thread is the least bad, but one thread is the
    slowest choice once the mode is SEQUENTIAL (ResNet-18 from ORT_PARALLEL in issue 44);
    (2) ORT_ENABLE_EXTENDED pays off only with every core, so tried at one thread it looks no better.
    Fastest: EXTENDED, SEQUENTIAL, all cores (0 or 4 threads): 0.6."""
    threads = CORES if s["intra_op_num_threads"] in (0, CORES) else s["intra_op_num_threads"]
    sequential = s["execution_mode"] == "ORT_SEQUENTIAL"
    base = ({1: 2.8, 2: 1.6, CORES: 1.0} if sequential else {1: 2.0, 2: 2.4, CORES: 2.6})[threads]
    level = s["graph_optimization_level"]
    factor = {"ORT_DISABLE_ALL": 3.0, "ORT_ENABLE_BASIC": 1.3, "ORT_ENABLE_ALL": 1.0,
              "ORT_ENABLE_EXTENDED": 0.6 if threads == CORES and sequential else 1.0}[level]
    return base * factor


FASTEST = min(trap_ms(p) for p in search.graph_space(CORES))

STARTS = {
    "defaults": {},
    "disable_all": {"graph_optimization_level": "ORT_DISABLE_ALL"},
    "parallel": {"execution_mode": "ORT_PARALLEL"},
    "one_thread": {"intra_op_num_threads": 1},
    "other_bank": {"graph_optimization_level": "ORT_ENABLE_BASIC", "intra_op_num_threads": 2,
                   "execution_mode": "ORT_PARALLEL"},
}


def trial(best: dict, cand: dict) -> search.Trial:
    # kept only when 2% faster: the noise rule's minimum gain
    return search.Trial(trap_ms(cand) < 0.98 * trap_ms(best), True)


def _run(start_name: str, budget: int, defaults=DEFAULTS):
    start = {**DEFAULTS, **STARTS[start_name]}
    return search.search(start, job_types=[1], cpu_count=CORES, op_types=[], trial=trial,
                         max_candidates=budget, defaults=defaults)


@pytest.mark.parametrize("start_name", sorted(STARTS))
@pytest.mark.parametrize("budget", [24, 40])  # 24: the space (32) does not fit, single changes; 40: whole sweep
def test_from_every_start_the_search_keeps_the_fastest_setting(start_name, budget):
    log = _run(start_name, budget)
    assert trap_ms(log.best) <= 1.10 * FASTEST, (start_name, log.best, trap_ms(log.best))
    assert log.fixed_point and not log.stopped_early
    assert bool(log.swept) == (budget == 40) and log.space == 32
    # the defaults are always a candidate: the start itself, or the first setting timed
    if start_name == "defaults":
        assert log.defaults is None and all(t["source"] != "defaults" for t in log.trials)
    else:
        first = log.trials[0]
        assert first["source"] == "defaults" and first["settings"] == DEFAULTS
        assert first["change"] == {k: v for k, v in DEFAULTS.items() if log.start[k] != v}


def test_a_fixed_point_has_every_single_change_timed_against_the_kept_setting():
    log = _run("one_thread", 24)
    pairs = {(search.key(t["settings"]), search.key(b)) for t, b in _with_best(log)}
    pairs |= {(b, a) for a, b in pairs}
    best = search.key(log.best)
    for name, values in search.graph_dimensions(CORES):
        for value in values:
            if log.best[name] != value:
                assert (search.key({**log.best, name: value}), best) in pairs, (name, value)


def _with_best(log):
    """Each trial with the best it was timed against (rebuilt from the trials' order)."""
    best = dict(log.start)
    for t in log.trials:
        yield t, best
        if t["accepted"]:
            best = t["settings"]


def test_the_whole_sweep_alone_finds_the_fastest_from_parallel():
    # without the defaults candidate, the sweep is what escapes PARALLEL + 1 thread
    log = _run("parallel", 40, defaults=None)
    assert log.swept == 32 and trap_ms(log.best) == FASTEST
    assert {t["source"] for t in log.trials} == {"sweep"}  # the fixed point needed no more trials


def test_one_pass_per_knob_is_the_trap_the_new_search_escapes():
    # the old search, one pass over level, threads, mode, would stop here: PARALLEL with 1 thread,
    # a fixed point of single changes too. Only the defaults or the sweep get out of it.
    trapped = {**DEFAULTS, "execution_mode": "ORT_PARALLEL", "intra_op_num_threads": 1}
    for name, values in search.graph_dimensions(CORES):
        for value in values:
            assert not trial(trapped, {**trapped, name: value}).accepted
    assert trap_ms(trapped) / FASTEST > 3
    log = search.search(dict(trapped), job_types=[1], cpu_count=CORES, op_types=[], trial=trial,
                        max_candidates=24, defaults=DEFAULTS)
    assert trap_ms(log.best) == FASTEST


def test_a_small_budget_stops_early_and_says_so():
    log = _run("parallel", 3)
    assert len(log.trials) == 3 and log.stopped_early and not log.fixed_point
    assert log.trials[0]["source"] == "defaults"  # first, whatever the budget
    assert "stopped by max_candidates" in log.plan


def test_a_setting_that_fails_is_not_tried_again():
    broken = {"execution_mode": "ORT_PARALLEL"}
    calls = []

    def failing(best, cand):
        calls.append(search.key(cand))
        if cand["graph_optimization_level"] == "ORT_ENABLE_BASIC":  # say, this build refuses it
            return search.Trial(False, False, {"error": "refused"})
        return trial(best, cand)

    log = search.search({**DEFAULTS, **broken}, job_types=[1], cpu_count=CORES, op_types=[], trial=failing,
                        max_candidates=24, defaults=DEFAULTS)
    failed = [t for t in log.trials if "error" in t]
    assert failed and all(calls.count(search.key(t["settings"])) == 1 for t in failed)  # each once only
    assert trap_ms(log.best) == FASTEST


def test_job_type_2_alone_takes_back_a_banks_disabled_fusions():
    # a bank from elsewhere switched ConstantFolding off; the defaults candidate switches it back on
    def ms(s):
        return 2.0 if "ConstantFolding" in s["disabled_optimizers"] else 1.0

    start = {**DEFAULTS, "disabled_optimizers": ["ConstantFolding"]}
    log = search.search(start, job_types=[2], cpu_count=CORES, op_types=["Conv"],
                        trial=lambda b, c: search.Trial(ms(c) < 0.98 * ms(b), True), max_candidates=24,
                        defaults=DEFAULTS)
    assert log.trials[0]["source"] == "defaults" and log.trials[0]["change"] == {"disabled_optimizers": []}
    assert log.best["disabled_optimizers"] == [] and log.fixed_point
    assert all(t["job_type"] == 2 for t in log.trials)  # the graph knobs stay as they started


def test_comparison_text_reads_one_way_and_agrees_with_its_numbers():
    from ascendpipe.backends.onnxruntime.tune import comparison_text
    from ascendpipe.profiling import stats

    best, cand = [10.0, 10.2, 9.8, 10.0], [12.0, 12.3, 11.8, 12.1]
    text = comparison_text(stats.paired_gain(best, cand), best, cand, candidate="candidate", baseline="best so far")
    # the candidate takes more time, and the line says so in every number it prints
    assert text.startswith("candidate 12.05 ms a run against best so far 9.999 ms "
                           "(geometric means of 4 paired rounds): ")
    assert ": 20.5% slower, 95% CI" in text and "faster" not in text
    far = comparison_text(stats.paired_gain([1.0, 1.0, 1.0], [30.0, 31.0, 29.0]), [1.0] * 3, [30.0, 31.0, 29.0],
                          candidate="the start", baseline="the defaults")
    assert ": 30x the time, 95% CI" in far


def test_a_change_rejected_with_a_gain_in_its_mean_gets_one_second_look():
    # noise hid one thread's gain the first time: the interval straddled the minimum gain
    seen = []

    def noisy(best, cand):
        seen.append(search.key(cand))
        if cand["intra_op_num_threads"] == 1 and best["intra_op_num_threads"] != 1:
            if seen.count(search.key(cand)) == 1:
                return search.Trial(False, True, {"speedup": {"improvement_pct": 30.0}})
            return search.Trial(True, True, {"speedup": {"improvement_pct": 31.0}})
        return search.Trial(False, True, {"speedup": {"improvement_pct": -10.0}})

    log = search.search(dict(DEFAULTS), job_types=[1], cpu_count=CORES, op_types=[], trial=noisy,
                        max_candidates=24, defaults=DEFAULTS)
    assert log.best["intra_op_num_threads"] == 1 and log.fixed_point
    looks = [t for t in log.trials if t["source"] == "second look"]
    assert [t["change"] for t in looks] == [{"intra_op_num_threads": 1}] and looks[0]["accepted"]
    # the changes that were slower in their mean get none, and no pair gets a third
    assert all(t["settings"]["intra_op_num_threads"] == 1 for t in looks)
    no_budget = search.search(dict(DEFAULTS), job_types=[1], cpu_count=CORES, op_types=[], trial=noisy,
                              max_candidates=6, defaults=DEFAULTS)
    assert no_budget.trials[-1]["source"] == "step"  # the fixed point took the whole budget


def test_a_second_look_never_retimes_the_best_against_itself():
    # from A, B (DISABLE_ALL) is a gain in its mean only (undecided); C (BASIC) is kept; then B beats C.
    # The undecided pair (A, B) now names the best as its candidate: nothing to look at again
    import threading

    def trial(best, cand):
        level, then = cand["graph_optimization_level"], best["graph_optimization_level"]
        if (then, level) == ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
            return search.Trial(False, True, {"speedup": {"improvement_pct": 20.0}})
        if (then, level) in (("ORT_ENABLE_ALL", "ORT_ENABLE_BASIC"), ("ORT_ENABLE_BASIC", "ORT_DISABLE_ALL")):
            return search.Trial(True, True, {"speedup": {"improvement_pct": 10.0}})
        return search.Trial(False, True, {"speedup": {"improvement_pct": -5.0}})

    done = []
    # a budget of 30: single changes, no sweep (the space is 32)
    worker = threading.Thread(target=lambda: done.append(search.search(
        dict(DEFAULTS), job_types=[1], cpu_count=CORES, op_types=[], trial=trial, max_candidates=30)), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "the search did not end"
    log = done[0]
    assert log.best["graph_optimization_level"] == "ORT_DISABLE_ALL" and log.fixed_point
    assert all(t["source"] != "second look" or t["settings"] != log.best for t in log.trials)
