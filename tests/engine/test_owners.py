"""Two pipelines in one workspace never write one path: the record says which pipeline file writes each
generated folder and out, a second one is refused with one located line, and a claim its pipeline
no longer makes (renamed stage, deleted file) is released."""

from __future__ import annotations

import hashlib
import io
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

import ascendpipe
from ascendpipe.cli.main import main as cli
from ascendpipe.errors import UserError

SCORE = """\
{top}stages:
  {name}:
    kind: eval
    outputs: logits.npy
    labels: labels.npy
    params: {{task: classification, topk: [1]}}
"""


@pytest.fixture
def scored(ws):
    # 4 samples, 3 right: top1 0.75
    np.save(ws.root / "logits.npy", np.array([[2, 1], [0, 3], [5, 1], [1, 4]], np.float32))
    np.save(ws.root / "labels.npy", np.array([0, 1, 0, 0]))
    return ws


def _build(ws, name: str, **kw):
    return ascendpipe.build(str(ws.root / name), quiet=True, stream=io.StringIO(), **kw)


def _tree(folder) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_a_second_pipeline_writing_the_same_stage_folder_is_refused_at_its_line(scored):
    ws = scored
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    ws.write("b.yaml", SCORE.format(top="# the same stage name, the same default build_dir\n", name="score"))
    assert _build(ws, "a.yaml")["stages"]["score"]["metrics"]["top1"] == 0.75
    before, runs = _tree(ws.root / "build"), len(ascendpipe.runs())
    expected = (f"{ws.root / 'b.yaml'}:3:3: stage 'score': folder 'build/score' is written by another pipeline in "
                "this workspace, a.yaml (stage 'score'); two pipelines cannot share a path: set `build_dir: build/b` "
                f"in {ws.root / 'b.yaml'} (or --set build_dir=build/b), or rename the stage")
    for attempt in (lambda: ascendpipe.validate(str(ws.root / "b.yaml")), lambda: _build(ws, "b.yaml"),
                    lambda: _build(ws, "b.yaml", dry_run=True)):
        with pytest.raises(UserError) as err:
            attempt()
        assert str(err.value) == expected
    out, errs = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(errs):
        code = cli(["validate", "b.yaml"])
    assert code == 2 and out.getvalue() == ""
    assert errs.getvalue().splitlines() == [f"ascendpipe: error: {expected.replace(str(ws.root / 'b.yaml'), 'b.yaml')}"]
    # nothing written, no run recorded for the refused builds, and a.yaml is still fresh
    assert _tree(ws.root / "build") == before and len(ascendpipe.runs()) == runs
    assert ascendpipe.status(str(ws.root / "a.yaml"))["stages"]["score"]["state"] == "fresh"


def test_a_build_dir_of_its_own_builds_and_both_stay_fresh(scored):
    ws = scored
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    ws.write("b.yaml", SCORE.format(top="build_dir: build/b\n", name="score"))
    _build(ws, "a.yaml")
    run = _build(ws, "b.yaml")
    assert run["stages"]["score"]["state"] == "ran" and (ws.root / "build/b/score/metrics.json").is_file()
    for name in ("a.yaml", "b.yaml"):
        assert ascendpipe.status(str(ws.root / name))["stages"]["score"] == {"state": "fresh", "reasons": []}
    assert ascendpipe.validate(str(ws.root / "a.yaml"))["stages"] == ["score"]


RUN = """\
stages:
  {name}:
    kind: run
    cmd: python3 step.py {name} {out}
    outs: [{out}]
"""


def test_an_explicit_out_another_pipeline_writes_is_a_located_error_at_validate(ws):
    ws.write("a.yaml", RUN.format(name="make", out="data/shared.txt"))
    ws.write("b.yaml", RUN.format(name="other", out="data"))  # holds a.yaml's out
    _build(ws, "a.yaml")
    with pytest.raises(UserError) as err:
        ascendpipe.validate(str(ws.root / "b.yaml"))
    assert str(err.value) == (f"{ws.root / 'b.yaml'}:5:12: stage 'other': out 'data' is written by another pipeline "
                              "in this workspace, a.yaml (stage 'make' (data/shared.txt)); two pipelines cannot share a "
                              "path: write another path here, or rename it in the other file")


def test_a_renamed_stage_or_a_deleted_pipeline_file_releases_its_claim(scored, capsys):
    ws = scored
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    ws.write("b.yaml", SCORE.format(top="", name="score"))
    _build(ws, "a.yaml")
    ws.write("a.yaml", SCORE.format(top="", name="score_a"))  # a.yaml no longer writes build/score
    assert ascendpipe.validate(str(ws.root / "b.yaml"))["stages"] == ["score"]
    capsys.readouterr()
    ascendpipe.build(str(ws.root / "b.yaml"), stream=io.StringIO())
    assert capsys.readouterr().err.splitlines()[0] == (
        "note: build/score, build/score.log belonged to a.yaml, which no longer writes them (stage 'score' renamed, "
        "removed or moved); now b.yaml's")
    # now b.yaml's: a.yaml renamed back is the one refused
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    with pytest.raises(UserError, match=r"a.yaml:2:3: stage 'score': folder 'build/score' is written by another "
                                        r"pipeline in this workspace, b.yaml \(stage 'score'\)"):
        _build(ws, "a.yaml")
    (ws.root / "b.yaml").unlink()
    capsys.readouterr()
    ascendpipe.build(str(ws.root / "a.yaml"), stream=io.StringIO())
    assert "build/score, build/score.log belonged to b.yaml, which no longer exists; now a.yaml's" in capsys.readouterr().err
    assert ascendpipe.status(str(ws.root / "a.yaml"))["stages"]["score"]["state"] == "fresh"


def test_a_pipeline_file_that_no_longer_resolves_keeps_its_claim_and_the_refusal_says_so(scored):
    ws = scored
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    ws.write("b.yaml", SCORE.format(top="", name="score"))
    _build(ws, "a.yaml")
    ws.write("a.yaml", SCORE.format(top="", name="score").replace("kind: eval", "kind: evaluate"))  # half-edited
    with pytest.raises(UserError) as err:
        _build(ws, "b.yaml")
    message = str(err.value)
    assert message.startswith(f"{ws.root / 'b.yaml'}:2:3: stage 'score': folder 'build/score' is written by another "
                              "pipeline in this workspace, a.yaml (stage 'score'); a.yaml does not resolve now (")
    assert "(a.yaml:3:11: stage 'score': kind 'evaluate' is not one of compare," in message and "so its claim stands until it is fixed or deleted" in message


def test_the_same_pipeline_built_with_another_build_dir_moves_its_claim(scored):
    ws = scored
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    ws.write("b.yaml", SCORE.format(top="", name="score"))
    _build(ws, "a.yaml", set=["build_dir=build/a"])
    # a.yaml's claim follows its latest build (build/a): build/score is free for b.yaml
    assert _build(ws, "b.yaml")["stages"]["score"]["state"] == "ran"
    with pytest.raises(UserError, match="folder 'build/score' is written by another pipeline in this workspace, b.yaml"):
        ascendpipe.validate(str(ws.root / "a.yaml"))


def test_checkout_does_not_restore_into_a_folder_another_pipeline_claimed_since(scored, capsys):
    """Run 1 of a.yaml built build/score; a.yaml renamed its stage, b.yaml took the folder over; a.yaml
    renamed back: checking out run 1 would overwrite b.yaml's outputs, so it is refused as build is."""
    from ascendpipe.api import checkout

    ws = scored
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    first = _build(ws, "a.yaml")
    ws.write("a.yaml", SCORE.format(top="", name="score_a"))
    np.save(ws.root / "logits_b.npy", np.array([[2, 1], [0, 3], [5, 1], [4, 1]], np.float32))  # 4 right
    ws.write("b.yaml", SCORE.format(top="", name="score").replace("logits.npy", "logits_b.npy"))
    assert _build(ws, "b.yaml")["stages"]["score"]["metrics"]["top1"] == 1.0
    ws.write("a.yaml", SCORE.format(top="", name="score"))
    before = _tree(ws.root / "build")
    with pytest.raises(UserError) as err:
        checkout(first["id"], workspace=str(ws.root))
    assert str(err.value) == (
        f"{ws.root / 'a.yaml'}:2:3: stage 'score': folder 'build/score' is written by another pipeline in this "
        "workspace, b.yaml (stage 'score'); two pipelines cannot share a path: set `build_dir: build/a` in "
        f"{ws.root / 'a.yaml'} (or --set build_dir=build/a), or rename the stage")
    # nothing written: b.yaml's outputs, and no overrides file for a.yaml
    assert _tree(ws.root / "build") == before and not (ws.root / "a.overrides").exists()
    assert ascendpipe.status(str(ws.root / "b.yaml"))["stages"]["score"]["state"] == "fresh"
    # once b.yaml is gone the claim is stale: checkout takes it over and says so, as build does
    (ws.root / "b.yaml").unlink()
    capsys.readouterr()
    assert cli(["checkout", str(first["id"])]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "note: build/score, build/score.log belonged to b.yaml, which no longer exists; now a.yaml's"]
    assert ascendpipe.status(str(ws.root / "a.yaml"))["stages"]["score"]["state"] == "fresh"
    assert _build(ws, "a.yaml")["stages"]["score"]["metrics"]["top1"] == 0.75
