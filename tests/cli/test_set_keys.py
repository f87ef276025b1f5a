"""`--set` of a key the pipeline does not have (issue 28 item 9): refused with the close one
suggested, `+` adds one on purpose, and what is legitimately new (a param a template reads, one a
stage's kind takes, checkout's lines for a param the pipeline dropped) still applies."""

from __future__ import annotations

import io

import pytest

import ascendpipe
from ascendpipe.config.overrides import apply_overrides
from ascendpipe.errors import UserError

PIPELINE = {
    "params": {"epochs": 20, "seed": 0},
    "stages": {
        "train": {"kind": "run", "cmd": "python train.py --epochs {{ params.epochs }} --lr {{ params.lr }}",
                  "params": {"batch": 8}, "matrix": {"small": {"width": 4}}, "outs": ["m"]},
        "convert": {"kind": "convert", "model": "m/model.onnx"},
    },
}


def refusal(*overrides) -> str:
    with pytest.raises(UserError) as exc:
        apply_overrides(PIPELINE, list(overrides))
    return str(exc.value)


def test_a_typo_of_a_top_level_param_is_refused_with_the_close_one():
    assert refusal("params.epoch=2") == (
        "--set params.epoch=2: the pipeline has no param 'epoch' (did you mean 'epochs'?); it has: epochs, seed. "
        "To add one on purpose: --set +params.epoch=2")


def test_a_typo_of_a_run_stage_param_is_refused_with_the_close_one():
    assert refusal("stages.train.params.bach=16") == (
        "--set stages.train.params.bach=16: stage 'train' has no param 'bach' (did you mean 'batch'?); it has: "
        "batch, epochs, seed, width. To add one on purpose: --set +stages.train.params.bach=16")


def test_known_keys_apply():
    data = apply_overrides(PIPELINE, ["params.epochs=2", "params.lr=0.1",  # lr: a template reads it
                                      "params.precision_mode=force_fp32",  # the convert kind takes it
                                      "stages.train.params.batch=4", "stages.train.params.width=2",
                                      "stages.train.params.seed=3", "+params.extra=1", "+stages.train.params.new=1"])
    assert data["params"] == {"epochs": 2, "seed": 0, "lr": 0.1, "precision_mode": "force_fp32", "extra": 1}
    assert data["stages"]["train"]["params"] == {"batch": 4, "width": 2, "seed": 3, "new": 1}
    assert PIPELINE["params"] == {"epochs": 20, "seed": 0}  # the document given is not changed


def test_checkout_sets_back_a_param_the_pipeline_dropped(tmp_path, monkeypatch):
    """A run stage's param removed from the pipeline after a run: checkout's line for it adds it back
    (`+stages...`), so every command still reads the overrides file."""
    from ascendpipe.cli.main import main

    (tmp_path / ".ascendpipe").mkdir()
    pipeline = tmp_path / "p.yaml"
    stage = "stages:\n  a:\n    kind: run\n    cmd: echo {{{{ params.n }}}} > o\n    outs: [o]\n    params: {{{}}}\n"
    pipeline.write_text(stage.format("n: 1, old: 2"))
    monkeypatch.chdir(tmp_path)
    run = ascendpipe.build(str(pipeline), quiet=True, stream=io.StringIO())
    assert run["stages"]["a"]["state"] == "ran"
    pipeline.write_text(stage.format("n: 1"))
    assert main(["checkout", "latest"]) == 0
    overrides = (tmp_path / "p.overrides").read_text()
    assert "+stages.a.params.old=2" in overrides.splitlines()
    assert main(["status", "p.yaml"]) == 0
    assert (tmp_path / "o").read_text() == "1\n"


def test_a_typo_of_a_run_stage_variant_param_is_refused():
    assert refusal("stages.train.matrix.small.widht=2") == (
        "--set stages.train.matrix.small.widht=2: stage 'train' has no param 'widht' (did you mean 'width'?); it has: "
        "batch, epochs, seed, width. To add one on purpose: --set +stages.train.matrix.small.widht=2")
    data = apply_overrides(PIPELINE, ["stages.train.matrix.small.width=2", "stages.train.matrix.small.batch=2"])
    assert data["stages"]["train"]["matrix"]["small"] == {"width": 2, "batch": 2}
