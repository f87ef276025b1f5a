"""Advice and fix for every matrix form (a list-form matrix's variant is named as a named one's), and
fix knows what the evaluation set can resolve (issue 33 items 6 and 7)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ascendpipe
from ascendpipe.fix.resolution import bootstrap_resolution, judge, paired_interval
from tests.fix.workspaces import classification_pipeline, l2norm_workspace

PIPELINE = classification_pipeline("convert", {"matrix": {"precision_mode": ["force_fp32", "force_fp16"]}})


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    return l2norm_workspace(tmp_path, monkeypatch, PIPELINE)


def test_list_form_advice_pastes_into_build_and_fix_takes_the_variant(workspace):
    from ascendpipe.fix.run import fix_pipeline

    pipeline = str(workspace / "pipeline.yaml")
    run = ascendpipe.build(pipeline, ["compare@force_fp16", "eval@force_fp16", "eval@force_fp32"], quiet=True)
    assert run["stages"]["eval@force_fp16"]["metrics"]["top1"] < 0.5
    first = json.loads((workspace / "build" / "compare__force_fp16" / "result.json").read_text())["first_failure"]
    lines = [item["set"].split(" ", 1)[1].strip("'") for item in first["advice"] if item.get("set")]
    assert lines[0].startswith("stages.convert.matrix.force_fp16.keep_dtype=")
    fixed = ascendpipe.build(pipeline, ["compare@force_fp16", "eval@force_fp32"], set=lines, quiet=True)
    applied = json.loads((workspace / "build" / "convert__force_fp16" / "convert.json").read_text())
    assert applied["keep_dtype"] == ["square", "sum", "sqrt"] and applied["precision_mode"] == "force_fp16"
    assert applied["fusion_switch"] == {}  # the UB fusion changes no value: keep_dtype alone is the advice
    after = json.loads((workspace / "build" / "compare__force_fp16" / "result.json").read_text())
    assert after["first_failure"] is None or after["first_failure"]["op_name"] != "sum"  # that overflow is gone
    # the other variant keeps its params, so its cache: nothing of it ran again
    assert fixed["stages"]["eval@force_fp32"]["state"] in ("fresh", "restored")
    report = fix_pipeline(pipeline, stage="convert@force_fp16", metric="eval.top1", tolerance=0.05)
    assert report.outcome.passed and report.keep_dtype[:3] == ["square", "sum", "sqrt"]
    assert report.stage_prefix == "stages.convert.matrix.force_fp16"
    noise = report.summary["resolution"]
    assert noise["samples"] == 32 and noise["resolution"] >= 1 / 32
    assert noise["inside_noise"] is False and report.summary["restored"] is True  # 0.0 -> 1.0 over 32 samples


def test_a_tolerance_below_the_sets_resolution_is_said(workspace):
    from ascendpipe.fix.run import fix_pipeline

    report = fix_pipeline(str(workspace / "pipeline.yaml"), stage="convert@force_fp16", metric="eval.top1",
                          tolerance=0.001)
    noise = report.summary["resolution"]
    assert noise["tolerance_below_resolution"] is True
    assert "below what the evaluation set can show" in report.outcome.message
    assert "bootstrap over 32 samples" in noise["method"]


def test_a_change_inside_the_noise_is_not_restored():
    baseline = np.ones(200)
    baseline[:2] = 0  # two samples of 200 missed
    final = np.ones(200)
    low, high = paired_interval(final, baseline)
    assert low <= 0 <= high  # two flips among 200 samples: the interval holds 0
    verdict = judge(200, 0.0, baseline.mean(), final.mean(), hits_baseline=baseline, hits_final=final,
                    hits_golden=np.ones(200))
    assert verdict["inside_noise"] is True and "not shown to restore" in verdict["note"]
    many = np.ones(200)
    many[:40] = 0
    verdict = judge(200, 0.0, many.mean(), final.mean(), hits_baseline=many, hits_final=final, hits_golden=final)
    assert verdict["inside_noise"] is False
    # without per-sample scores (mAP over images): one of N samples is the floor, said as such
    verdict = judge(50, 5e-5, 0.758426, 0.758697)
    assert verdict["resolution"] == pytest.approx(0.02) and verdict["tolerance_below_resolution"] is True
    assert verdict["inside_noise"] is True and verdict["method"] == "one of 50 samples (1/N)"


def test_bootstrap_resolution_shrinks_with_the_set():
    rng = np.random.default_rng(0)
    small = bootstrap_resolution((rng.random(50) < 0.8).astype(float))
    large = bootstrap_resolution((rng.random(5000) < 0.8).astype(float))
    assert small > 4 * large and large >= 1 / 5000
    assert 0.05 < small < 0.2  # ~1.96 * sqrt(0.16 / 50) = 0.11
