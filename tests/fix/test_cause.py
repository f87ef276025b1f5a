"""fix follows the cause (issue 30): candidates come from the first failure's mechanism and its
neighbours, never from ops that only move values; where no keep set can work on the SoC, one line
says why and the ways out. Every answer is checked independently: the model converted again with it,
run on onnxruntime, its output compared with numpy's cosine."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np

from ascendpipe.compare.mechanism import MOVE_OPS
from ascendpipe.fix.search import KEEP, Candidate, Result, propose
from tests.compare import mechanism_models as mm
from tests.fix.workspaces import classification_pipeline


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _emulated_cosine(model, feeds, keep, out, **params) -> float:
    import onnxruntime as ort

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    converted = convert_model(model, out, resolve({"precision_mode": "force_fp16", "keep_dtype": list(keep), **params}))
    run = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    return min(_cosine(t, g) for t, g in zip(run(converted.model_path), run(model)))


def _types(model) -> dict[str, str]:
    import onnx

    return {n.name: n.op_type for n in onnx.load(str(model)).graph.node}


def test_log_of_an_epsilon_is_fixed_by_add_and_log_in_few_evaluations(tmp_path):
    from ascendpipe.fix.run import fix_standalone

    model = mm.log_eps_model(tmp_path / "m.onnx")
    feeds = mm.log_eps_inputs(0)
    np.savez(tmp_path / "x.npz", **feeds)
    report = fix_standalone(model, input_path=tmp_path / "x.npz", min_cosine=0.99)
    assert report.outcome.passed and report.outcome.minimal
    assert report.keep_dtype == ["add_eps", "log"]
    assert len(report.outcome.attempts) <= 6
    types = _types(model)
    tried = {c.name for a in report.outcome.attempts for c in a.remedy}
    assert not {types[op] for op in tried} & MOVE_OPS  # never Transpose, Reshape, Pad
    assert _emulated_cosine(model, feeds, [], tmp_path / "none") < 0.99
    assert _emulated_cosine(model, feeds, ["add_eps", "log"], tmp_path / "both") >= 0.99
    assert _emulated_cosine(model, feeds, ["log"], tmp_path / "log") < 0.99
    assert _emulated_cosine(model, feeds, ["add_eps"], tmp_path / "add") < 0.99


def test_a_global_sum_into_a_matmul_is_refused_on_the_default_soc_with_why_and_fixed_on_a2(tmp_path):
    from ascendpipe.fix.run import fix_standalone

    model = mm.global_sum_model(tmp_path / "m.onnx")
    feeds = mm.global_sum_inputs(0)
    np.savez(tmp_path / "x.npz", **feeds)
    assert (feeds["x"].astype(np.float64).sum(axis=1) > 65504).all()
    # the claim, checked: on the default SoC keeping both ops still reads the sum as fp16 (inf)
    assert _emulated_cosine(model, feeds, ["total", "head"], tmp_path / "default") < 0.99
    assert _emulated_cosine(model, feeds, ["total", "head"], tmp_path / "a2", soc_version="Ascend910B1") >= 0.99
    refused = fix_standalone(model, input_path=tmp_path / "x.npz")
    assert not refused.outcome.passed and len(refused.outcome.attempts) == 1
    message = refused.outcome.message
    assert "no more candidates" not in message and "\n" not in message
    assert "'head' (MatMul) is a cube op" in message and "'total'" in message
    assert "change the model" in message and "--soc-version Ascend910B1" in message
    fixed = fix_standalone(model, input_path=tmp_path / "x.npz", soc_version="Ascend910B1")
    assert fixed.outcome.passed and fixed.outcome.minimal and fixed.keep_dtype == ["total", "head"]
    assert fixed.summary["soc_version"] == "Ascend910B1"


def _cli(argv):
    from ascendpipe.cli.main import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def test_cli_soc_version(tmp_path):
    model = mm.global_sum_model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", mm.global_sum_inputs(0)["x"])
    code, text = _cli(["fix", "--golden", str(model), "--input", str(tmp_path / "x.npy")])
    assert code == 1 and "no keep_dtype set can work on the default SoC" in text
    code, text = _cli(["fix", "--golden", str(model), "--input", str(tmp_path / "x.npy"),
                       "--soc-version", "Ascend910B1", "--json"])
    assert code == 0 and json.loads(text)["keep_dtype"] == ["total", "head"]


def _row(op, op_type, failed=False, **extra):
    return {"op_name": op, "op_type": op_type, "failed": failed, "side": "both", **extra}


def test_ops_that_only_move_values_are_never_proposed():
    # x -> Conv c -> Transpose t -> Reshape r -> Log l -> Pad p -> output; the failure at l has no advice
    producers = {"c": [], "t": ["c"], "r": ["t"], "l": ["r"], "p": ["l"], "m": ["p"]}
    rows = [_row("c", "Conv"), _row("t", "Transpose"), _row("r", "Reshape"), _row("l", "Log", True),
            _row("p", "Pad", True), _row("m", "MatMul", True)]
    result = Result(False, 0.0, 0.0, rows=rows, failure={"op_name": "l", "advice": []}, ops=list(producers),
                    producers=producers)
    proposed, blind = propose(result, frozenset(), 1)
    assert proposed == [Candidate(KEEP, "l")] and not blind
    # with the failing rows kept: the failure's neighbours through the moves (c upstream), never t, r, p
    kept = frozenset({Candidate(KEEP, "l"), Candidate(KEEP, "m")})
    proposed, blind = propose(result, kept, 1)
    assert proposed == [Candidate(KEEP, "c")] and not blind
    proposed, blind = propose(result, kept | {Candidate(KEEP, "c")}, 8)
    assert proposed == []


def test_contained_rows_are_no_evidence():
    rows = [_row("w", "Where", True, contained="absorbed"), _row("s", "Softmax"), _row("o", "MatMul", True)]
    result = Result(False, 0.0, 0.0, rows=rows, failure={"op_name": "o", "advice": []}, ops=["w", "s", "o"],
                    producers={"w": [], "s": ["w"], "o": ["s"]})
    assert propose(result, frozenset(), 1)[0] == [Candidate(KEEP, "o")]
    assert propose(result, frozenset({Candidate(KEEP, "o")}), 1)[0] == [Candidate(KEEP, "s")]


PIPELINE = classification_pipeline("to_om", {"params": {"precision_mode": "force_fp16"}})


def test_pipeline_fix_says_why_on_the_default_soc_and_fixes_on_a2(tmp_path, monkeypatch):
    import yaml

    from ascendpipe.fix.run import fix_pipeline

    (tmp_path / ".ascendpipe").mkdir()
    (tmp_path / "data" / "in").mkdir(parents=True)
    (tmp_path / "data" / "labels").mkdir(parents=True)
    mm.global_sum_model(tmp_path / "model.onnx")
    x = mm.global_sum_inputs(0, batch=8)["x"]
    np.save(tmp_path / "data" / "in" / "x.npy", x)
    np.save(tmp_path / "data" / "labels" / "labels.npy", np.full(8, 3))  # the golden's argmax: w grows with the class
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    refused = fix_pipeline(tmp_path / "pipeline.yaml", stage="to_om", metric="eval.top1", tolerance=0.01)
    assert not refused.outcome.passed and len(refused.outcome.attempts) == 1
    assert "'head' (MatMul) is a cube op" in refused.outcome.message and "Ascend910B1" in refused.outcome.message
    fixed = fix_pipeline(tmp_path / "pipeline.yaml", stage="to_om", metric="eval.top1", tolerance=0.01,
                         overrides=["stages.to_om.params.soc_version=Ascend910B1"])
    assert fixed.outcome.passed and fixed.keep_dtype == ["total", "head"]
    assert fixed.summary["set"] == ['stages.to_om.params.keep_dtype=["total", "head"]']
