"""fix's printed YAML for a list-form matrix validates (issue 43): a variant's overlay cannot sit beside
the matrix's lists, so fix prints the matrix in its named form, the target variant with the remedy;
pasted in place of the list form it validates and builds the remedy."""

from __future__ import annotations

import json

import pytest
import yaml

import ascendpipe
from ascendpipe.cli.main import main as cli
from tests.fix.workspaces import classification_pipeline, l2norm_workspace

PIPELINE = classification_pipeline("convert", {"matrix": {"precision_mode": ["force_fp32", "force_fp16"]}})


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    return l2norm_workspace(tmp_path, monkeypatch, PIPELINE)


def test_the_printed_yaml_replaces_the_list_form_and_validates(workspace, capsys):
    from ascendpipe.fix.run import fix_pipeline

    pipeline = workspace / "pipeline.yaml"
    report = fix_pipeline(str(pipeline), stage="convert@force_fp16", metric="eval.top1", tolerance=0.05)
    assert report.outcome.passed
    text = report.text()
    printed = text.split("apply it with these YAML lines:\n", 1)[1].split("\n\n", 1)[0]
    assert printed.startswith("# replaces stages.convert.matrix (its list form, in named form: the same variants)\n")
    pasted = yaml.safe_load(printed)
    assert pasted == {"stages": {"convert": {"matrix": {
        "force_fp32": {"precision_mode": "force_fp32"},
        "force_fp16": {"precision_mode": "force_fp16", "keep_dtype": report.keep_dtype,
                       **({"fusion_switch": report.fusion_switch} if report.fusion_switch else {})}}}}}
    assert json.loads((workspace / "build/fix/convert__force_fp16/fix.json").read_text())["yaml"] == printed + "\n"
    # pasted in place of the list form: validate takes it, and the build converts force_fp16 with the remedy
    doc = yaml.safe_load(pipeline.read_text())
    doc["stages"]["convert"]["matrix"] = pasted["stages"]["convert"]["matrix"]
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    capsys.readouterr()
    assert cli(["validate", str(pipeline)]) == 0
    run = ascendpipe.build(str(pipeline), ["eval@force_fp16"], quiet=True)
    assert run["stages"]["eval@force_fp16"]["metrics"]["top1"] >= 0.95
    applied = json.loads((workspace / "build/convert__force_fp16/convert.json").read_text())
    assert applied["keep_dtype"] == report.keep_dtype and applied["precision_mode"] == "force_fp16"
