"""Issue 49 (item 4): a decoder's fix is a recorded, cached pipeline run like any other.

A LLaMA-style decoder with a KV cache (tests/fix/transformer_models.py, its embeddings scaled so every
RMSNorm's mean of squares overflows fp16), one graph for prefill (8 tokens, an empty cache) and decode
(1 token after an 8-token cache): a convert stage, infer of the golden and the converted model over the
prefill input, a compare stage for prefill and one for decode, and a language-model eval (next-token
agreement with the golden, perplexity on labels). fix holds either the eval's agreement or the decode
compare's output cosine; each answer is checked by a plain build with its --set lines."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

pytest.importorskip("torch", reason="the decoder is exported from a torch module")

import ascendpipe  # noqa: E402
from tests.fix import transformer_models as tm  # noqa: E402

PIPELINE = {
    "backend": "onnxruntime",
    "stages": {
        "infer_golden": {"kind": "infer", "model": "decoder.onnx", "inputs": "data/prefill/inputs.npz"},
        "convert": {"kind": "convert", "model": "decoder.onnx", "params": {"precision_mode": "force_fp16"}},
        "infer": {"kind": "infer", "model": "convert", "inputs": "data/prefill/inputs.npz"},
        "compare_prefill": {"kind": "compare", "golden": "decoder.onnx", "target": "convert",
                            "inputs": "data/prefill/inputs.npz"},
        "compare_decode": {"kind": "compare", "golden": "decoder.onnx", "target": "convert",
                           "inputs": "data/decode/inputs.npz"},
        "eval_golden": {"kind": "eval", "outputs": "infer_golden", "reference": "infer_golden",
                        "labels": "data/labels.npy", "params": {"task": "lm"}},
        "eval": {"kind": "eval", "outputs": "infer", "reference": "infer_golden", "labels": "data/labels.npy",
                 "golden": "eval_golden", "params": {"task": "lm"}},
    },
}


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    tm.build("llama", root / "decoder.onnx", scaled=True)
    prefill, decode = tm.inputs("llama", past=0), tm.inputs("llama", seed=1, past=8)
    for name, feeds in (("prefill", prefill), ("decode", decode)):
        (root / "data" / name).mkdir(parents=True)
        np.savez(root / "data" / name / "inputs.npz", **feeds)
    # the token each prefill position is to predict: the next prompt token, then one more
    np.save(root / "data" / "labels.npy", np.concatenate([prefill["input_ids"][:, 1:], [[5]]], axis=1))
    (root / "pipeline.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    monkeypatch.chdir(root)
    return root


def _metrics(root, overrides=()):
    run = ascendpipe.build(str(root / "pipeline.yaml"), ["eval", "compare_prefill", "compare_decode"],
                           set=list(overrides), quiet=True)
    return {name: run["stages"][name]["metrics"] for name in ("eval", "compare_prefill", "compare_decode")}


def test_the_decoder_pipeline_builds_fixes_and_records_end_to_end(workspace):
    from ascendpipe.fix.run import fix_pipeline

    before = _metrics(workspace)
    assert before["eval"]["next_token_agreement"] < 0.5 and before["eval"]["delta_next_token_agreement"] < -0.5
    assert before["compare_decode"]["output_cosine"] < 0.5
    report = fix_pipeline(workspace / "pipeline.yaml", stage="convert", metric="eval.next_token_agreement",
                          tolerance=0.01)
    out = report.outcome
    assert out.passed and report.summary["golden_metric"] == 1.0 and len(out.attempts) <= 8, out.message
    assert {"/ln1/ReduceMean", "/lnf/ReduceMean"} <= set(report.keep_dtype)
    # every attempt is a recorded run, marked as fix made it
    runs = report.summary["runs"]
    assert len(runs) == len(out.attempts) and all(ascendpipe.show(r)["argv"][1] == "fix" for r in runs)
    # independently: the answer's --set lines in a plain build restore the greedy tokens, prefill and decode
    after = _metrics(workspace, report.summary["set"])
    assert after["eval"]["next_token_agreement"] == 1.0  # and the perplexity is the golden's, within 0.1%
    assert abs(after["eval"]["delta_perplexity"]) <= 1e-3 * after["eval"]["perplexity"]
    assert abs(before["eval"]["delta_perplexity"]) > 0.1 * before["eval"]["perplexity"]
    assert after["compare_prefill"]["output_cosine"] >= 0.99 and after["compare_decode"]["output_cosine"] >= 0.99
    # a rerun resumes from the journal: the baseline built again (from the cache), nothing else evaluated
    again = fix_pipeline(workspace / "pipeline.yaml", stage="convert", metric="eval.next_token_agreement",
                         tolerance=0.01)
    assert again.outcome.evaluated == 1 and again.keep_dtype == report.keep_dtype


def test_fix_holds_a_compare_stages_output_cosine(workspace):
    from ascendpipe.fix.run import fix_pipeline

    from ascendpipe.errors import UserError

    with pytest.raises(UserError, match="--min-cosine holds an output cosine"):
        fix_pipeline(workspace / "pipeline.yaml", stage="convert", metric="eval.next_token_agreement",
                     tolerance=None, min_cosine=0.99)
    # --min-cosine 0.99 is --tolerance 0.01 for a cosine, whose golden value is 1
    report = fix_pipeline(workspace / "pipeline.yaml", stage="convert", metric="compare_decode.output_cosine",
                          tolerance=None, min_cosine=0.99)
    assert report.outcome.passed, report.outcome.message
    assert report.summary["metric_stages"] == ["compare_decode"] and report.summary["golden_metric"] == 1.0
    assert report.outcome.attempts[0].result.metric < 0.5 and report.summary["metric"] >= 0.99
    assert "compare_decode.output_cosine >= 1 - 0.01 = 0.99" in report.text()
    after = _metrics(workspace, report.summary["set"])
    assert after["compare_decode"]["output_cosine"] >= 0.99 and after["eval"]["next_token_agreement"] == 1.0
