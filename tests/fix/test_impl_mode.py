"""Issue 47 item 5 (part B): fix proposes an op's impl mode (``op_precision_mode``: ``<GE type>=high_precision``)
where the kernel table says it restores the op on this SoC, and only there.

The model (tests/fix/layernorm_models.py): an ONNX LayerNormalization whose fp16 kernel on Ascend310
(high_performance: every step in fp16, canndev layer_norm.py L614-623) gives NaN; under high_precision the
kernel computes in fp32 inside. Every answer is checked independently: a plain convert with the files fix
wrote, run on onnxruntime, its output compared with numpy's cosine against the fp32 model's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.fix import layernorm_models as lm


@pytest.fixture()
def layer_norm(tmp_path):
    model = lm.layer_norm(tmp_path / "ln.onnx")
    feeds = lm.inputs()
    np.savez(tmp_path / "x.npz", **feeds)
    return model, feeds, tmp_path / "x.npz"


def test_fix_on_ascend310_answers_layernorm_high_precision_and_the_written_ini_restores_a_plain_convert(
        layer_norm, tmp_path):
    from ascendpipe.fix.core import IMPL, Candidate
    from ascendpipe.fix.run import fix_standalone

    model, feeds, given = layer_norm
    assert lm.emulated_cosine(model, feeds, tmp_path / "plain", soc_version="Ascend310") < 0.5  # the failure is real
    report = fix_standalone(model, input_path=given, soc_version="Ascend310", output=tmp_path / "out")
    out = report.outcome
    assert out.passed and out.minimal
    assert out.remedy == (Candidate(IMPL, "LayerNorm"),)  # the device-friendly remedy first, and it suffices
    assert report.keep_dtype == [] and report.fusion_switch == {}
    assert len(out.attempts) == 2  # baseline, then the impl line: no keep_dtype trial before it
    data = json.loads((tmp_path / "out" / "fix.json").read_text())
    assert data["op_precision_mode"] == {"LayerNorm": "high_precision"} and data["keep_dtype"] == []
    ini = tmp_path / "out" / "op_precision_mode.ini"
    lines = ini.read_text().splitlines()
    assert "LayerNorm=high_precision" in lines and lines == sorted(lines)
    # the other types keep the modes op_select_implmode's ini gave them (the file replaces that ini)
    assert "Exp=high_performance" in lines and "Gelu=high_precision" in lines
    assert not (tmp_path / "out" / "keep_dtype.cfg").exists()
    text = report.text()
    assert "LayerNorm=high_precision" in text
    assert f'op_precision_mode: "{ini}"' in text and f"stages.convert.params.op_precision_mode=\"{ini}\"" in text
    assert f"--op-precision-mode {ini}" in text  # the convert line that applies it
    # the answer, applied by a plain convert with that ini, restores the output and passes compare
    assert lm.emulated_cosine(model, feeds, tmp_path / "applied", soc_version="Ascend310", op_precision_mode=ini) >= 0.99
    before, _plan, _settings = lm.compare_converted(model, feeds, tmp_path / "c0", "Ascend310")
    after, _plan, _settings = lm.compare_converted(model, feeds, tmp_path / "c1", "Ascend310",
                                                   {"op_precision_mode": str(ini)})
    assert before["first_failure"]["op_name"] == "ln" and before["summary"]["outputs_pass"] is False
    assert not after["first_failure"] and after["summary"]["outputs_pass"] is True
    assert after["summary"]["output_cosine"] >= 0.99


def test_the_impl_line_comes_with_keep_dtype_where_an_overflow_needs_fp32_data_and_never_on_ascend910b(tmp_path):
    """scale_up's golden lies beyond 65504 on every SoC: only keep_dtype changes that. On Ascend310 the
    LayerNorm still needs high_precision; on Ascend910B1 its kernel is fp32 inside already: no attempt
    there ever holds an impl candidate."""
    from ascendpipe.fix.core import IMPL, KEEP, Candidate
    from ascendpipe.fix.run import fix_standalone

    model = lm.layer_norm(tmp_path / "scaled.onnx", scale=1e5)
    feeds = lm.inputs()
    np.savez(tmp_path / "x.npz", **feeds)
    on310 = fix_standalone(model, input_path=tmp_path / "x.npz", soc_version="Ascend310", output=tmp_path / "310")
    assert on310.outcome.passed
    assert set(on310.outcome.remedy) == {Candidate(KEEP, "scale_up"), Candidate(IMPL, "LayerNorm")}
    ini = tmp_path / "310" / "op_precision_mode.ini"
    assert lm.emulated_cosine(model, feeds, tmp_path / "a310", soc_version="Ascend310", op_precision_mode=ini,
                              keep=on310.keep_dtype) >= 0.99
    assert lm.emulated_cosine(model, feeds, tmp_path / "k310", soc_version="Ascend310", keep=on310.keep_dtype) < 0.5

    on910 = fix_standalone(model, input_path=tmp_path / "x.npz", soc_version="Ascend910B1", output=tmp_path / "910")
    assert on910.outcome.passed and on910.keep_dtype == ["scale_up"]
    assert not any(c.kind == IMPL for a in on910.outcome.attempts for c in a.remedy)
    assert on910.summary["op_precision_mode"] == {}
    assert not (tmp_path / "910" / "op_precision_mode.ini").exists()
    assert not (on910.outcome.attempts[0].result.impl_remedies or {})  # the kernel table's answer, not a guess


def test_an_op_type_already_high_precision_is_never_offered(layer_norm, tmp_path):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision import impl_remedy
    from ascendpipe.precision.settings import resolve

    model, _feeds, _given = layer_norm
    (tmp_path / "hp.ini").write_text("LayerNorm=high_precision\n")
    plain = convert_model(model, tmp_path / "plain", resolve({"precision_mode": "force_fp16", "soc_version": "Ascend310"}))
    given = convert_model(model, tmp_path / "given", resolve({"precision_mode": "force_fp16", "soc_version": "Ascend310",
                                                              "op_precision_mode": str(tmp_path / "hp.ini")}))
    plan = lambda c: json.loads((c.model_path.parent / "precision_plan.json").read_text())
    assert impl_remedy.remedies(plan(plain), "Ascend310") == {"ln": "LayerNorm"}
    assert impl_remedy.remedies(plan(given), "Ascend310") == {}


def test_a_journal_resumes_the_impl_kind(layer_norm, tmp_path):
    from ascendpipe.fix.core import IMPL, Candidate
    from ascendpipe.fix.run import fix_standalone

    model, _feeds, given = layer_norm
    first = fix_standalone(model, input_path=given, soc_version="Ascend310", output=tmp_path / "out")
    ini = (tmp_path / "out" / "op_precision_mode.ini").read_text()
    entries = [json.loads(p.read_text()) for p in sorted((tmp_path / "out" / "attempts").glob("attempt-*.json"))]
    assert ["op_precision_mode", "LayerNorm"] in entries[-1]["remedy"]
    assert entries[0]["result"]["impl_remedies"] == {"ln": "LayerNorm"}
    again = fix_standalone(model, input_path=given, soc_version="Ascend310", output=tmp_path / "out")
    assert again.outcome.remedy == first.outcome.remedy == (Candidate(IMPL, "LayerNorm"),)
    assert again.outcome.evaluated == 0 and again.summary["resumed"] == len(first.outcome.attempts) == 2
    baseline = again.outcome.attempts[0].result
    assert baseline.resumed and baseline.impl_remedies == {"ln": "LayerNorm"}
    assert (tmp_path / "out" / "op_precision_mode.ini").read_text() == ini  # one set, one text


def test_pipeline_fix_sets_the_convert_stages_op_precision_mode_and_the_answer_rebuilds_from_cache(tmp_path, monkeypatch):
    """Pipeline mode: the impl remedy is an op_precision_mode file in fix's output folder (the convert param is
    a path), named by its content; the ``--set`` line fix prints rebuilds the passing attempt from the cache."""
    import yaml

    import ascendpipe
    from ascendpipe.fix.core import IMPL, Candidate
    from ascendpipe.fix.run import fix_pipeline

    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    (root / "data").mkdir()
    lm.layer_norm(root / "model.onnx")
    np.save(root / "data" / "x.npy", lm.inputs()["x"])
    pipeline = {"backend": "onnxruntime", "stages": {
        "convert": {"kind": "convert", "model": "model.onnx",
                    "params": {"precision_mode": "force_fp16", "soc_version": "Ascend310"}},
        "compare": {"kind": "compare", "golden": "model.onnx", "target": "convert", "inputs": "data/x.npy"}}}
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    monkeypatch.chdir(root)
    report = fix_pipeline(root / "pipeline.yaml", stage="convert", metric="compare.output_cosine", tolerance=None,
                          min_cosine=0.99)
    assert report.outcome.passed and report.outcome.remedy == (Candidate(IMPL, "LayerNorm"),)
    assert report.summary["op_precision_mode"] == {"LayerNorm": "high_precision"}
    (line,) = report.summary["set"]
    assert line.startswith("stages.convert.params.op_precision_mode=")
    path = json.loads(line.split("=", 1)[1])
    assert "LayerNorm=high_precision" in open(path).read().splitlines()
    assert f'op_precision_mode: "{path}"' in report.text()
    assert path == str((root / "build" / "fix" / "convert").resolve() / Path(path).name)  # fix's own folder
    assert (root / "build" / "fix" / "convert" / "op_precision_mode.ini").read_text() == open(path).read()
    # the answer re-applied is the attempt that found it: converted and compared from the cache, and it passes
    run = ascendpipe.build(str(root / "pipeline.yaml"), ["compare"], set=[line], quiet=True)
    assert run["stages"]["compare"]["metrics"]["output_cosine"] >= 0.99
    assert run["stages"]["convert"]["state"] != "ran" and run["stages"]["compare"]["state"] != "ran"


def test_the_users_own_op_precision_mode_lines_are_carried_into_the_answers_file(layer_norm, tmp_path):
    """With --op-precision-mode given, ATC reads that file alone: the answer's file is its lines plus the
    remedy's (sorted; a line for the same type replaced), not the op_select_implmode ini."""
    from ascendpipe.fix.run import fix_standalone

    model, feeds, given = layer_norm
    own = tmp_path / "own.ini"
    own.write_text("SoftmaxV2=high_precision\nLayerNorm=high_performance\n")
    report = fix_standalone(model, input_path=given, soc_version="Ascend310", output=tmp_path / "out",
                            params={"op_precision_mode": str(own)})
    assert report.summary["op_precision_mode"] == {"LayerNorm": "high_precision"}
    ini = tmp_path / "out" / "op_precision_mode.ini"
    assert ini.read_text() == "LayerNorm=high_precision\nSoftmaxV2=high_precision\n"
    assert lm.emulated_cosine(model, feeds, tmp_path / "applied", soc_version="Ascend310", op_precision_mode=ini) >= 0.99


class _LadderOracle:
    """One failing LayerNorm op 'ln' whose kernel high_precision changes (``impl_remedies``); ``fixes``: which
    remedy restores the target (the impl line, or only keeping the op)."""

    def __init__(self, fixes):
        self.fixes, self.seen = fixes, []

    def evaluate(self, remedy):
        from ascendpipe.fix.core import IMPL, Result

        self.seen.append(remedy)
        passed = any(c in remedy for c in self.fixes)
        typed = any(c.kind == IMPL for c in remedy)
        rows = [{"op_name": "ln", "failed": not passed, "side": "both", "golden_abs_max": 4.0}]
        failure = None if passed else {"op_name": "ln", "advice": [{"kind": "keep_dtype", "ops": ["ln"]}]}
        # once LayerNorm runs under high_precision the plan offers it no more
        return Result(passed, float(passed), float(passed), rows=rows, failure=failure, ops=["ln"],
                      impl_remedies={} if typed else {"ln": "LayerNorm"})


def test_the_impl_line_is_tried_before_keeping_the_op_and_keep_follows_where_it_does_not_suffice():
    from ascendpipe.fix.core import IMPL, KEEP, Candidate
    from ascendpipe.fix.search import search

    impl, kept = Candidate(IMPL, "LayerNorm"), Candidate(KEEP, "ln")
    enough = _LadderOracle([impl])
    out = search(enough)
    assert out.remedy == (impl,) and [a.remedy for a in out.attempts] == [(), (impl,)]
    short = _LadderOracle([kept])
    out = search(short)
    assert out.passed and out.remedy == (kept,)
    # baseline, the impl line, the impl line and the op kept, then the shrink's trial without the impl line
    assert [set(a.remedy) for a in out.attempts] == [set(), {impl}, {impl, kept}, {kept}]
