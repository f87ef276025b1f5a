"""pipelines/reid_a2.yaml: the reid story on Atlas A2 (Ascend910B1), asserted as a story, not one
machine's numbers: fp16 overflows in the L2 norm and collapses mAP; mixed_bfloat16 does not overflow
(what it loses is bf16 rounding, named so); origin, whose Conv ops read HF32, is close to golden and
not bit-equal to origin in true fp32; then the same pipeline on --backend ascend passes
--precision_mode_v2 and --allow_hf32 to atc (the doubles check the argv)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from tests.train_threads import train_threads

pytest.importorskip("torch", reason="the ReID example trains a torch model: pip install -e '.[examples]'")
pytest.importorskip("sklearn", reason="the ReID example reads scikit-learn's digits: pip install -e '.[examples]'")

REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("fp16", "bf16", "origin", "origin_fp32")


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    import ascendpipe
    from tests.backends.ascend.conftest import _point_at_doubles

    ws = tmp_path_factory.mktemp("reid_a2")
    shutil.copytree(REPO / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    pipeline = str(ws / "pipelines/reid_a2.yaml")
    build = ws / "build/reid_a2"
    seen: dict = {"ws": ws, "build": build}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        seen["ort"] = ascendpipe.build(pipeline, jobs=2, set=["params.epochs=4", *train_threads()], quiet=True)
        seen["eval"] = {v: _json(build / f"eval__{v}/metrics.json") for v in VARIANTS}
        seen["golden"] = _json(build / "eval_golden/metrics.json")
        seen["compare"] = {v: _json(build / f"compare__{v}/result.json") for v in VARIANTS}
        seen["plan"] = {v: _json(build / f"convert__{v}/precision_plan.json") for v in VARIANTS}
        seen["outputs"] = {v: build / f"infer__{v}" for v in VARIANTS}
        _point_at_doubles(mp)
        seen["ascend"] = ascendpipe.build(pipeline, [f"convert@{v}" for v in VARIANTS], jobs=2,
                                          set=["params.epochs=4", *train_threads()], backend="ascend", quiet=True)
    yield seen


def test_fp16_overflows_bf16_does_not_and_origin_with_hf32_is_close(story):
    golden, got = story["golden"]["mAP"], {v: m["mAP"] for v, m in story["eval"].items()}
    assert golden > 0.3
    assert got["fp16"] <= golden / 5
    fp16 = story["compare"]["fp16"]
    assert fp16["first_failure"]["kind"] == "overflow" and fp16["summary"]["outputs_pass"] is False
    bf16 = story["compare"]["bf16"]
    assert not any(r.get("overflow") == "target" for r in bf16["rows"])  # bf16 keeps fp32's range
    assert abs(got["bf16"] - golden) <= 0.02
    assert {r["mechanism"] for r in bf16["rows"] if r.get("failed") or r.get("contained")} <= {"bf16_rounding"}
    assert abs(got["origin"] - golden) <= 0.01 and abs(got["origin_fp32"] - golden) <= 0.01
    assert story["compare"]["origin"]["summary"]["outputs_pass"]


def test_the_plans_say_where_hf32_and_bf16_are(story):
    origin = story["plan"]["origin"]["nodes"]
    convs = {n: e for n, e in origin.items() if e["op_type"] == "Conv"}
    assert convs and all(e.get("reads") == "hf32" and e["dtype"] == "float32" for e in convs.values())
    assert all("reads" not in e for e in story["plan"]["origin_fp32"]["nodes"].values())
    gemm = next(e for e in origin.values() if e["op_type"] == "Gemm")
    assert "reads" not in gemm  # allow_hf32's default: matmul off
    assert story["plan"]["bf16"]["counts"].get("bfloat16", 0) > 0
    assert story["plan"]["origin"]["precision_mode_v2"] == "origin"


def test_hf32_changes_bits_but_not_the_story(story):
    import numpy as np

    def first_output(folder: Path):
        summary = _json(folder / "summary.json")
        entry = next(iter(summary["outputs"].values()))
        return np.load(folder / entry["file"])

    hf32, fp32 = first_output(story["outputs"]["origin"]), first_output(story["outputs"]["origin_fp32"])
    assert not np.array_equal(hf32, fp32) and np.allclose(hf32, fp32, atol=1e-2)


def test_ascend_backend_passes_the_a2_options_to_atc(story):
    argv = {v: _json(story["build"] / f"convert__{v}/convert.json")["atc_argv"] for v in VARIANTS}
    assert "--soc_version=Ascend910B1" in argv["fp16"] and "--precision_mode_v2=fp16" in argv["fp16"]
    assert "--precision_mode_v2=mixed_bfloat16" in argv["bf16"]
    assert "--allow_hf32=false" in argv["origin_fp32"] and not any("allow_hf32" in a for a in argv["origin"])
    assert not any(a.startswith("--precision_mode=") for v in VARIANTS for a in argv[v])
