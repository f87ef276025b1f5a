"""Incremental builds: what reruns, what comes back from the cache, what is left alone."""

from __future__ import annotations

import os
import time

from tests.engine.conftest import CHAIN


def test_first_build_runs_all_then_second_runs_nothing(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    run = ws.build()
    assert ws.states(run) == {"prepare": "ran", "train": "ran", "report": "ran"}
    assert ws.ran() == ["prepare", "train", "report"]
    run = ws.build()
    assert ws.states(run) == {"prepare": "fresh", "train": "fresh", "report": "fresh"}
    assert ws.ran() == []


def test_param_change_reruns_stage_and_dependents_and_revert_restores(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.ran()
    run = ws.build(set=["stages.train.params.lr=0.5"])
    assert ws.states(run) == {"prepare": "fresh", "train": "ran", "report": "ran"}
    assert ws.ran() == ["train", "report"]
    assert "lr" in (ws.root / "data/model.txt").read_text() and "0.5" in (ws.root / "data/model.txt").read_text()
    run = ws.build()  # back to lr 0.1: both come from the run-cache, nothing runs
    assert ws.states(run) == {"prepare": "fresh", "train": "restored", "report": "restored"}
    assert ws.ran() == []
    assert '"lr": 0.1' in (ws.root / "data/model.txt").read_text()


def test_touch_without_change_rebuilds_nothing(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.ran()
    later = time.time() + 5
    os.utime(ws.root / "input.txt", (later, later))
    os.utime(ws.root / "data/raw.txt", (later, later))
    run = ws.build()
    assert set(ws.states(run).values()) == {"fresh"}
    assert ws.ran() == []


def test_dep_content_change_reruns_and_early_cutoff_stops_identical_outputs(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.ran()
    ws.write("input.txt", "changed")
    run = ws.build()
    assert ws.states(run) == {"prepare": "ran", "train": "ran", "report": "ran"}
    ws.ran()
    # a change to the first stage's params that leaves its output byte-identical stops there
    ws.write("step.py", (ws.root / "step.py").read_text() + "\n# comment only\n")
    run = ws.build()
    assert ws.ran() == ["prepare"]
    assert ws.states(run) == {"prepare": "ran", "train": "fresh", "report": "fresh"}


def test_hand_edited_output_is_reported_stale_and_restored(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.ran()
    original = (ws.root / "data/model.txt").read_text()
    (ws.root / "data/model.txt").write_text("tampered")
    status = __import__("ascendpipe").status(str(ws.root / "pipeline.yaml"))
    assert status["stages"]["train"] == {"state": "stale", "reasons": ["out data/model.txt modified"], "restorable": True}
    assert status["stages"]["prepare"]["state"] == "fresh"
    run = ws.build()
    assert ws.states(run)["train"] == "restored"
    assert ws.ran() == []
    assert (ws.root / "data/model.txt").read_text() == original


def test_missing_output_is_restored(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.ran()
    (ws.root / "data/report.txt").unlink()
    status = __import__("ascendpipe").status(str(ws.root / "pipeline.yaml"))
    assert status["stages"]["report"]["reasons"] == ["out data/report.txt missing"]
    run = ws.build()
    assert ws.states(run)["report"] == "restored"
    assert (ws.root / "data/report.txt").exists()


def test_status_reasons_name_what_changed(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.write("input.txt", "new")
    status = __import__("ascendpipe").status(str(ws.root / "pipeline.yaml"), set=["stages.train.params.lr=0.2"])
    assert status["stages"]["prepare"] == {"state": "stale", "reasons": ["dep input.txt modified"]}
    assert status["stages"]["train"]["reasons"] == ["param lr: 0.1 -> 0.2", "upstream 'prepare' is stale"]


def test_force_reruns_selected_stage_and_its_upstream_only(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.ran()
    run = ws.build(["train"], force=True)
    assert set(run["stages"]) == {"prepare", "train"}
    assert ws.ran() == ["prepare", "train"]


def test_matrix_variants_and_fanout(ws):
    ws.write("input.txt", "x")
    ws.pipeline(
        """
        stages:
          convert:
            kind: run
            cmd: python3 step.py convert@{{ stage.variant }} data/{{ stage.variant }}.txt input.txt
            deps: [input.txt]
            outs: ["data/{{ stage.variant }}.txt"]
            matrix:
              mode: [force_fp16, allow_fp32_to_fp16]
        """
    )
    run = ws.build()
    assert ws.states(run) == {"convert@force_fp16": "ran", "convert@allow_fp32_to_fp16": "ran"}
    assert '"mode": "force_fp16"' in (ws.root / "data/force_fp16.txt").read_text()
    ws.ran()
    run = ws.build(set=["stages.convert.matrix.mode=[force_fp16, must_keep_origin_dtype]"])
    assert ws.states(run) == {"convert@force_fp16": "fresh", "convert@must_keep_origin_dtype": "ran"}


def test_fanout_pairs_variants_of_the_same_matrix(ws):
    import ascendpipe

    ws.write("m.onnx", "placeholder")
    ws.write("q.npy", "x")
    ws.write("labels/ids.npy", "x")
    ws.pipeline(
        """
        stages:
          convert:
            kind: convert
            model: m.onnx
            matrix:
              fp16: {precision_mode: force_fp16}
              mixed: {precision_mode: allow_fp32_to_fp16}
          infer_q: {kind: infer, model: convert, inputs: q.npy}
          infer_g: {kind: infer, model: convert, inputs: q.npy}
          eval: {kind: eval, query: infer_q, gallery: infer_g, labels: labels, params: {task: reid}}
          pinned: {kind: infer, model: convert@mixed, inputs: q.npy}
        """
    )
    pipeline = ascendpipe.load(str(ws.root / "pipeline.yaml"))
    assert sorted(n for n in pipeline.stages if n.startswith("eval")) == ["eval@fp16", "eval@mixed"]
    ev = pipeline.stages["eval@fp16"]
    assert ev.upstream == {"query": "infer_q@fp16", "gallery": "infer_g@fp16"}
    assert pipeline.stages["infer_q@mixed"].upstream == {"model": "convert@mixed"}
    assert pipeline.stages["pinned"].upstream == {"model": "convert@mixed"}
    assert pipeline.stages["convert@fp16"].params["precision_mode"] == "force_fp16"
