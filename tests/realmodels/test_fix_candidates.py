"""fix proposes only what keep_dtype can change, reads each attempt's own first failure, and
switches a fusion pass off when the kept ops of a fused row still fail."""

from __future__ import annotations

import json

import numpy as np

from ascendpipe.fix.evaluators import keep_candidates
from ascendpipe.fix.search import FUSION, KEEP, Candidate, Result, propose, search
from tests import modelzoo

OPS = [f"o{i:02d}" for i in range(24)]
CONSTANTS = {f"o{i:02d}" for i in range(0, 24, 3)}  # every third op is a Constant: never a candidate


class FailureOnly:
    """The target holds iff the needed ops are kept. Each attempt names its first failure with no
    advice and no rows, at the Constant that feeds the first needed op not kept (as a compare row of
    a Constant would): the evidence a search must re-read per attempt."""

    def __init__(self, needed):
        self.needed, self.seen = list(needed), []

    def evaluate(self, remedy: frozenset) -> Result:
        self.seen.append(remedy)
        kept = {c.name for c in remedy}
        missing = [op for op in self.needed if op not in kept]
        failure = {"op_name": OPS[OPS.index(missing[0]) - 1], "advice": []} if missing else None
        return Result(not missing, 1.0 - len(missing) / 10, rows=[], failure=failure, ops=list(OPS),
                      candidates=frozenset(OPS) - CONSTANTS)


def test_blind_growth_starts_at_each_attempts_first_failure_and_skips_constants():
    oracle = FailureOnly(["o13", "o19"])
    out = search(oracle, max_attempts=30)
    assert out.passed and out.minimal and out.keep_dtype == ["o13", "o19"]
    tried = {c.name for remedy in oracle.seen for c in remedy}
    assert tried == {"o13", "o19"}  # no Constant, nothing upstream of a failure, nothing past the culprit
    # baseline, +o13 (the failure moves to o18), +o19 passes, then {o19} fails: one by one needs 21
    assert len(oracle.seen) == 4


def test_the_failures_own_op_is_tried_when_there_are_no_rows():
    result = Result(False, 0.0, rows=[], failure={"op_name": "o07", "advice": []}, ops=list(OPS))
    assert propose(result, frozenset(), 4) == ([Candidate(KEEP, "o07")], False)


def test_propose_never_offers_an_op_outside_the_candidates():
    rows = [{"op_name": "mm_int", "failed": True}, {"op_name": "dequant", "failed": True}]
    failure = {"op_name": "mm_int", "advice": [{"kind": "keep_dtype", "ops": ["mm_int"], "added": ["mm_int"]}]}
    result = Result(False, 0.0, rows=rows, failure=failure, ops=["quant", "mm_int", "dequant"],
                    candidates=frozenset({"dequant"}))
    assert propose(result, frozenset(), 1) == ([Candidate(KEEP, "dequant")], False)


def test_a_failing_fused_row_whose_ops_are_kept_gets_its_pass_switched_off():
    rows = [{"op_name": "conv", "golden_ops": ["bn", "conv"], "failed": True, "pass_name": "ConvBatchnormFusionPass"}]
    result = Result(False, 0.0, rows=rows, failure={"op_name": "conv", "advice": []})
    kept = frozenset({Candidate(KEEP, "bn"), Candidate(KEEP, "conv")})
    assert propose(result, kept, 1) == ([Candidate(FUSION, "ConvBatchnormFusionPass")], False)


def test_the_first_failures_row_comes_before_earlier_failing_rows():
    rows = [{"op_name": "a", "failed": True}, {"op_name": "b", "failed": True}]
    result = Result(False, 0.0, rows=rows, failure={"op_name": "b", "advice": []})
    assert propose(result, frozenset(), 1) == ([Candidate(KEEP, "b")], False)


def test_keep_candidates_come_from_the_plan_and_the_fused_map():
    plan = {"nodes": {"conv": {"keepable": True}, "c": {"keepable": False}, "q": {"keepable": False}}}
    assert keep_candidates(plan, {"fused": {"conv": ["bn", "conv"]}}) == {"bn", "conv"}
    assert keep_candidates({"nodes": {"conv": {"dtype": "float16"}}}, None) is None  # an older plan: no filter


def test_standalone_fix_on_an_int8_block_keeps_only_float_ops(tmp_path):
    from ascendpipe.fix.run import fix_standalone

    model = modelzoo.int8_dynamic_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **modelzoo.int8_dynamic_overflow_inputs())
    report = fix_standalone(model, input_path=tmp_path / "x.npz", min_cosine=0.99, output=tmp_path / "out")
    assert report.outcome.passed and report.keep_dtype == ["dequant"]
    tried = {c.name for a in report.outcome.attempts for c in a.remedy}
    assert not tried & {"quant", "mm_int", "bias_int"}
    assert json.loads((tmp_path / "out" / "fix.json").read_text())["keep_dtype"] == ["dequant"]
