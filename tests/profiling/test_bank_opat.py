"""A knowledge bank belongs to one model; aoe_result_opat.json claims no change where none was made."""

import json

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.backends.onnxruntime.tune import source_sha256, tune_model
from ascendpipe.backends.onnxruntime.tune_bank import sha256_file
from ascendpipe.errors import UserError
from ascendpipe.precision.settings import resolve
from ascendpipe.profiling import aoe_result

from tests.modelzoo import constant_heavy, conv_chain

SESSION = {"graph_optimization_level": "ORT_ENABLE_ALL", "intra_op_num_threads": 1,
           "execution_mode": "ORT_SEQUENTIAL", "disabled_optimizers": []}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return conv_chain(d / "resnetish.onnx"), constant_heavy(d / "tfmish.onnx")


def _bank(path, model, **extra):
    doc = aoe_result.bank_document(model_sha256=sha256_file(model), session=SESSION, measurements={},
                                   model=model.name, **extra)
    path.write_text(json.dumps(doc))
    return path


def test_a_bank_tuned_on_another_model_is_refused_naming_both(tmp_path, models):
    resnet, tfm = models
    bank = _bank(tmp_path / "bank.json", resnet)
    with pytest.raises(UserError) as err:
        convert_model(tfm, tmp_path / "wrong", resolve({"tune_bank": str(bank)}))
    text = str(err.value)
    assert "'resnetish.onnx'" in text and "'tfmish.onnx'" in text and sha256_file(resnet)[:12] in text
    assert text.startswith(str(bank))  # where: the bank file
    assert not (tmp_path / "wrong" / "model.onnx").exists()  # refused before anything was written
    # the model it was tuned on takes it
    out = convert_model(resnet, tmp_path / "right", resolve({"tune_bank": str(bank)})).out_dir
    assert json.loads((out / "runtime.json").read_text())["session"] == SESSION


def test_a_bank_tuned_on_the_converted_model_serves_its_source(tmp_path, models):
    resnet, tfm = models
    converted = convert_model(resnet, tmp_path / "c", resolve({})).model_path
    assert source_sha256(converted) == sha256_file(resnet) and source_sha256(resnet) is None
    bank = _bank(tmp_path / "bank.json", converted, source_sha256=source_sha256(converted))
    convert_model(resnet, tmp_path / "again", resolve({"tune_bank": str(bank)}))  # accepted
    with pytest.raises(UserError, match="tune this model"):
        convert_model(tfm, tmp_path / "other", resolve({"tune_bank": str(bank)}))
    # a hand-written bank names no model: settings only, not checked
    (tmp_path / "hand.json").write_text(json.dumps({"session": {"intra_op_num_threads": 2}}))
    convert_model(tfm, tmp_path / "hand", resolve({"tune_bank": str(tmp_path / "hand.json")}))


def test_opat_with_unchanged_settings_has_no_changed_rows(models):
    _, tfm = models
    x = np.random.default_rng(1).standard_normal((4, 192)).astype(np.float32)
    # from ORT_ENABLE_ALL the only candidate, ConstantFolding off, is ~100x slower: nothing is kept
    outcome = tune_model(tfm, [{"x": x}], job_types=[2], repeats=3, iterations=3, max_candidates=1,
                         baseline={"graph_optimization_level": "ORT_ENABLE_ALL"})
    assert outcome.best == outcome.baseline and not outcome.final["significant"]
    rows = [r["tune_performance"]["Format"] for r in outcome.operators]
    assert rows and all(r["update_mode"] == "unchanged" for r in rows)
    assert all(r["performance_after_tune(us)"] == r["performance_before_tune(us)"] for r in rows)
    assert {r["performance_improvement"] for r in rows} == {"0.00%"}


def test_opat_percentage_is_aoes_definition():
    # AOE's own example (aoe_result_opat format doc): 134 us -> 99 us is "35.35%" = (134 - 99) / 99
    before = {"softmax": {"op_type": "SoftmaxV2", "durations_us": [134.0] * 5}}
    after = {"softmax": {"op_type": "SoftmaxV2", "durations_us": [99.0] * 5}}
    (row,) = aoe_result.per_op_changes(before, after)
    assert row["tune_performance"]["Format"]["performance_improvement"] == "35.35%"
    doc = aoe_result.opat_document(report_id="1", tuning_name="m", tuning_time_s=1, improved=True,
                                   operators=[], baseline_ms=100.0, result_ms=60.0)
    assert doc["report_1"][1]["OPAT"]["model_performance_improvement"] == "66.67%"
