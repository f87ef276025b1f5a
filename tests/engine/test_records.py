"""Records, their JSON contracts, gc, the schema file, and what a no-op build imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ascendpipe
from tests.engine.conftest import CHAIN

ROOT = Path(__file__).resolve().parents[2]


def _cli(ws, *args):
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=ws.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_runs_json_is_newest_first_with_the_contract_fields(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.build(set=["stages.train.params.lr=0.3"])
    runs = json.loads(_cli(ws, "runs", "--json"))
    assert [r["id"] for r in runs] == [2, 1]
    latest = runs[0]
    assert latest["pipeline"] == "pipeline.yaml" and latest["started"]
    train = latest["stages"]["train"]
    assert train["kind"] == "run" and train["state"] == "ran"
    assert train["params"] == {"lr": 0.3}
    assert list(train["outputs"]) == ["data/model.txt"] and len(train["outputs"]["data/model.txt"]) == 64
    assert runs[1]["stages"]["prepare"]["state"] == "ran" and latest["stages"]["prepare"]["state"] == "fresh"
    shown = json.loads(_cli(ws, "show", "2", "--json"))
    assert shown["id"] == 2 and shown["stages"]["train"]["params"] == {"lr": 0.3}
    assert json.loads(_cli(ws, "show", "latest~1", "--json"))["id"] == 1


def test_diff_marks_changed_params_and_metrics(ws):
    ws.write("input.txt", "hello")
    ws.write(
        "count.py",
        "import json, os\np = json.loads(os.environ['ASCENDPIPE_PARAMS'])\n"
        "json.dump({'score': p['k'] * 2, 'fixed': 1}, open('data/m.json', 'w'))\n",
    )
    ws.pipeline(
        """
        stages:
          score:
            kind: run
            cmd: mkdir -p data && python3 count.py
            deps: [count.py]
            outs: []
            metrics: data/m.json
            params: {k: 1, other: x}
        """
    )
    ws.build()
    ws.build(set=["stages.score.params.k=5"])
    result = ascendpipe.diff(1, 2, workspace=str(ws.root))
    stage = result["stages"]["score"]
    assert stage["params"]["k"] == {"a": 1, "b": 5, "changed": True}
    assert stage["params"]["other"] == {"a": "x", "b": "x", "changed": False}
    assert stage["metrics"]["score"] == {"a": 2, "b": 10, "changed": True, "delta": 8}
    assert stage["metrics"]["fixed"]["changed"] is False
    text = _cli(ws, "diff", "1", "2")
    assert "score" in text and "*" in text and "fixed" not in text


def test_gc_keeps_what_the_cache_needs_and_drops_orphans(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    orphan = ws.root / "cache" / "objects" / "ff" / ("f" * 62)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_text("nobody needs me")
    result = ascendpipe.gc(str(ws.root))
    assert result["removed_objects"] == 1 and not orphan.exists()
    (ws.root / "data/model.txt").unlink()
    run = ws.build()
    assert run["stages"]["train"]["state"] == "restored"


def test_noop_build_imports_no_heavy_module(ws):
    from tests.modelzoo import l2norm_model

    l2norm_model(str(ws.root / "m.onnx"))
    ws.pipeline(
        """
        stages:
          convert:
            kind: convert
            model: m.onnx
            matrix:
              fp16: {precision_mode: force_fp16}
              mixed: {precision_mode: allow_fp32_to_fp16}
        """
    )
    run = ws.build()
    assert set(ws.states(run).values()) == {"ran"}
    probe = (
        "import sys, io\n"
        "from ascendpipe.cli.main import main\n"
        "rc = main(['build', 'pipeline.yaml', '-q'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime', 'torch', 'numpy', 'jsonschema', 'jinja2', 'doit'))\n"
        "print(rc, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ws.root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"


def test_schema_file_is_current():
    from ascendpipe.config.schema import editor_schema

    on_disk = json.loads((ROOT / "schemas" / "pipeline.schema.json").read_text())
    assert on_disk == json.loads(json.dumps(editor_schema())), "regenerate: python -m ascendpipe.config.schema > schemas/pipeline.schema.json"


def test_the_editor_schema_takes_a_templated_param_and_still_refuses_a_bad_value():
    """A stage's param may be a template the loader renders first (soc_version: "{{ params.soc }}"); an editor
    checking the file against schemas/pipeline.schema.json must not flag it, and must still flag a bad value."""
    import jsonschema

    schema = json.loads((ROOT / "schemas" / "pipeline.schema.json").read_text())
    stage = {"kind": "convert", "model": "m.onnx", "params": {"soc_version": "{{ params.soc }}"}}
    jsonschema.validate({"params": {"soc": "Ascend310P3"}, "stages": {"convert": stage}}, schema)
    stage["params"]["soc_version"] = "Ascend 310"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"stages": {"convert": stage}}, schema)


def test_fresh_and_restored_stages_keep_their_remedy_files_and_info(ws):
    """A run record names the remedy files and info of every stage's outputs, whether the stage ran,
    was restored from the run-cache or was fresh (a no-op build records them too)."""
    from tests.modelzoo import l2norm_model

    l2norm_model(ws.root / "models" / "l2.onnx")
    ws.pipeline("stages:\n  convert:\n    kind: convert\n    model: models/l2.onnx\n"
                "    params: {precision_mode: force_fp16, keep_dtype: [sum, sqrt]}\n")
    ran = ws.build()["stages"]["convert"]
    assert ran["state"] == "ran"
    assert sorted(f["name"] for f in ran["remedy_files"]) == ["keep_dtype"]
    assert ran["info"]["atc_argv"][0] == "atc"

    fresh = ws.build()["stages"]["convert"]  # the no-op fast path
    assert fresh["state"] == "fresh"
    assert fresh["remedy_files"] == ran["remedy_files"] and fresh["info"] == ran["info"]

    other = ws.build(set=["stages.convert.params.keep_dtype=[sum]"])["stages"]["convert"]
    assert other["state"] == "ran" and other["remedy_files"][0]["hash"] != ran["remedy_files"][0]["hash"]
    restored_run = ws.build()
    restored = restored_run["stages"]["convert"]
    assert restored["state"] == "restored"
    assert restored["remedy_files"] == ran["remedy_files"] and restored["info"] == ran["info"]
    # the content comes back with the record, as for a stage that ran
    shown = ascendpipe.show(restored_run["id"], str(ws.root))["stages"]["convert"]["remedy_files"]
    assert shown[0]["content"].split() == ["sum", "sqrt"]


def test_diff_of_runs_of_two_pipelines_says_so_first(ws):
    """latest~1 is the build before the latest, of whichever pipeline: diffing runs of two pipeline
    files says so before any row, and names the run to diff instead."""
    import io

    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    ws.pipeline("build_dir: build/other\n" + CHAIN.replace("data/", "other/"), name="other.yaml")
    ascendpipe.build(str(ws.root / "other.yaml"), quiet=True, stream=io.StringIO())
    result = ascendpipe.diff("latest~1", "latest", workspace=str(ws.root))
    assert result["pipelines"] == {"a": "pipeline.yaml", "b": "other.yaml", "same": False, "previous_of_b": None}
    text = _cli(ws, "diff", "latest~1", "latest").splitlines()
    assert text[:2] == [
        "runs 1 and 2 are of different pipelines: run 1 built pipeline.yaml, run 2 built other.yaml; only stages "
        "of the same name are compared",
        "  the run before 2 of other.yaml is none (it is its first)"]
    ws.build()
    assert _cli(ws, "diff", "latest~1", "latest").splitlines()[1] == (
        "  the run before 3 of pipeline.yaml is run 1: ascendpipe diff 1 3")
    same = ascendpipe.diff(1, 3, workspace=str(ws.root))
    assert same["pipelines"] == {"a": "pipeline.yaml", "b": "pipeline.yaml", "same": True}
    assert not _cli(ws, "diff", "1", "3").startswith("runs 1 and 3 are of different")
