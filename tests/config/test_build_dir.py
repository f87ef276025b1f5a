"""`build_dir`: where a pipeline's stage folders and logs go; the shipped examples write apart."""

from __future__ import annotations

from pathlib import Path

import ascendpipe
from ascendpipe.config.paths import overlap
from ascendpipe.engine.owners import claims_of

REPO = Path(__file__).resolve().parents[2]


def test_classify_writes_under_its_own_build_dir_and_reads_its_quantize_output_there():
    pipeline = ascendpipe.load(str(REPO / "pipelines/classify.yaml"))
    assert pipeline.build_dir == "build/classify"
    assert pipeline.stages["export"].outs == ["build/classify/export"]
    assert pipeline.stages["compare@aipp"].inputs == {"golden": "build/classify/export",
                                                      "target": "build/classify/convert__aipp",
                                                      "inputs": "data/classify/probe_u8/images.npy",
                                                      "golden_inputs": "data/classify/probe/images.npy"}
    assert pipeline.stages["convert_int8"].inputs == {"model": "build/classify/quantize/deploy/model.onnx"}


def test_the_shipped_examples_claim_no_common_path():
    claims = {name: claims_of(ascendpipe.load(str(REPO / f"pipelines/{name}.yaml"))) for name in ("reid", "classify")}
    assert "build/export" in claims["reid"] and "build/classify/export.log" in claims["classify"]
    shared = [(a, b) for a in claims["reid"] for b in claims["classify"] if overlap(a, b)]
    assert shared == []


def test_build_dir_from_set_moves_every_stage_folder_and_log(tmp_path):
    (tmp_path / ".ascendpipe").mkdir()
    (tmp_path / "p.yaml").write_text("stages:\n  s:\n    kind: source\n    model: m.onnx\n")
    (tmp_path / "m.onnx").write_bytes(b"")
    pipeline = ascendpipe.load(str(tmp_path / "p.yaml"), set=["build_dir=./out/p/"])
    assert pipeline.build_dir == "out/p" and pipeline.stages["s"].outs == ["out/p/s"]
    assert claims_of(pipeline) == {"out/p/s": ("s", "folder"), "out/p/s.log": ("s", "log")}
