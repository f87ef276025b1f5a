"""Keys see each input's role: swapping a compare's golden and target (or an eval's query and gallery)
is a new question, answered by running it, never by the other orientation's record or cache entry."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import ascendpipe
from ascendpipe.errors import UserError
from ascendpipe.graph import key as keymod

COMPARE = """\
stages:
  compare:
    kind: compare
    golden: {golden}
    target: {target}
    inputs: x.npy
"""


def _scale_model(path, k: float) -> None:
    """y = relu(x * k): the same op and tensor names whatever k, so the two models pair op by op."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Mul", ["x", "k"], ["h"], name="scale"), helper.make_node("Relu", ["h"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "scale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(np.full((4,), k, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


@pytest.fixture
def two_models(ws):
    _scale_model(ws.root / "models/one.onnx", 1.0)
    _scale_model(ws.root / "models/two.onnx", 2.0)
    np.save(ws.root / "x.npy", np.random.default_rng(0).uniform(0.5, 2.0, (2, 4)).astype(np.float32))
    return ws


def _relative_euclidean(ws) -> float:
    """RelativeEuclideanDistance of the first op, ||target - golden|| / ||golden||: 1 for golden x and
    target 2x, 0.5 the other way round."""
    rows = json.loads((ws.root / "build/compare/result.json").read_text())["rows"]
    return next(r for r in rows if r["op_name"] == "scale")["relative_euclidean"]


def _status(ws) -> dict:
    return ascendpipe.status(str(ws.root / "pipeline.yaml"))["stages"]


def test_swapping_golden_and_target_reruns_with_the_right_orientation_and_swapping_back_restores(two_models):
    ws = two_models
    ws.pipeline(COMPARE.format(golden="models/one.onnx", target="models/two.onnx"))
    assert ws.states(ws.build()) == {"compare": "ran"}
    assert _relative_euclidean(ws) == pytest.approx(1.0)

    ws.pipeline(COMPARE.format(golden="models/two.onnx", target="models/one.onnx"))
    # never built this way: stale, with the roles named, and nothing in the run-cache to restore
    assert _status(ws)["compare"] == {"state": "stale", "reasons": ["golden and target swapped"]}
    out = io.StringIO()
    ascendpipe.build(str(ws.root / "pipeline.yaml"), dry_run=True, stream=out)
    assert "would run      compare: golden and target swapped" in out.getvalue()
    run = ws.build()
    assert run["stages"]["compare"]["state"] == "ran"
    assert run["stages"]["compare"]["reasons"] == ["golden and target swapped"]
    assert _relative_euclidean(ws) == pytest.approx(0.5)

    ws.pipeline(COMPARE.format(golden="models/one.onnx", target="models/two.onnx"))
    assert _status(ws)["compare"] == {"state": "stale", "reasons": ["golden and target swapped"], "restorable": True}
    assert ws.states(ws.build()) == {"compare": "restored"}
    assert _relative_euclidean(ws) == pytest.approx(1.0)
    assert ws.states(ws.build()) == {"compare": "fresh"}


def test_a_role_given_another_input_names_the_role(two_models):
    ws = two_models
    ws.pipeline(COMPARE.format(golden="models/one.onnx", target="models/two.onnx"))
    ws.build()
    (ws.root / "models/three.onnx").write_bytes((ws.root / "models/one.onnx").read_bytes())
    ws.pipeline(COMPARE.format(golden="models/three.onnx", target="models/two.onnx"))
    # the same bytes under another path: still a different question's key, said as the role's change
    assert _status(ws)["compare"]["reasons"] == ["golden: models/one.onnx -> models/three.onnx"]


REID_EVAL = """\
stages:
  eval:
    kind: eval
    query: {query}
    gallery: {gallery}
    labels: labels
    params: {{task: reid}}
"""


def test_swapping_an_evals_query_and_gallery_is_stale_and_scored_that_way(ws):
    # 1-D features; identities 0, 1, 2 on both sides. Each query's nearest gallery entry is its own
    # identity (mAP 1); the other way round, gallery 4 is nearer query 0 (distance 4) than query 10
    # (distance 6): rank-1 2/3 and that query's AP 1/2, mAP (1 + 1/2 + 1) / 3
    (ws.root / "labels").mkdir()
    np.save(ws.root / "labels/query_ids.npy", np.array([0, 1, 2]))
    np.save(ws.root / "labels/gallery_ids.npy", np.array([0, 1, 2]))
    np.save(ws.root / "a.npy", np.array([[0.0], [10.0], [20.0]], np.float32))
    np.save(ws.root / "b.npy", np.array([[1.0], [4.0], [21.0]], np.float32))
    ws.pipeline(REID_EVAL.format(query="a.npy", gallery="b.npy"))
    metrics = ws.build()["stages"]["eval"]["metrics"]
    assert (metrics["mAP"], metrics["rank1"]) == (pytest.approx(1.0), pytest.approx(1.0))

    ws.pipeline(REID_EVAL.format(query="b.npy", gallery="a.npy"))
    assert _status(ws)["eval"] == {"state": "stale", "reasons": ["gallery and query swapped"]}
    run = ws.build()
    assert run["stages"]["eval"]["state"] == "ran"
    metrics = run["stages"]["eval"]["metrics"]
    assert metrics["rank1"] == pytest.approx(2 / 3) and metrics["mAP"] == pytest.approx(2.5 / 3)


def _components(inputs: dict, deps: dict) -> dict:
    return {"format": keymod.KEY_FORMAT, "kind": "compare", "kind_version": "4", "params": {}, "cmd": None,
            "deps": deps, "inputs": inputs, "tools": {}, "outs": ["build/compare"], "env": {}}


def test_role_reasons_for_swaps_moves_additions_and_removals():
    deps = {"build/export": "h1", "build/convert__fp16": "h2", "x.npy": "h3"}
    old = _components({"golden": "build/export", "target": "build/convert__fp16", "inputs": "x.npy"}, deps)
    swapped = _components({"golden": "build/convert__fp16", "target": "build/export", "inputs": "x.npy"}, deps)
    assert keymod.key_of(old) != keymod.key_of(swapped)
    assert keymod.explain(old, swapped) == ["golden and target swapped"]
    moved = _components({"golden": "build/convert__fp16", "target": "build/convert__fp16", "inputs": "x.npy"},
                        {k: v for k, v in deps.items() if k != "build/export"})
    # the dep that left with the role is not said twice
    assert keymod.explain(old, moved) == ["golden: build/export -> build/convert__fp16"]
    dropped = _components({"golden": "build/export", "target": "build/convert__fp16"},
                          {k: v for k, v in deps.items() if k != "x.npy"})
    assert keymod.explain(old, dropped) == ["inputs removed (was x.npy)"]
    assert keymod.explain(dropped, old) == ["inputs added: x.npy"]


def test_a_record_of_the_previous_key_format_is_stale_once_with_that_reason():
    deps = {"a.onnx": "h1", "b.onnx": "h2"}
    new = _components({"golden": "a.onnx", "target": "b.onnx"}, deps)
    old = {k: v for k, v in new.items() if k != "inputs"}
    old["format"] = 1
    decision = keymod.decide(old, {}, new, {})
    assert decision.stale and decision.reasons == ["ascendpipe's key format changed"]


def test_a_tune_stages_conversion_files_are_deps_of_its_key(ws):
    # aoe reads the conversion's files (keep_dtype, fusion_switch_file, ...) on --backend ascend: an
    # edit to one must make the tune stage stale, so each is hashed as a dep; a missing one is located
    _scale_model(ws.root / "models/one.onnx", 1.0)
    ws.write("keep.cfg", "OpName::scale\n")
    ws.pipeline("stages:\n  tune:\n    kind: tune\n    model: models/one.onnx\n"
                "    params: {keep_dtype: keep.cfg, fusion_switch_file: switch.cfg}\n")
    with pytest.raises(UserError) as err:
        ascendpipe.load(str(ws.root / "pipeline.yaml"))
    assert str(err.value).startswith(f"{ws.root / 'pipeline.yaml'}:5:") and "switch.cfg" in str(err.value)
    ws.write("switch.cfg", '{"Switch": {"GraphFusion": {}, "UBFusion": {}}}\n')
    stage = ascendpipe.load(str(ws.root / "pipeline.yaml")).stages["tune"]
    assert set(stage.deps) == {"models/one.onnx", "keep.cfg", "switch.cfg"}
