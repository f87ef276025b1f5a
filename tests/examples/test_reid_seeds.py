"""The ReID story holds on any weights: five training seeds, each its own workspace.

Different seeds (like different CPUs) give different weights, so different numbers; what must hold
each time is the story: fp16 collapses the features, ``compare@fp16`` names an op of the L2 norm's
overflow chain first, pasting every ``set`` line of its advice into the fp16 variant restores mAP to
within 1 point of golden, and the controls (``compare@fp32``, ``compare@fp16_keep``) report no failure.

The overflow chain is read from the graph and the golden values, not from names: the ops whose golden
output exceeds fp16's 65504, and the ops that read one of them. Training runs 4 epochs (``--set
params.epochs=4``): enough for the sum of squares to pass 65504 on every seed tried (1-20).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

# the story trains a torch model on scikit-learn's digits: the examples extra
pytest.importorskip("torch", reason="the ReID example trains a torch model: pip install -e '.[examples]'")
pytest.importorskip("sklearn", reason="the ReID example reads scikit-learn's digits: pip install -e '.[examples]'")

from tests.examples.reid_story import overflow_chain  # noqa: E402
from tests.train_threads import train_threads  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SEEDS = (1, 2, 3, 4, 5)  # seed 2 failed the fp32 control under msit's rule (KL 0.81 on the square)
VARIANTS = ("fp32", "fp16", "fp16_keep")
# what the assertions read (the mixed variant is left out: it is not part of the story checked here)
TARGETS = ["eval_golden"] + [f"{kind}@{v}" for v in VARIANTS for kind in ("eval", "compare")]


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _advice_sets(first_failure: dict) -> list[str]:
    """The ``--set`` values of every advice item (``--set 'K=V'`` lines, ready to paste)."""
    values = []
    for item in first_failure["advice"]:
        if item.get("set"):
            words = shlex.split(item["set"])
            values += [w for flag, w in zip(words, words[1:]) if flag == "--set"]
    return values


@pytest.fixture(scope="module", params=SEEDS, ids=[f"seed{s}" for s in SEEDS])
def story(request, tmp_path_factory):
    """One seed: the whole pipeline, then the fp16 variant again with compare@fp16's advice pasted in."""
    import ascendpipe

    seed = request.param
    ws = tmp_path_factory.mktemp(f"reid_seed{seed}")
    shutil.copytree(REPO / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    pipeline = str(ws / "pipelines/reid.yaml")
    base = ["params.epochs=4", f"params.seed={seed}", *train_threads()]
    seen: dict = {"seed": seed, "ws": ws}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        ascendpipe.build(pipeline, TARGETS, jobs=2, set=base, quiet=True)
        seen["golden"] = _json(ws / "build/eval_golden/metrics.json")["mAP"]
        seen["mAP"] = {v: _json(ws / f"build/eval__{v}/metrics.json")["mAP"] for v in VARIANTS}
        seen["compare"] = {v: _json(ws / f"build/compare__{v}/result.json") for v in VARIANTS}
        first = seen["compare"]["fp16"]["first_failure"]
        seen["advice_sets"] = _advice_sets(first) if first else []
        if seen["advice_sets"]:
            ascendpipe.build(pipeline, ["eval@fp16"], jobs=2, set=base + seen["advice_sets"], quiet=True)
            seen["advised_mAP"] = _json(ws / "build/eval__fp16/metrics.json")["mAP"]
    print(f"seed {seed}: golden mAP {seen['golden']:.4f}, fp16 {seen['mAP']['fp16']:.4f}, first failure "
          f"{first and first['op_name']}, after the advice {seen.get('advised_mAP')}")
    return seen


def test_fp16_collapses_the_features(story):
    assert story["golden"] > 0.3  # 4 epochs learn something: the story is not about a random network
    assert story["mAP"]["fp16"] <= story["golden"] / 3


def test_compare_fp16_names_an_op_of_the_overflow_chain_first(story):
    result = story["compare"]["fp16"]
    first = result["first_failure"]
    assert first is not None and first["kind"] == "overflow"
    chain = overflow_chain(story["ws"] / "build/export/model.onnx", result["rows"])
    assert chain, "the golden sum of squares no longer exceeds fp16's range: train longer"
    row = result["rows"][first["index"]]
    assert set(row["golden_ops"] or [row["op_name"]]) & chain, (first["op_name"], sorted(chain))


def test_pasting_the_advice_restores_the_accuracy(story):
    assert story["advice_sets"], "compare@fp16 gave no advice with a set line"
    assert all(value.startswith("stages.convert.matrix.fp16.") for value in story["advice_sets"])
    assert abs(story["advised_mAP"] - story["golden"]) <= 0.01


@pytest.mark.parametrize("variant", ["fp32", "fp16_keep"])
def test_the_controls_report_no_failure(story, variant):
    result = story["compare"][variant]
    assert result["first_failure"] is None and result["summary"]["failed_ops"] == 0
    assert abs(story["mAP"][variant] - story["golden"]) <= 0.01
