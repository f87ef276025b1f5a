"""The pure search on synthetic oracles: which remedy sets pass is known, so the answer is too."""

from __future__ import annotations

import random

import pytest

from ascendpipe.fix.search import FUSION, KEEP, Candidate, Result, one_by_one_cost, search

OPS = [f"o{i}" for i in range(20)]


def keep(*names):
    return {Candidate(KEEP, n) for n in names}


class Oracle:
    """The target holds iff every needed candidate is in the set. An op fails when a needed op at or
    before it (graph order) is missing, as an error propagates downstream. ``advice`` maps the first
    missing needed op to what the advisor would say (None: no advisor; 'rows-only' / 'blind' modes)."""

    def __init__(self, needed, ops=OPS, advice=None, mode="advisor"):
        self.needed, self.ops, self.advice, self.mode = set(needed), list(ops), advice, mode
        self.seen: list[frozenset] = []

    def evaluate(self, remedy: frozenset) -> Result:
        assert remedy not in self.seen, "the search evaluated the same set twice"
        self.seen.append(remedy)
        missing = [c for c in self._in_order() if c not in remedy]
        passed = not missing
        metric = 1.0 - 0.1 * len(missing)
        if self.mode == "blind":
            return Result(passed, metric, metric, ops=list(self.ops))
        first = missing[0] if missing else None
        position = self.ops.index(first.name) if first and first.name in self.ops else None
        rows = [{"op_name": op, "failed": position is not None and i >= position, "side": "both"}
                for i, op in enumerate(self.ops)]
        failure = None
        if first is not None and self.mode == "advisor":
            failure = {"op_name": first.name, "advice": self.advice(first) if self.advice else
                       [{"kind": "keep_dtype", "ops": [first.name]}]}
        return Result(passed, metric, metric, rows=rows, failure=failure, ops=list(self.ops))

    def _in_order(self):
        def pos(c):
            return self.ops.index(c.name) if c.name in self.ops else -1
        return sorted(self.needed, key=pos)


def test_finds_exactly_the_needed_ops_with_fewer_evaluations_than_one_by_one():
    oracle = Oracle(keep("o3", "o15"))
    out = search(oracle, max_attempts=40)
    assert out.passed and out.minimal
    assert set(out.remedy) == keep("o3", "o15")
    assert out.keep_dtype == ["o3", "o15"]
    # baseline, {o3}, {o3, o15} (passes), then {o15} fails; {o3} was seen while growing: 4 evaluations
    assert len(out.attempts) == 4
    assert len(out.attempts) < one_by_one_cost(OPS, {"o3", "o15"}) == 17


def test_overshooting_advice_is_shrunk_to_what_is_needed():
    # the advisor names the producer and the next op too (as its overflow advice does)
    def advice(c):
        i = OPS.index(c.name)
        return [{"kind": "keep_dtype", "ops": [OPS[max(i - 1, 0)], c.name, OPS[min(i + 1, 19)]]}]

    oracle = Oracle(keep("o3", "o15"), advice=advice)
    out = search(oracle, max_attempts=40)
    assert set(out.remedy) == keep("o3", "o15")
    for c in out.remedy:  # 1-minimal, checked against the oracle itself
        assert not Oracle(keep("o3", "o15")).evaluate(frozenset(out.remedy) - {c}).passed
    assert len(out.attempts) < one_by_one_cost(OPS, {"o3", "o15"})


def test_rows_without_advice_point_at_the_first_failing_op():
    out = search(Oracle(keep("o7", "o8", "o19"), mode="rows-only"), max_attempts=40)
    assert set(out.remedy) == keep("o7", "o8", "o19")
    assert out.passed and out.minimal


def test_blind_search_still_finds_the_minimal_set():
    out = search(Oracle(keep("o2", "o11"), mode="blind"), max_attempts=60)
    assert set(out.remedy) == keep("o2", "o11") and out.minimal
    grow = [a for a in out.attempts if a.phase == "grow"]
    assert [len(a.remedy) for a in grow] == [1, 3, 7, 15]  # batches of 1, 2, 4, 8: doubling


def test_l2norm_chain_discovers_the_sqrt_that_reads_through_fp16():
    ops = ["square", "sum", "sqrt", "div"]

    def advice(c):
        if c.name == "square":  # overflow: the op and the later op whose golden exceeds fp16 (sum)
            return [{"kind": "keep_dtype", "ops": ["square", "sum"]}]
        return [{"kind": "keep_dtype", "ops": [c.name]}]

    oracle = Oracle(keep("square", "sum", "sqrt"), ops=ops, advice=advice)
    out = search(oracle, max_attempts=20)
    assert out.keep_dtype == ["square", "sum", "sqrt"]
    assert [a.phase for a in out.attempts][:3] == ["baseline", "grow", "grow"]


def test_fusion_rule_is_a_candidate_when_the_advisor_points_at_a_fused_op():
    rule = Candidate(FUSION, "ConvBatchnormFusionPass")

    def advice(c):
        return [{"kind": "fusion_switch", "rules": [c.name]}] if c.kind == FUSION else [{"kind": "keep_dtype", "ops": [c.name]}]

    out = search(Oracle({rule, Candidate(KEEP, "o5")}, ops=OPS + ["ConvBatchnormFusionPass"], advice=advice), max_attempts=20)
    assert out.fusion_switch == {"ConvBatchnormFusionPass": "off"}
    assert out.keep_dtype == ["o5"]
    assert str(rule) == "ConvBatchnormFusionPass:off"


def test_already_passing_needs_one_evaluation_and_no_remedy():
    out = search(Oracle(set()), max_attempts=5)
    assert out.passed and out.remedy == () and len(out.attempts) == 1


def test_bounded_by_max_attempts_with_a_clear_message():
    out = search(Oracle(keep("o3", "o15", "o18")), max_attempts=3)
    assert not out.passed and len(out.attempts) == 3
    assert "--max-attempts 3" in out.message and "best attempt #3" in out.message


def test_running_out_while_shrinking_returns_the_passing_set_unminimised():
    def advice(c):
        return [{"kind": "keep_dtype", "ops": OPS[: OPS.index(c.name) + 1]}]  # everything up to it

    out = search(Oracle(keep("o9"), advice=advice), max_attempts=3)
    assert out.passed and not out.minimal
    assert set(out.remedy) >= keep("o9") and len(out.remedy) > 1
    assert "may hold remedies that are not needed" in out.message


def test_unreachable_target_stops_when_candidates_run_out():
    class Never:
        def evaluate(self, remedy):
            return Result(False, 0.0, 0.0, ops=["a", "b"])

    out = search(Never(), max_attempts=50)
    assert not out.passed
    assert "no more candidates" in out.message
    assert len(out.attempts) == 3  # {}, {a}, {a, b}


@pytest.mark.parametrize("seed", range(40))
def test_random_oracles_give_exactly_the_needed_set(seed):
    rng = random.Random(seed)
    needed = set(rng.sample(OPS, rng.randint(1, 4)))
    spread = rng.randint(0, 3)

    def advice(c):  # the op plus some neighbours, like producer/later-op advice
        i = OPS.index(c.name)
        return [{"kind": "keep_dtype", "ops": OPS[max(0, i - spread): i + spread + 1]}]

    out = search(Oracle(keep(*needed), advice=advice), max_attempts=200)
    assert out.passed and out.minimal
    assert set(out.keep_dtype) == needed


class RangeOracle(Oracle):
    """As Oracle, and the golden output of the ``big`` ops does not fit in fp16."""

    def __init__(self, needed, big, advice):
        super().__init__(needed, advice=advice)
        self.big = set(big)

    def evaluate(self, remedy):
        result = super().evaluate(remedy)
        for row in result.rows:
            row["golden_abs_max"] = 3.1e5 if row["op_name"] in self.big else 10.0
        return result


def test_ops_whose_golden_output_exceeds_fp16_are_kept_without_a_trial():
    # the advisor names the overflow chain at once; o4's output (3.1e5) cannot exist in fp16,
    # o5 only reads it: only o5 needs a trial to show it is needed
    oracle = RangeOracle(keep("o4", "o5"), big={"o4"},
                         advice=lambda first: [{"kind": "keep_dtype", "ops": ["o4", "o5"], "added": ["o4", "o5"]}])
    out = search(oracle, max_attempts=20)
    assert out.passed and out.minimal and set(out.remedy) == keep("o4", "o5")
    assert len(out.attempts) == 3  # baseline, {o4, o5}, then {o4} alone (fails): o5 is needed
    assert frozenset(keep("o5")) not in oracle.seen  # o4 was never dropped


def test_out_of_candidates_says_what_still_fails_and_why_no_remedy_takes_it():
    """A target no keep set reaches (issue 30's tight-target case): the message names the ops still
    failing: a Reshape is never kept (it carries what its input's op rounded), a kept MatMul still
    differs, an NMS is no op keep_dtype changes; never a bare "no more candidates"."""
    rows = [{"op_name": "m1", "op_type": "MatMul", "failed": True},
            {"op_name": "r1", "op_type": "Reshape", "failed": True},
            {"op_name": "n1", "op_type": "NonMaxSuppression", "failed": True}]

    class Tight:
        def evaluate(self, remedy):
            return Result(False, 0.9999, 0.9999, rows=[dict(r) for r in rows], ops=["m1", "r1", "n1"],
                          candidates=frozenset({"m1"}))

    out = search(Tight(), max_attempts=10)
    assert not out.passed and [c.name for c in out.attempts[-1].remedy] == ["m1"]
    assert out.message.startswith("target not met: no more candidates to try; still failing: ")
    assert "r1 (Reshape) only moves values, so it is never kept: it carries what the ops before rounded" in out.message
    assert "m1 (MatMul) is kept in fp32 and still differs: its inputs arrive rounded" in out.message
    assert "n1 (NonMaxSuppression) is not an op keep_dtype can change" in out.message


def test_a_fused_row_whose_ops_are_all_kept_switches_off_only_a_pass_that_changes_values():
    """A UB fusion's members keep their own dtypes (precision/atc_passes.py): switching one off changes
    no value, so it is never a candidate; a graph fold (ConvBatchnormFusionPass) is."""
    from ascendpipe.fix.search import first_failing

    def rows(rule):
        return [{"op_name": "/ReduceSum", "failed": True, "side": "both", "fused": True, "pass_name": rule,
                 "golden_ops": ["/Mul_1", "/ReduceSum", "/Sqrt"]}]

    kept = keep("/Mul_1", "/ReduceSum", "/Sqrt")
    assert first_failing(rows("TbeReduceElemwiseFusionPass"), kept) == []
    assert first_failing(rows("ConvBatchnormFusionPass"), kept) == [Candidate(FUSION, "ConvBatchnormFusionPass")]
    assert first_failing(rows("SomeFutureFusionPass"), kept) == [Candidate(FUSION, "SomeFutureFusionPass")]
