"""Issue 49 (items 1, 2): a deep model whose every block breaks alike is fixed in a few evaluations, each
attempt is printed and written as it ends, and a stopped search resumes where it was.

The 32-block RMSNorm stack (tests/fix/deep_models.py) overflows fp16 in every block's mean of squares.
Every answer is checked independently: the model converted again with it, run on onnxruntime, its
logits compared with numpy's cosine against the fp32 model's."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

from tests.fix import deep_models as dm

BLOCKS = 32


def _cosine(model, feeds, out, keep, fusion=None) -> float:
    import onnxruntime as ort

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    converted = convert_model(model, out, resolve({"precision_mode": "force_fp16", "keep_dtype": list(keep),
                                                   "fusion_switch": dict(fusion or {})}))
    run = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    t, g = run(converted.model_path).astype(np.float64).ravel(), run(model).astype(np.float64).ravel()
    if not np.isfinite(t).all() or not np.linalg.norm(t):
        return 0.0  # inf/NaN, or all zeros (every norm divided by inf): nothing of the golden is left
    return float(t @ g / (np.linalg.norm(t) * np.linalg.norm(g)))


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    root = tmp_path_factory.mktemp("deep")
    model = dm.rmsnorm_stack(root / "deep.onnx", blocks=BLOCKS)
    np.save(root / "x.npy", dm.inputs()["hidden"])
    return model, root / "x.npy"


@pytest.mark.parametrize("names", ["hf", "flat"])
def test_a_32_block_model_whose_every_norm_overflows_is_fixed_in_at_most_8_evaluations(tmp_path, names):
    from ascendpipe.fix.run import fix_standalone

    model = dm.rmsnorm_stack(tmp_path / "deep.onnx", blocks=BLOCKS, names=names)
    feeds = dm.inputs()
    np.save(tmp_path / "x.npy", feeds["hidden"])
    assert _cosine(model, feeds, tmp_path / "plain", []) < 0.5  # every block's norm divides by inf
    report = fix_standalone(model, input_path=tmp_path / "x.npy", output=tmp_path / "out")
    out = report.outcome
    assert out.passed and len(out.attempts) <= 8, [a.phase for a in out.attempts]
    # one grow step joined every block (the second attempt already passes), the way one by one would take 33
    assert [a.phase for a in out.attempts[:2]] == ["baseline", "grow"] and out.attempts[1].result.passed
    # the norm of each of the 32 blocks and the final one: 33 x (Pow, ReduceMean, Add, Sqrt)
    kinds = {}
    for name in report.keep_dtype:
        kinds.setdefault(name.rsplit("/", 1)[-1] if names == "hf" else name.split("_")[0], []).append(name)
    assert {k: len(v) for k, v in kinds.items()} == {"Pow": 33, "ReduceMean": 33, "Add": 33, "Sqrt": 33} \
        if names == "hf" else {"/Pow": 33, "/ReduceMean": 33, "/Add": 33, "/Sqrt": 33}
    # no fusion switch: a UB-fused kernel's members keep their own dtypes (precision/atc_passes.py)
    assert report.fusion_switch == {}
    assert _cosine(model, feeds, tmp_path / "fixed", report.keep_dtype, report.fusion_switch) >= 0.99
    assert set(report.summary["by_range"]) == set(report.keep_dtype)
    assert "132 kept by range, not tested one by one" in out.message and "each one is needed" not in out.message


def test_the_same_op_of_other_blocks_joins_only_with_its_own_evidence():
    """Siblings join when their own golden lies beyond fp16's range, never for their names alone."""
    from ascendpipe.fix.causes import Blocks, block_pattern, sibling_causes

    assert block_pattern("/model/layers.12/input_layernorm/Pow") == "/model/layers.#/input_layernorm/Pow"
    assert block_pattern("/model/norm/Pow") is None and block_pattern("/Pow_12") is None
    assert block_pattern("encoder.layer.3.attention.MatMul") == "encoder.layer.#.attention.MatMul"
    rows = [{"index": i, "op_name": f"/m/layers.{i}/ln/ReduceMean", "op_type": "ReduceMean", "side": "both",
             "golden_abs_max": peak, "failed": i == 0} for i, peak in enumerate([9e4, 1e5, 30.0, 2e5])]
    rows.append({"index": 4, "op_name": "/m/norm/ReduceMean", "op_type": "ReduceMean", "side": "both",
                 "golden_abs_max": 9e4})
    cause = {"op_name": "/m/layers.0/ln/ReduceMean", "mechanism": "overflow"}
    found = sibling_causes(rows, None, [cause], Blocks(rows, None))
    assert found == [1, 3]  # layers 1 and 3 (beyond range); not layer 2 (in range), not the final norm (no pattern)
    assert sibling_causes(rows, None, [{**cause, "mechanism": "precision_loss"}], Blocks(rows, None)) == []


def _interrupt_at(monkeypatch, target, number: int, exc=KeyboardInterrupt):
    """``target.evaluate`` raises ``exc`` at its ``number``-th call; returns the call counter."""
    calls = {"n": 0}
    original = target.evaluate

    def evaluate(self, remedy):
        calls["n"] += 1
        if calls["n"] == number:
            raise exc()
        return original(self, remedy)

    monkeypatch.setattr(target, "evaluate", evaluate)
    return calls


def test_a_stopped_search_keeps_its_attempts_and_a_rerun_resumes(deep, tmp_path, monkeypatch):
    from ascendpipe.fix import evaluators
    from ascendpipe.fix.run import fix_standalone

    model, x = deep
    out = tmp_path / "out"
    calls = _interrupt_at(monkeypatch, evaluators.StandaloneEvaluator, 2)  # ^C during the first grow step
    stopped = fix_standalone(model, input_path=x, output=out)
    assert stopped.outcome.interrupted and not stopped.outcome.passed and len(stopped.outcome.attempts) == 1
    assert stopped.summary["interrupted"] and "run the same command again to resume" in stopped.text()
    assert sorted(p.name for p in (out / "attempts").glob("attempt-*.json")) == ["attempt-0001.json"]
    monkeypatch.undo()
    calls = _interrupt_at(monkeypatch, evaluators.StandaloneEvaluator, 99)  # counts only
    resumed = fix_standalone(model, input_path=x, output=out)
    # the baseline is read back; only what the journal lacks is evaluated
    assert resumed.outcome.passed and calls["n"] == len(resumed.outcome.attempts) - 1 == resumed.outcome.evaluated
    assert resumed.outcome.attempts[0].result.resumed and resumed.summary["resumed"] == 1
    assert "resumed 1 attempt from" in resumed.text()
    # a finished search reruns from its journal alone: nothing evaluated, the same answer
    again = fix_standalone(model, input_path=x, output=out)
    assert calls["n"] == len(resumed.outcome.attempts) - 1 and again.outcome.evaluated == 0
    assert again.keep_dtype == resumed.keep_dtype and again.outcome.message == resumed.outcome.message
    # other arguments (a tighter target): the journal is not theirs, every attempt is evaluated again
    other = fix_standalone(model, input_path=x, output=out, min_cosine=0.999)
    assert other.outcome.evaluated == len(other.outcome.attempts)


def test_a_failing_evaluation_keeps_the_attempts_before_it(deep, tmp_path, monkeypatch):
    from ascendpipe.fix import evaluators
    from ascendpipe.fix.run import fix_standalone

    model, x = deep
    # the search takes two evaluations (baseline, one grow step that meets the target): the second fails
    _interrupt_at(monkeypatch, evaluators.StandaloneEvaluator, 2, exc=lambda: RuntimeError("device lost"))
    with pytest.raises(RuntimeError, match="device lost"):
        fix_standalone(model, input_path=x, output=tmp_path / "out")
    assert len(list((tmp_path / "out" / "attempts").glob("attempt-*.json"))) == 1
    monkeypatch.undo()
    resumed = fix_standalone(model, input_path=x, output=tmp_path / "out")
    assert resumed.outcome.passed and resumed.outcome.evaluated == len(resumed.outcome.attempts) - 1


def test_without_output_the_journal_lives_in_the_cache_until_the_search_ends(deep, tmp_path, monkeypatch):
    from ascendpipe.fix import evaluators
    from ascendpipe.fix.run import fix_standalone

    model, x = deep
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _interrupt_at(monkeypatch, evaluators.StandaloneEvaluator, 2)
    stopped = fix_standalone(model, input_path=x)
    kept = stopped.summary["journal"]
    assert kept and kept.startswith(str(tmp_path / "cache" / "ascendpipe" / "fix"))
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    resumed = fix_standalone(model, input_path=x)
    assert resumed.outcome.passed and resumed.outcome.attempts[0].result.resumed
    assert not (tmp_path / "cache" / "ascendpipe" / "fix").exists() or not any(
        (tmp_path / "cache" / "ascendpipe" / "fix").iterdir())  # done: nothing left to resume


def test_each_attempt_is_printed_as_it_ends_and_the_rows_fit_the_width(deep, tmp_path):
    from ascendpipe.fix.report import attempt_table
    from ascendpipe.fix.run import fix_standalone

    model, x = deep
    lines = io.StringIO()
    report = fix_standalone(model, input_path=x, progress=lines)
    printed = lines.getvalue().splitlines()
    assert len(printed) == len(report.outcome.attempts)  # not a terminal: one plain line per attempt, no codes
    assert "\r" not in lines.getvalue() and "\033" not in lines.getvalue()
    assert printed[0].split()[:3] == ["attempt", "1", "baseline"] and "target not met" in printed[0]
    assert "132 remedies" in printed[1] and "target met" in printed[1]  # 33 norms x 4 ops, no fusion switch
    for width in (80, 120):
        table = attempt_table(report.outcome, "output cosine", width=width).splitlines()
        assert max(len(line) for line in table) <= width, table
        if width >= 120:  # room for the repeated blocks' ops, once, with their count
            assert "/model/layers.*/input_layernorm/" in table[3] and "×32" in table[3], table
        else:
            assert "132 remedies" in table[3] or "more)" in table[3], table
    rows = report.summary["table"]  # the JSON keeps every set in full
    assert len(rows[1]["remedy"]) == 132


def test_cli_prints_nothing_until_the_end_off_a_terminal_and_exits_130_on_ctrl_c(deep, tmp_path, monkeypatch):
    from ascendpipe.cli.main import main
    from ascendpipe.fix import evaluators

    model, x = deep
    out = io.StringIO()
    _interrupt_at(monkeypatch, evaluators.StandaloneEvaluator, 2)
    with redirect_stdout(out):
        code = main(["fix", "--golden", str(model), "--input", str(x), "--output", str(tmp_path / "o"), "--json"])
    assert code == 130
    data = json.loads(out.getvalue())
    assert data["interrupted"] and data["attempts"] == 1 and data["journal"] == str(tmp_path / "o" / "attempts")
