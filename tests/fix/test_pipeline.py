"""Pipeline fix: every attempt an engine build (recorded, cached), the metric read from eval."""

from __future__ import annotations

import json

import pytest
import yaml

import ascendpipe
from ascendpipe.errors import UserError
from tests.fix.workspaces import classification_pipeline, l2norm_workspace

PIPELINE = classification_pipeline("convert", {"matrix": {"fp32": {"precision_mode": "force_fp32"},
                                                          "fp16": {"precision_mode": "force_fp16"}}})


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    return l2norm_workspace(tmp_path, monkeypatch, PIPELINE)


def _top1(root, keep, fusion=None):
    over = [f"stages.convert.matrix.fp16.keep_dtype={json.dumps(keep)}"] if keep else []
    over += [f"stages.convert.matrix.fp16.fusion_switch={json.dumps(fusion)}"] if fusion else []
    run = ascendpipe.build(str(root / "pipeline.yaml"), ["eval@fp16"], set=over, quiet=True)
    return run["stages"]["eval@fp16"]["metrics"]["top1"], run


def test_pipeline_fix_finds_a_minimal_set_and_reruns_from_cache(workspace):
    from ascendpipe.fix.run import fix_pipeline

    report = fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="eval.top1", tolerance=0.01)
    out = report.outcome
    assert out.passed and out.minimal
    assert report.summary["golden_metric"] == 1.0
    assert report.keep_dtype[:3] == ["square", "sum", "sqrt"]
    # square -> sum -> sqrt is one TbeReduceElemwiseFusionPass kernel whose members keep their own dtypes: no switch
    assert report.fusion_switch == {}
    # fix leaves the workspace as the pipeline file describes it, not as its last attempt did
    status = ascendpipe.status(str(workspace / "pipeline.yaml"))
    touched = {n: s["state"] for n, s in status["stages"].items() if n.endswith("@fp16")}
    assert touched and set(touched.values()) == {"fresh"}, touched
    # independent judgement through plain builds: the answer holds, and each kept op is needed
    top1, _ = _top1(workspace, report.keep_dtype, report.fusion_switch)
    assert top1 >= 1.0 - 0.01
    for op in report.keep_dtype:
        assert _top1(workspace, [k for k in report.keep_dtype if k != op], report.fusion_switch)[0] < 0.99, op
    # every attempt is a recorded run
    runs = report.summary["runs"]
    assert len(runs) == len(out.attempts) and all(ascendpipe.show(r)["id"] == r for r in runs)
    # rerunning fix resumes from its journal: the baseline is built again (from the cache: nothing is converted
    # or inferred) to check the stage keys, every other attempt is read back, with the run it recorded
    again = fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="eval.top1", tolerance=0.01)
    assert again.keep_dtype == report.keep_dtype and len(again.outcome.attempts) == len(out.attempts)
    assert again.outcome.evaluated == 1 and [a.result.resumed for a in again.outcome.attempts] == \
        [False] + [True] * (len(out.attempts) - 1)
    assert again.summary["runs"][1:] == runs[1:] and again.summary["resumed"] == len(out.attempts) - 1
    states = {n: s["state"] for n, s in ascendpipe.show(again.summary["runs"][0])["stages"].items()}
    assert states["convert@fp16"] != "ran" and states["infer@fp16"] != "ran" and states["eval@fp16"] != "ran"
    written = workspace / "build" / "fix" / "convert__fp16" / "keep_dtype.cfg"
    assert written.read_text().split() == report.keep_dtype
    # the printed YAML lines, merged into the pipeline, apply the remedy
    from ascendpipe.fix.report import yaml_lines

    text = report.text()
    lines = yaml_lines(report.stage_prefix, report.keep_dtype, report.fusion_switch)
    assert lines in text
    doc = json.loads(json.dumps(PIPELINE))
    doc["stages"]["convert"]["matrix"]["fp16"].update(yaml.safe_load(lines)["stages"]["convert"]["matrix"]["fp16"])
    # pasted into the pipeline itself (a copy beside it would be a second pipeline writing its folders)
    (workspace / "pipeline.yaml").write_text(yaml.safe_dump(doc))
    run = ascendpipe.build(str(workspace / "pipeline.yaml"), ["eval@fp16"], quiet=True)
    assert run["stages"]["eval@fp16"]["metrics"]["top1"] >= 0.99


def test_pipeline_names_are_checked(workspace):
    from ascendpipe.fix.run import fix_pipeline

    with pytest.raises(UserError, match="has variants convert@fp32, convert@fp16"):
        fix_pipeline(workspace / "pipeline.yaml", stage="convert", metric="eval.top1")
    with pytest.raises(UserError, match="STAGE.METRIC"):
        fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="top1")
    with pytest.raises(UserError, match="no stage 'evaluation' depends on"):
        fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="evaluation.top1")


def test_unknown_metric_names_what_the_stage_reports(workspace):
    from ascendpipe.fix.run import fix_pipeline

    with pytest.raises(UserError, match="no metric 'mAP'; it reports: .*top1"):
        fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="eval.mAP", max_attempts=2)


def test_a_stopped_pipeline_fix_resumes_from_its_journal(workspace, monkeypatch):
    """^C during the second attempt's build: the first is kept (build/fix/STAGE/attempts), the workspace
    is put back, and the same command resumes: the baseline is built again (from the cache) to check the
    stage keys, the rest is evaluated once."""
    from ascendpipe.fix import evaluators
    from ascendpipe.fix.run import fix_pipeline

    original, calls = evaluators.PipelineEvaluator.evaluate, {"n": 0}

    def evaluate(self, remedy):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self, remedy)

    monkeypatch.setattr(evaluators.PipelineEvaluator, "evaluate", evaluate)
    stopped = fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="eval.top1", tolerance=0.01)
    assert stopped.outcome.interrupted and len(stopped.outcome.attempts) == 1
    journal = workspace / "build" / "fix" / "convert__fp16" / "attempts"
    assert [p.name for p in sorted(journal.glob("attempt-*.json"))] == ["attempt-0001.json"]
    assert stopped.restore_run is not None  # the workspace is as the pipeline file says
    calls["n"] = 100  # no more interruptions; count the evaluations
    done = fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="eval.top1", tolerance=0.01)
    assert done.outcome.passed and calls["n"] - 100 == len(done.outcome.attempts) == done.outcome.evaluated
    # the stage keys changed (another input): the journal is not this pipeline's any more, it is cleared
    import numpy as np

    x = np.load(workspace / "data" / "in" / "x.npy")
    np.save(workspace / "data" / "in" / "x.npy", x[::-1].copy())
    calls["n"] = 100
    other = fix_pipeline(workspace / "pipeline.yaml", stage="convert@fp16", metric="eval.top1", tolerance=0.01)
    assert other.outcome.evaluated == len(other.outcome.attempts) == calls["n"] - 100
