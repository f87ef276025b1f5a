"""Tool discovery, the runner, and `ascendpipe import`."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ascendpipe.backends.ascend import importer, toolkit
from ascendpipe.backends.ascend.runner import RecordingRunner, SubprocessRunner, tool_label
from ascendpipe.errors import StageFailed, UserError

FIX = Path(__file__).parent / "fixtures"


def _exe(path: Path, text: str = "#!/bin/sh\necho ok\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_install_info_and_version_info_parsing():
    text = "package_name=Ascend-cann-toolkit\nversion=7.0.RC1\ninnerversion=V100R001C13\n"
    assert toolkit.version_from_info(text) == "7.0.RC1"
    assert toolkit.version_from_info("Version=6.3.RC2\nversion_dir=6.3.RC2\n") == "6.3.RC2"
    assert toolkit.version_from_info("no version here") is None


def test_home_order_then_path(tmp_path):
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    _exe(home_a / "compiler/bin/atc")
    (home_a / "x86_64-linux").mkdir()
    (home_a / "x86_64-linux/ascend_toolkit_install.info").write_text("version=8.0.RC2\n")
    _exe(tmp_path / "pathbin/msprof")
    env = {"ASCEND_TOOLKIT_HOME": str(home_a), "ASCEND_HOME_PATH": str(home_b), "PATH": str(tmp_path / "pathbin")}
    tk = toolkit.discover(env)
    assert tk.home == home_a and tk.version == "8.0.RC2"
    assert tk.tool("atc") == home_a / "compiler/bin/atc"
    assert tk.tool("msprof") == tmp_path / "pathbin/msprof"  # not in the home: PATH
    only_b = toolkit.discover({"ASCEND_HOME_PATH": str(home_b), "PATH": ""})
    assert only_b.home == home_b and only_b.version == "unknown"


def test_missing_tool_is_one_line_with_the_remedy(tmp_path):
    tk = toolkit.discover({"PATH": str(tmp_path)})
    with pytest.raises(UserError) as err:
        tk.tool("atc", stage="convert@fp16")
    text = str(err.value)
    assert "\n" not in text and "'atc'" in text and "convert@fp16" in text
    assert "set_env.sh" in text and "--backend onnxruntime" in text


def test_tool_version_from_component_version_info(tmp_path):
    home = tmp_path / "home"
    _exe(home / "tools/aoe/bin/aoe")
    (home / "tools/aoe/version.info").write_text("Version=7.0.0.beta1\n")
    _exe(home / "bin/atc")
    (home / "version.info").write_text("version=7.0.0\n")
    tk = toolkit.discover({"ASCEND_TOOLKIT_HOME": str(home), "PATH": ""})
    assert tk.versions(("aoe", "atc", "msprof")) == {"cann": "7.0.0", "aoe": "7.0.0.beta1", "atc": "7.0.0",
                                                     "msprof": "not found"}


def test_msaccucmp_found_in_either_layout(tmp_path):
    home = tmp_path / "latest"
    script = home / "toolkit/tools/operator_cmp/compare/msaccucmp.py"
    script.parent.mkdir(parents=True)
    script.write_text("")
    assert toolkit.discover({"ASCEND_TOOLKIT_HOME": str(home)}).msaccucmp() == script


def test_subprocess_runner_logs_and_fails_naming_tool_and_log(tmp_path):
    log_path = tmp_path / "stage.log"
    tool = _exe(tmp_path / "atc", "#!/bin/sh\necho converting $1\necho 'E19010: no such op' >&2\nexit 3\n")
    ok = _exe(tmp_path / "ok", "#!/bin/sh\necho fine $1\n")
    runner = SubprocessRunner(stage="convert", log_path=str(log_path))
    with open(log_path, "w") as log:
        proc = runner.run([str(ok), "--x=1"], cwd=tmp_path, env=dict(os.environ), log=log)
        assert proc.returncode == 0
        with pytest.raises(StageFailed) as err:
            runner.run([str(tool), "--model=m.onnx"], cwd=tmp_path, env=dict(os.environ), log=log)
    text = log_path.read_text()
    assert "fine --x=1" in text and "converting --model=m.onnx" in text and "E19010" in text
    assert "atc exited with 3" in str(err.value) and str(log_path) in str(err.value)
    assert "E19010" in str(err.value)


def test_runner_ok_codes_and_labels(tmp_path):
    two = _exe(tmp_path / "cmp", "#!/bin/sh\nexit 2\n")
    with open(tmp_path / "l.log", "w") as log:
        assert SubprocessRunner("s").run([str(two)], cwd=tmp_path, env=None, log=log, ok_codes=(0, 2)).returncode == 2
    assert tool_label(["/usr/bin/python3", "-m", "ais_bench", "--model", "x"]) == "python3 -m ais_bench"
    assert tool_label(["python3", "/x/msaccucmp.py", "convert"]) == "msaccucmp.py"
    rec = RecordingRunner()
    rec.run(["atc", "--mode=1"], cwd=tmp_path, env=None, log=io.StringIO())
    assert rec.calls == [["atc", "--mode=1"]] and rec.tools() == ["atc"]


@pytest.mark.parametrize("rel, kind", [
    ("msprof/new/PROF_000001_20240101120000_ABCDEFGH", "msprof"),
    ("msprof/old", "msprof"),
    ("msit/result_20240101120000.csv", "msit_compare"),
    ("aoe/aoe_result_opat_63rc2.json", "aoe"),
    ("ais_bench/2023_05_06-07_08_09_summary.json", "ais_bench"),
    ("msprof/new/PROF_000001_20240101120000_ABCDEFGH/mindstudio_profiler_output/op_summary_20240101120000.csv", "msprof"),
    ("msprof/new/PROF_000001_20240101120000_ABCDEFGH/mindstudio_profiler_output/op_statistic_20240101120000.csv", "msprof"),
])
def test_import_recognises_each_format(rel, kind):
    result = importer.import_path(FIX / rel)
    assert result["kind"] == kind and result["format"] == "ascendpipe-import/1"
    assert json.loads(json.dumps(result)) == result  # plain JSON all the way down


def test_import_recognises_by_content_not_name(tmp_path):
    renamed = tmp_path / "whatever.json"
    shutil.copyfile(FIX / "aoe/aoe_result_opat_62rc1.json", renamed)
    data = importer.import_path(renamed)["data"]
    assert data["variant"] == "62RC1" and len(data["ops"]) == 2


@pytest.mark.parametrize("content, suffix, why", [
    ('{"a": 1}', ".json", "neither an ais_bench summary nor an AOE result"),
    ("a,b\n1,2\n", ".csv", "neither NPUDump nor msprof columns"),
    ("x", ".txt", "unknown file type"),
])
def test_import_rejects_unknown_with_location(tmp_path, content, suffix, why):
    path = tmp_path / f"f{suffix}"
    path.write_text(content)
    with pytest.raises(UserError) as err:
        importer.import_path(path)
    assert why in str(err.value) and str(path) in str(err.value)


def test_import_empty_prof_dir_says_to_export(tmp_path):
    (tmp_path / "PROF_000001_x" / "device_0" / "data").mkdir(parents=True)
    with pytest.raises(UserError, match="msprof --export=on"):
        importer.import_path(tmp_path)


def test_import_cli_json_and_summary(tmp_path):
    from ascendpipe.cli import import_

    parser = argparse.ArgumentParser()
    import_.add_arguments(parser)
    out_file = tmp_path / "norm.json"
    args = parser.parse_args([str(FIX / "ais_bench/2023_05_06-07_08_09_summary.json"), "--json", "-o", str(out_file)])
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert import_.main(args) == 0
    printed = json.loads(buf.getvalue())
    assert printed["data"]["latency_ms"]["p99"] == 2.884 and json.loads(out_file.read_text()) == printed
    buf = io.StringIO()
    with redirect_stdout(buf):
        import_.main(parser.parse_args([str(FIX / "msit/result_20240101120000.csv")]))
    assert buf.getvalue().strip() == ("msit compare: 4 rows, 2 precision errors, min cosine 0.912, "
                                      "first failure at row 1")
    assert isinstance(import_.HELP, str) and "\n" not in import_.HELP


def test_import_cli_through_main_is_one_line_error(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "ascendpipe.cli.main", "import", str(tmp_path / "nope.json")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_import_output_is_strict_json():
    row = importer.import_path(FIX / "msit/result_20240101120000.csv")["data"]["rows"][1]
    assert row["target_mean"] == "inf" and row["target_std"] is None  # the 'inf;nan' StandardDeviation cell
    json.dumps(row, allow_nan=False)
