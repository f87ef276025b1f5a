"""A CANN install's own lists, read from a fixture tree in the installed layout (shaped as the published
JSON: gekowa/ascend-opp's aic-ascend310-ops-info.json; CANN 8.x splits one SoC's list over several files)."""

from __future__ import annotations

import json

import pytest

from ascendpipe.errors import UserError
from ascendpipe.precision import lists, opsinfo

LEGACY = {  # the published shape: op -> {section -> {key -> string}}
    "Conv2D": {"input0": {"name": "x", "dtype": "float16"}, "precision_reduce": {"flag": "true"}},
    "SoftmaxV2": {"input0": {"name": "x", "dtype": "float16,float"}, "precision_reduce": {"flag": "false"}},
    "Pow": {"input0": {"name": "x1", "dtype": "float16,float"}},
    "ReduceMeanD": {"attr": {"list": "axes,keep_dims"}, "precision_reduce": {"flag": " TRUE "}},
}
CV = {"SoftmaxV2": {"input0": {"name": "x", "dtype": "float16"}}}  # read after legacy: SoftmaxV2 becomes gray


def install(root, soc="ascend310p", files=None):
    config = root / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "config" / soc
    config.mkdir(parents=True, exist_ok=True)
    for name, data in (files or {f"aic-{soc}-ops-info-legacy.json": LEGACY, f"aic-{soc}-ops-info-cv.json": CV}).items():
        (config / name).write_text(data if isinstance(data, str) else json.dumps(data, indent=4))
    return config


def test_installed_lists_are_read_in_fes_order(tmp_path):
    install(tmp_path)
    found = lists.for_soc("Ascend310P3", {"ASCEND_OPP_PATH": str(tmp_path / "opp")})
    assert found.record["source"] == "cann-install" and found.record["soc"] == "ascend310p"
    assert found.record["files"] == ["aic-ascend310p-ops-info-legacy.json", "aic-ascend310p-ops-info-cv.json"]
    assert found.policy("Conv2D")[0] == "white" and found.policy("ReduceMeanD")[0] == "white"  # ' TRUE ': trimmed
    assert found.policy("SoftmaxV2")[0] == "gray"  # the later file's entry replaces the legacy one
    assert found.policy("Pow")[0] == "gray"
    assert found.policy("Conv2D")[1].endswith("aic-ascend310p-ops-info-legacy.json:8")  # its "flag" line
    assert len(found.record["digest"]) == 64


@pytest.mark.parametrize("var, sub", [("ASCEND_OPP_PATH", "opp"), ("ASCEND_HOME_PATH", ""),
                                      ("ASCEND_TOOLKIT_HOME", "")])
def test_the_install_is_found_where_ge_and_doctor_look(tmp_path, var, sub, no_cann):
    install(tmp_path)
    found = lists.for_soc("Ascend310P3", {var: str(tmp_path / sub) if sub else str(tmp_path)})
    assert found.record["source"] == "cann-install"


def test_an_install_without_the_soc_folder_falls_back_and_says_so(tmp_path):
    install(tmp_path, soc="ascend910b")
    found = lists.for_soc("Ascend310P3", {"ASCEND_OPP_PATH": str(tmp_path / "opp")})
    assert found.record["source"] == "canndev-2022" and "has no ascend310p" in found.record["install"]
    assert lists.for_soc(None, {"ASCEND_OPP_PATH": str(tmp_path / "opp")}).record["soc"] is None


@pytest.mark.parametrize("text, line, message", [
    ('{\n  "Conv2D": {\n    "precision_reduce": {"flag": "true",}\n  }\n}', 3, "not valid JSON"),
    ('[1, 2]', None, "top level is a list"),
    ('{\n "Conv2D": {"precision_reduce": "true"}\n}', 2, "not an object of objects"),
    ('{\n "Conv2D": {"precision_reduce": {"flag": true}}\n}', 2, "'flag' is not a string"),
    ('{\n "Conv2D": {},\n "Pow": {"precision_reduce": {"flag": "maybe"}}\n}', 3, "flag 'maybe' is not true or false"),
])
def test_a_malformed_file_is_one_located_error(tmp_path, text, line, message):
    config = install(tmp_path, files={"aic-ascend310p-ops-info.json": text})
    with pytest.raises(UserError, match=message) as err:
        lists.for_soc("Ascend310P3", {"ASCEND_OPP_PATH": str(tmp_path / "opp")})
    assert err.value.location.file == str(config / "aic-ascend310p-ops-info.json")
    assert err.value.location.line == line
    assert "\n" not in err.value.message


def test_the_key_changes_with_the_install(tmp_path, no_cann):
    env = {"ASCEND_OPP_PATH": str(tmp_path / "opp")}
    assert lists.key(env).startswith("builtin ")
    config = install(tmp_path)
    first = lists.key(env)
    assert first.startswith("install ")
    (config / "aic-ascend310p-ops-info-cv.json").write_text(json.dumps({"SoftmaxV2": {"x": {"y": "zz"}}}))
    assert lists.key(env) != first
    from ascendpipe.versions import ops_info_watched

    assert str(config) in ops_info_watched(env)


def test_soc_folders_are_the_short_soc_versions():
    assert [opsinfo.soc_folder(s) for s in ("Ascend310", "Ascend310P3", "Ascend310B1", "Ascend910A", "Ascend910B2",
                                            "Ascend910_9382", "Ascend950PR", None)] == [
        "ascend310", "ascend310p", "ascend310b", "ascend910", "ascend910b", "ascend910_93", "ascend950", None]
