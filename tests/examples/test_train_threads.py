"""The example trainings take their thread count from params.threads (default 1), not a hard-coded 2
that oversubscribes a loaded machine (issue 23 item 17)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import ascendpipe

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("example", ["reid", "classify"])
def test_the_pipeline_passes_one_thread_by_default_and_a_param_changes_it(example):
    pipeline = ascendpipe.load(str(REPO / "pipelines" / f"{example}.yaml"))
    assert pipeline.stages["train"].cmd.endswith("--threads 1") or " --threads 1 " in pipeline.stages["train"].cmd
    two = ascendpipe.load(str(REPO / "pipelines" / f"{example}.yaml"), set=["params.threads=2"])
    assert "--threads 2" in two.stages["train"].cmd


@pytest.mark.parametrize("example", ["reid", "classify"])
def test_by_hand_it_honours_omp_num_threads(example, monkeypatch):
    pytest.importorskip("torch", reason="the trainings need torch: pip install -e '.[examples]'")
    path = REPO / "pipelines" / example / "train.py"
    spec = importlib.util.spec_from_file_location(f"train_{example}", path)
    module = importlib.util.module_from_spec(spec)
    # train.py puts its folder on sys.path and imports its network module by a bare name ("net"):
    # undo both, or a later test's own net.py would be shadowed
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    try:
        spec.loader.exec_module(module)
    finally:
        for name in ("net", "reid_net"):
            if name not in before:
                sys.modules.pop(name, None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert module.threads(None) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert module.threads(None) == 3
    assert module.threads(2) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert module.threads(None) == 1
