"""``ascendpipe doctor``: each check ok or missing with its fix, exit 0 / 1; with the CANN doubles on
PATH, with an empty PATH, and the pure checks on their own."""

import json
import os
import subprocess
import sys
from pathlib import Path

from ascendpipe import doctor

ROOT = Path(__file__).resolve().parents[1]
DOUBLES = ROOT / "tests" / "backends" / "ascend" / "doubles"


def _run(args, env, cwd=ROOT):
    done = subprocess.run([sys.executable, "-m", "ascendpipe.cli.main", "doctor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def _double_env(**extra):
    """The doubles as a board: the toolkit home, npu-smi and msit on PATH, ais_bench importable."""
    path = os.pathsep.join([str(Path(sys.executable).parent), str(DOUBLES / "driver_bin"), str(DOUBLES / "msit_bin"),
                            "/usr/bin", "/bin"])
    env = {"PATH": path, "ASCEND_TOOLKIT_HOME": str(DOUBLES / "toolkit"), "PYTHONPATH": str(DOUBLES / "pylib"),
           "HOME": os.environ.get("HOME", "/tmp")}
    env.update(extra)
    return env


def _checks(stdout):
    data = json.loads(stdout)
    return data, {c["name"]: c for c in data["checks"]}


def test_onnxruntime_backend_checks_its_packages_and_disk():
    rc, out, err = _run(["--json"], dict(os.environ))
    data, checks = _checks(out)
    assert rc == 0 and data["ok"] and data["backend"] == "onnxruntime"
    assert list(checks) == ["onnxruntime", "onnx", "disk"]
    import onnx
    import onnxruntime

    assert checks["onnxruntime"]["detail"] == f"onnxruntime {onnxruntime.__version__}"
    assert checks["onnx"]["detail"] == f"onnx {onnx.__version__}"


def test_ascend_with_the_doubles_passes_every_check_and_names_versions():
    rc, out, err = _run(["--backend", "ascend", "--json"], _double_env())
    data, checks = _checks(out)
    assert rc == 0 and data["ok"], out + err
    assert list(checks) == ["toolkit", "atc", "aoe", "msprof", "msaccucmp.py", "ais_bench", "msit", "soc",
                            "workspace path", "disk"]
    assert "(CANN 8.0.RC1.double)" in checks["toolkit"]["detail"]
    assert checks["atc"]["detail"].endswith("toolkit/bin/atc (8.0.RC1.double)")
    assert "pylib/ais_bench" in checks["ais_bench"]["detail"]
    assert checks["soc"]["detail"] == "board: Ascend310P3"


def test_the_pipelines_soc_version_is_checked_against_the_board():
    args = ["pipelines/reid.yaml", "--backend", "ascend", "--json"]
    rc, out, _ = _run(args + ["--set", "stages.convert.params.soc_version=Ascend310P3"], _double_env())
    assert rc == 0 and "matches" in _checks(out)[1]["soc"]["detail"]
    rc, out, _ = _run(args + ["--set", "stages.convert.params.soc_version=Ascend910B2"], _double_env())
    soc = _checks(out)[1]["soc"]
    assert rc == 1 and not soc["ok"]
    assert soc["detail"] == "the board has Ascend310P3; stage convert@fp16 converts for Ascend910B2"
    assert soc["fix"].startswith("set soc_version: Ascend310P3")
    rc, out, _ = _run(["--backend", "ascend", "--json"], _double_env(NPU_SMI_DOUBLE_FAIL="1"))
    assert rc == 1 and "dcmi module initialize failed" in _checks(out)[1]["soc"]["detail"]


def test_an_empty_path_fails_every_tool_check_each_with_its_fix(tmp_path):
    rc, out, err = _run(["--backend", "ascend"], {"PATH": ""})
    assert rc == 1 and "Traceback" not in err
    lines = out.splitlines()
    missing = [line.split()[1] for line in lines if line.startswith("MISSING")]
    absent = [line.split()[1] for line in lines if line.startswith("absent")]
    assert missing == ["toolkit", "atc", "aoe", "msprof", "ais_bench", "soc"]
    assert absent == ["msaccucmp.py", "msit"]  # optional: reported apart, not counted
    fixes = [line.strip() for line in lines if line.strip().startswith("fix:")]
    assert len(fixes) == len(missing) + len(absent) and any("pip install msit" in f for f in fixes)
    # both set_env.sh locations: CANN 8 (ascend-toolkit/) and CANN 9 (cann/)
    toolkit_fix = fixes[0]
    assert "/usr/local/Ascend/ascend-toolkit/set_env.sh" in toolkit_fix and "/usr/local/Ascend/cann/set_env.sh" in toolkit_fix
    assert lines[-1] == "6 of 8 required checks failed; optional, not found: msaccucmp.py, msit"


def test_a_missing_optional_tool_does_not_fail_doctor():
    env = _double_env()
    env["PATH"] = env["PATH"].replace(str(DOUBLES / "msit_bin") + os.pathsep, "")
    rc, out, err = _run(["--backend", "ascend"], env)
    assert rc == 0, out + err
    assert "absent   msit" in out and out.splitlines()[-1] == "all required checks passed; optional, not found: msit"


def test_every_npu_smi_row_layout_names_the_board():
    expected = {"310": "Ascend310", "310P": "Ascend310P3", "310B": "Ascend310B4", "910": "Ascend910ProB",
                "910B": "Ascend910B3"}
    for layout, soc in expected.items():
        rc, out, _ = _run(["--backend", "ascend", "--json"], _double_env(NPU_SMI_DOUBLE_LAYOUT=layout))
        assert rc == 0 and _checks(out)[1]["soc"]["detail"] == f"board: {soc}", (layout, out)
    # Atlas A3: npu-smi names the chip Ascend910 (the variant Ascend910_93xx is not in the table)
    rc, out, _ = _run(["--backend", "ascend", "--json"], _double_env(NPU_SMI_DOUBLE_LAYOUT="A3"))
    soc = _checks(out)[1]["soc"]
    assert rc == 0 and soc["ok"] and soc["detail"].startswith("board: Ascend910 (Atlas A3: soc_version Ascend910_93xx")


def test_a3_and_a_pipeline_without_soc_version():
    args = ["pipelines/reid.yaml", "--backend", "ascend", "--json"]
    a3 = _double_env(NPU_SMI_DOUBLE_LAYOUT="A3")
    rc, out, _ = _run(args + ["--set", "params.soc_version=Ascend910_9391"], a3)
    assert rc == 0 and "matches" in _checks(out)[1]["soc"]["detail"]
    rc, out, _ = _run(args + ["--set", "params.soc_version=Ascend910B3"], a3)
    soc = _checks(out)[1]["soc"]
    assert rc == 1 and "converts for Ascend910B3" in soc["detail"] and "Ascend910_9391" in soc["fix"]
    rc, out, _ = _run(args, _double_env())  # reid.yaml sets no soc_version
    soc = _checks(out)[1]["soc"]
    assert rc == 1 and not soc["ok"] and "sets no soc_version" in soc["detail"]
    assert soc["fix"].endswith("--set params.soc_version=Ascend310P3")


def test_a_workspace_path_with_characters_the_tools_refuse_fails(tmp_path):
    ws = tmp_path / "my@work space"
    ws.mkdir()
    rc, out, _ = _run(["--backend", "ascend", "--json"], _double_env(), cwd=ws)
    check = _checks(out)[1]["workspace path"]
    assert rc == 1 and not check["ok"] and "' '" in check["detail"] and "'@'" in check["detail"]


def test_pure_checks():
    assert doctor.path_chars(Path("/data/models/reid_v2.1")).ok
    assert not doctor.path_chars(Path("/data/模型")).ok  # atc takes CJK, ais_bench, msit and msaccucmp do not
    low = doctor.free_disk(Path("/w"), int(1.5 * 2**30))
    assert not low.ok and "1.50 GiB" in low.detail and "gc" in low.fix
    assert doctor.free_disk(Path("/w"), 3 * 2**30).ok
    assert doctor.soc_of_chip("910B3") == "Ascend910B3"
    table = "| NPU  Name | Health |\n| 0    910B3 | OK |\n| 0    0 | 0000:C1:00.0 |\n| 1    910B3 | OK |\n"
    assert doctor.parse_npu_smi(table) == ["910B3", "910B3"]
    # the name in the next field; an A3 Chip row whose Phy-ID has three digits is not a chip name
    assert doctor.parse_npu_smi("| 0 | 910B2C | OK |\n| 0     Ascend910 | OK |\n| 0     104 | 0000:9D:00.0 |") == \
        ["910B2C", "Ascend910"]
    assert doctor.parse_npu_smi("| 0   310 | OK |\n| 0   0 | 0000:05:00.0 |\n| 0   0  | 2431 | python3 |") == ["310"]
    assert doctor.toolkit(None, None, False, None, ["/usr/local/Ascend/cann/set_env.sh"]).fix == \
        "source the toolkit's set_env.sh: `. /usr/local/Ascend/cann/set_env.sh`"
    assert not doctor.soc_match([], {}, None).ok
    assert doctor.package("onnx", None, "why").fix == "pip install onnx"


def test_an_unknown_backend_is_a_one_line_error():
    rc, out, err = _run(["--backend", "nosuch"], dict(os.environ))
    assert rc == 2 and err.count("\n") == 1 and "unknown backend 'nosuch'" in err
