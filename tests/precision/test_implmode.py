"""ATC's impl modes resolved as GE's FE resolves them (precision/implmode.py)."""

import pytest

from ascendpipe.precision import implmode


def test_default_is_high_performance_ini():
    modes = implmode.resolve()
    assert modes.mode_for("x", "LayerNorm") == "high_performance" and modes.mode_for("x", "Gelu") == "high_precision"
    assert modes.mode_for("x", "ReduceMeanD") is None and modes.mode_for("x", "Sigmoid") is None  # not listed
    assert "ATC's default" in modes.source


def test_for_all_modes_and_type_lists():
    assert implmode.resolve("high_performance_for_all").mode_for("s", "Sigmoid") == "high_performance"
    assert implmode.resolve("high_precision").mode_for("s", "LayerNorm") == "high_precision"
    listed = implmode.resolve("high_precision", "SoftmaxV2, LayerNorm")
    assert listed.mode_for("a", "LayerNorm") == "high_precision" and listed.mode_for("a", "Exp") is None  # no ini then
    ignored = implmode.resolve("high_precision_for_all", "LayerNorm")
    assert ignored.mode_for("a", "Exp") == "high_precision" and "ignored" in ignored.notes[0]


def test_precision_file_wins_and_is_read_as_the_fe_reads_it():
    text = ("# comment\nLayerNorm=high_precision\nLayerNorm=keep_fp16\nExp=bogus_mode\n=high_precision\n"
            "[ByNodeName]\n/ln/LayerNorm=keep_fp16\n[ByOpType]\nSigmoid=high_performance\n")
    parsed = implmode.parse_precision_file(text)
    assert parsed.by_type == {"LayerNorm": "high_precision", "Sigmoid": "high_performance"}  # first value wins
    assert parsed.by_name == {"/ln/LayerNorm": "keep_fp16"}
    assert [s.split(":")[0] for s in parsed.skipped] == ["line 4", "line 5"]
    modes = implmode.resolve("high_precision_for_all", None, parsed, "p.ini")
    assert modes.mode_for("/ln/LayerNorm", "LayerNorm") == "keep_fp16"  # by name before by type
    assert modes.mode_for("other", "LayerNorm") == "high_precision" and modes.mode_for("e", "Exp") is None
    assert any("op_select_implmode is ignored" in n for n in modes.notes)


def test_what_atc_refuses():
    with pytest.raises(implmode.ImplModeError, match="must be set at the same time"):
        implmode.check_settings(None, "LayerNorm")
    with pytest.raises(implmode.ImplModeError, match="not one of"):
        implmode.check_settings("enable_float_32_execution", None)  # atc's check lets it by, the FE does not
    implmode.check_settings("high_performance_for_all", "LayerNorm")  # accepted: the list is ignored
