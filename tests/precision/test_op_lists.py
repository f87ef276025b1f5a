"""The device's mixed-precision lists per SoC: the extracted data against lines read by hand in the
published files, and the facts the issue names per SoC."""

from __future__ import annotations

import pytest

from ascendpipe.precision import lists

op_lists_data = lists._data()  # data/op_lists.json, as the package reads it

CANNDEV = op_lists_data.LISTS["canndev-2022"]


@pytest.mark.parametrize("soc, op, kind, line", [
    # each read by hand: `git show 7290acc7:ops/built-in/tbe/op_info_cfg/ai_core/<soc>/aic-<soc>-ops-info.ini`,
    # the line is `precision_reduce.flag=...` inside the op's [section]
    ("ascend310", "ReduceMeanD", "black", 1384),
    ("ascend310", "MatMulV2", "white", 2189),
    ("ascend310p", "Conv2D", "white", 9356),
    ("ascend910", "LogSoftmaxV2", "black", 8870),
    ("ascend910b", "Pow", "black", 7697),
    ("ascend910b", "ReduceSum", "black", 10247),
    ("ascend310b", "Log", "black", 9762),
])
def test_extracted_entries_are_the_lines_read_by_hand(soc, op, kind, line):
    assert CANNDEV[soc][kind][op] == line
    where = f"ops/built-in/tbe/op_info_cfg/ai_core/{soc}/aic-{soc}-ops-info.ini:{line}"
    assert lists.builtin(soc).policy(op) == (kind, where)


def test_the_2021_shipped_json_as_the_reference_quotes_it():
    # gekowa/ascend-opp @5c28a2fa, aic-ascend310-ops-info.json: MatMulV2's flag at L8783, ReduceMeanD's at L11008
    old = op_lists_data.LISTS["opp-2021"]["ascend310"]
    assert old["white"]["MatMulV2"] == 8783 and old["black"]["ReduceMeanD"] == 11008
    assert sorted(old["white"]) == ["BatchMatMul", "GEMM", "MatMul", "MatMulV2"]
    assert sorted(old["black"]) == ["ReduceMeanD"]
    # the drift: Conv2D had no flag in 2021 (gray) and is white in 2022
    assert "Conv2D" not in op_lists_data.LISTS["opp-2021"]["ascend910"]["white"]
    assert "Conv2D" in CANNDEV["ascend910"]["white"]


SOCS = {"Ascend310": "ascend310", "Ascend310P3": "ascend310p", "Ascend310B1": "ascend310b", "Ascend910A": "ascend910",
        "Ascend910B1": "ascend910b", "Ascend910_9391": "ascend910_93"}


@pytest.mark.parametrize("soc", SOCS)
def test_what_the_device_lists_say_per_soc(soc, no_cann):
    found = lists.for_soc(soc)
    assert found.soc == SOCS[soc] and found.record["source"] == "canndev-2022"
    policy = lambda ge: found.policy(ge)[0]
    for gray in ("SoftmaxV2", "Exp", "Sqrt", "Erf", "LayerNorm", "GroupNorm", "InstanceNorm", "RealDiv", "Sigmoid",
                 "Tanh", "BNInferenceD", "ReduceSumD", "Add", "Mul", "Cast"):
        assert policy(gray) == "gray", (soc, gray)
    big = soc.startswith(("Ascend910", "Ascend310B"))
    for op in ("Pow", "Log", "LogSoftmaxV2", "ReduceSum"):
        assert policy(op) == ("black" if big else "gray"), (soc, op)
    assert policy("ReduceMeanD") == ("gray" if soc == "Ascend310P3" else "black")
    for cube in ("Conv2D", "BatchMatMulV2", "MatMulV2", "Conv2DTransposeD"):
        assert policy(cube) == "white"


def test_a3_takes_the_910b_list_and_says_so(no_cann):
    a3 = lists.for_soc("Ascend910_9391")
    assert a3.white == lists.for_soc("Ascend910B1").white and "ascend910b" in a3.record["why"]


def test_no_soc_version_takes_the_side_that_shows_the_failure(no_cann):
    default = lists.for_soc(None)
    assert default.soc is None and "no soc_version" in default.record["why"]
    # black only where every SoC keeps it black: ReduceMeanD is gray on 310P, so gray here
    assert default.policy("ReduceMeanD")[0] == "gray" and default.policy("Pow")[0] == "gray"
    assert default.policy("Xlog1py")[0] == "black"
    # white where any SoC has it white: DepthwiseConv2D (white on 310/310P/910, gray on 910B/310B)
    assert default.policy("DepthwiseConv2D")[0] == "white"
    assert lists.for_soc("Ascend910B1").policy("DepthwiseConv2D")[0] == "gray"


def test_950_reads_the_open_op_definitions_and_910b_for_the_rest(no_cann):
    found = lists.for_soc("Ascend950PR")
    assert found.record["source"] == "opdefs-2026"
    state, where = found.policy("SoftmaxV2")
    assert state == "white" and where.startswith("ops-nn:activation/softmax_v2/op_host/softmax_v2_def.cpp:")
    assert found.policy("ReduceMean")[0] == "gray"  # ops-math reduce_mean_def.cpp: an OpAICoreConfig without the flag
    assert found.policy("Conv2D")[0] == "white" and "ascend910b" in found.policy("Conv2D")[1]  # no open def: 910b's


def test_the_builtin_version_names_the_data_it_was_made_from():
    from ascendpipe.versions import OP_LISTS_BUILTIN

    meta = op_lists_data.META
    assert meta["canndev-2022"]["commit"].startswith(OP_LISTS_BUILTIN.split("@")[1].split("+")[0])
    for repo, commit in meta["opdefs-2026"]["commit"].items():
        assert commit[:8] in OP_LISTS_BUILTIN, repo


def test_modify_mixlist_follows_ges_get_precision_policy(no_cann):
    lists310p = lists.for_soc("Ascend310P3")
    same = lambda name: name
    white, black, where = lists.apply_mixlist(lists310p, {"black-list": {"to-add": ["Conv2D"]}}, same)
    assert "Conv2D" in black and "Conv2D" not in white and where["Conv2D"] == "modify_mixlist"
    white, black, _ = lists.apply_mixlist(lists310p, {"white-list": {"to-remove": ["Conv2D"]}}, same)
    assert "Conv2D" not in white and "Conv2D" not in black  # removed from its list: gray
    # to-remove from a list the op is not in changes nothing (GE warns, L274-279)
    white, black, _ = lists.apply_mixlist(lists310p, {"black-list": {"to-remove": ["Conv2D"]}}, same)
    assert "Conv2D" in white
    # to-add gray alone changes nothing: only a removal makes an op gray (L280-292)
    lists910 = lists.for_soc("Ascend910B1")
    white, black, _ = lists.apply_mixlist(lists910, {"gray-list": {"to-add": ["Pow"]}}, same)
    assert "Pow" in black
    white, black, _ = lists.apply_mixlist(lists910, {"gray-list": {"to-add": ["Pow"]},
                                                     "black-list": {"to-remove": ["Pow"]}}, same)
    assert "Pow" not in black and "Pow" not in white
