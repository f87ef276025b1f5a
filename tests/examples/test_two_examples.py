"""The two shipped examples in one clone: pipelines/reid.yaml writes build/, pipelines/classify.yaml
build/classify/ (its build_dir), so building one after the other leaves both fresh and each
build/.../export holding its own model. One build of each (one training epoch: an overrides file, as
`checkout` writes one, so `status` sees the same settings)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import ascendpipe
from tests.train_threads import train_threads

pytest.importorskip("torch", reason="the examples train with torch: pip install -e '.[examples]'")
pytest.importorskip("sklearn", reason="the ReID example's data is scikit-learn's digits: pip install -e '.[examples]'")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    ws = tmp_path_factory.mktemp("examples")
    shutil.copytree(REPO / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    for name in ("reid", "classify"):
        (ws / "pipelines" / f"{name}.overrides").write_text("".join(f"{line}\n" for line in ["params.epochs=1", *train_threads()]))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        runs = {name: ascendpipe.build(f"pipelines/{name}.yaml", jobs=2, quiet=True) for name in ("reid", "classify")}
        status = {name: ascendpipe.status(f"pipelines/{name}.yaml")["stages"] for name in ("reid", "classify")}
        again = ascendpipe.build("pipelines/reid.yaml", quiet=True)
    return ws, runs, status, again


def test_both_examples_build_in_one_clone_and_both_stay_fresh(clone):
    ws, runs, status, again = clone
    for name in ("reid", "classify"):
        assert runs[name]["state"] == "done"
        stale = {stage: s["reasons"] for stage, s in status[name].items() if s["state"] != "fresh"}
        assert stale == {}, f"{name}: {stale}"
    assert len(status["reid"]) == 30 and len(status["classify"]) == 22  # classify ends with tune and profile
    assert {s["state"] for s in again["stages"].values()} == {"fresh"}


def test_each_example_keeps_its_own_folders(clone):
    import onnx

    ws, runs, _, _ = clone
    outputs = {folder: [o.name for o in onnx.load(str(ws / folder / "export/model.onnx")).graph.output]
               for folder in ("build", "build/classify")}
    assert outputs == {"build": ["embedding"], "build/classify": ["logits"]}
    assert set(runs["classify"]["stages"]["eval@aipp"]["outputs"]) == {"build/classify/eval__aipp"}
    assert (ws / "build/classify/compare__wrong_mean/result.json").is_file()
    assert not (ws / "build/eval__aipp").exists()
