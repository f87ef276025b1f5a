"""checkout RUN: params back through the overrides file, outputs back from the cache, then a build
that runs nothing and reports the run's metrics."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

import ascendpipe
from ascendpipe.cli.main import main as cli
from ascendpipe.config.overrides import parse_override, read_overrides_file
from ascendpipe.errors import UserError
from ascendpipe.explorer.checkout import format_value, override_lines
from tests.explorer.conftest import Workspace


def metrics_of(run):
    return {n: s["metrics"] for n, s in run["stages"].items()}


def test_checkout_then_build_runs_nothing_and_reproduces_the_run(tmp_path):
    ws = Workspace(tmp_path / "ws")
    first = ws.build()
    wanted = ws.build(set=["params.scale=4", "stages.convert.matrix.fp16.keep_dtype=[sum,sqrt]"])
    ws.build(set=["params.scale=7"])
    assert metrics_of(wanted) != metrics_of(first)

    result = ascendpipe.api.checkout(wanted["id"], workspace=str(ws.root))
    overrides = (ws.root / "pipeline.overrides").read_text()
    assert "stages.prep.params.scale=4" in overrides
    assert 'stages.convert.matrix.fp16.keep_dtype=["sum", "sqrt"]' in overrides
    assert set(result["restored"]) >= {"prep", "score", "convert@fp16", "compare@fp16"}
    assert result["will_run"] == {} and result["problems"] == []
    assert (ws.root / "data" / "prep" / "scale.txt").read_text() == "4"

    again = ws.build()
    assert {s["state"] for s in again["stages"].values()} == {"fresh"}
    assert metrics_of(again) == metrics_of(wanted)

    # back to the first run: the pipeline as written gives its params, so the overrides file goes
    ascendpipe.api.checkout(first["id"], workspace=str(ws.root))
    assert not (ws.root / "pipeline.overrides").exists()
    back = ws.build()
    assert {s["state"] for s in back["stages"].values()} == {"fresh"}
    assert metrics_of(back) == metrics_of(first)


def test_checkout_of_some_stages_keeps_the_other_overrides(tmp_path, chdir_to):
    ws = Workspace(tmp_path / "ws")
    ws.build()
    fp16 = ws.build(set=["stages.convert.matrix.fp16.keep_dtype=[sum]"])
    scaled = ws.build(set=["params.scale=3"])
    ascendpipe.api.checkout(scaled["id"], ["score"], workspace=str(ws.root))
    ascendpipe.api.checkout(fp16["id"], ["compare@fp16"], workspace=str(ws.root))
    lines = read_overrides_file(ws.pipeline)
    assert lines == ["stages.prep.params.scale=3", 'stages.convert.matrix.fp16.keep_dtype=["sum"]']
    chdir_to(ws.root)
    status = ascendpipe.status(str(ws.pipeline))["stages"]
    assert {n: s["state"] for n, s in status.items()} == {n: "fresh" for n in status}


def test_a_garbage_collected_run_says_so_in_one_line(tmp_path, chdir_to):
    from ascendpipe.engine.gc import collect

    ws = Workspace(tmp_path / "ws")
    old = ws.build(set=["params.scale=5"])
    ws.build()
    collect(str(ws.root), only_current=True)  # drops what only run `old` used
    chdir_to(ws.root)
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = cli(["checkout", str(old["id"])])
    assert code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "garbage-collected" in lines[0] and "prep (data/prep)" in lines[0], lines
    assert not (ws.root / "pipeline.overrides").exists(), "nothing written when the outputs are gone"
    assert (ws.root / "data" / "prep" / "scale.txt").read_text() == "1", "the workspace is left as it was"
    # its settings alone can still be had; the next build reruns what is gone
    with redirect_stdout(io.StringIO()):
        assert cli(["checkout", str(old["id"]), "--settings-only"]) == 0
    rebuilt = ws.build()
    assert rebuilt["stages"]["prep"]["state"] == "ran" and rebuilt["stages"]["prep"]["params"] == {"scale": 5}


@pytest.mark.parametrize("value", ["force_fp16", "true", "1", "", " padded", "a: b", "#x", ["/ReduceSum", "/Sqrt"],
                                   {"0": "batch"}, 1.5, 3, None, False, [1, [2, "x"]]])
def test_override_values_read_back_unchanged(value):
    assert parse_override(f"stages.s.params.k={format_value(value)}")[1] == value


def test_override_lines_use_the_narrowest_level():
    current = {"convert@a": {"mode": "x"}, "convert@b": {"mode": "x"}, "infer@a": {"n": 1}, "infer@b": {"n": 1}, "prep": {"k": 1, "new": 0}}
    recorded = {"convert@a": {"mode": "y"}, "infer@a": {"n": 2}, "infer@b": {"n": 3}, "prep": {"k": 2}}
    lines, problems = override_lines(current, recorded, {"convert": {"a", "b"}})
    assert lines == ["stages.convert.matrix.a.mode=y", "stages.prep.params.k=2"]
    assert any("param n of infer's variants had different values" in p for p in problems)
    assert any("stage prep: param new was added" in p for p in problems)


def test_a_bad_overrides_line_is_located(tmp_path):
    ws = Workspace(tmp_path / "ws")
    (ws.root / "pipeline.overrides").write_text("# comment\n\nstages.prep.params.scale\n")
    with pytest.raises(UserError) as err:
        ws.build()
    assert "pipeline.overrides:3" in str(err.value)
    (ws.root / "pipeline.overrides").write_text("stages.nope.params.x=1\n")
    with pytest.raises(UserError) as err:
        ws.build()
    assert "pipeline.overrides" in str(err.value) and "unknown stage 'nope'" in str(err.value)


def test_run_forms_and_the_cli(tmp_path, chdir_to):
    ws = Workspace(tmp_path / "ws")
    ws.build(set=["params.scale=2"])
    ws.build()
    chdir_to(ws.root)
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli(["checkout", "latest~1"]) == 0
    text = out.getvalue()
    assert "pipeline.overrides: 1 override(s)" in text and "--set stages.prep.params.scale=2" in text
    assert "now finds run 1's stages fresh" in text
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert cli(["build", "pipeline.yaml"]) == 0
    assert "pipeline.overrides apply" in err.getvalue()
    with redirect_stderr(io.StringIO()) as err, redirect_stdout(io.StringIO()):
        assert cli(["checkout", "latest~5"]) == 2
    assert err.getvalue().count("\n") == 1 and "only 3 runs are recorded" in err.getvalue()


def test_checkout_of_a_partial_run_brings_back_the_stages_it_did_not_build(tmp_path):
    """A fix attempt builds only the stages it measures; checking one out left the others (dump@fp16
    in the ReID story) built for other settings, so `build` reran them (issue 23 item 11)."""
    import yaml

    ws = Workspace(tmp_path / "ws")
    data = yaml.safe_load(ws.pipeline.read_text())
    data["stages"]["dump"] = {"kind": "dump", "model": "convert", "inputs": "data/probe.npy"}
    ws.pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    keep = ["stages.convert.matrix.fp16.keep_dtype=[sum,sqrt]"]
    ws.build()
    partial = ws.build("compare@fp16", set=keep)  # like a fix attempt: no dump@fp16
    assert "dump@fp16" not in partial["stages"]
    ws.build()

    first = ascendpipe.api.checkout(partial["id"], workspace=str(ws.root))
    assert set(first["will_run"]) == {"dump@fp16"}  # never built with these settings: said, not hidden
    assert "not built in run" in first["will_run"]["dump@fp16"][0]
    rebuilt = ws.build()
    assert {n for n, s in rebuilt["stages"].items() if s["state"] == "ran"} == {"dump@fp16"}
    (ws.root / "pipeline.overrides").unlink()  # the pipeline as written again
    ws.build()

    second = ascendpipe.api.checkout(partial["id"], workspace=str(ws.root))
    assert second["will_run"] == {} and second["from_run_cache"] == ["dump@fp16"]
    again = ws.build()
    assert {s["state"] for s in again["stages"].values()} == {"fresh"}
