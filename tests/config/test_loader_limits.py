"""Hostile or broken pipeline files each give one located UserError, never a hang or a traceback."""

from __future__ import annotations

import pytest

import ascendpipe
from ascendpipe.config import yamlmarks
from ascendpipe.config.overrides import parse_override
from ascendpipe.errors import UserError


@pytest.fixture
def ws(tmp_path):
    (tmp_path / ".ascendpipe").mkdir()
    return tmp_path


def load_error(ws, data: bytes) -> UserError:
    path = ws / "pipeline.yaml"
    path.write_bytes(data)
    with pytest.raises(UserError) as err:
        ascendpipe.load(str(path))
    assert err.value.location.file == str(path)
    return err.value


def test_recursive_alias_is_located_at_the_alias(ws):
    err = load_error(ws, b"stages:\n  a:\n    kind: run\n    params: &x\n      n: 1\n      self: *x\n")
    assert "alias *x is inside the value &x names" in err.message
    assert (err.location.line, err.location.column) == (6, 13)


def test_recursive_alias_in_a_sequence(ws):
    err = load_error(ws, b"stages: {}\nparams:\n  l: &s [1, *s]\n")
    assert "alias *s" in err.message and err.location.line == 3


def test_alias_bomb_is_refused_where_it_explodes(ws):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    err = load_error(ws, ("\n".join(lines) + "\nstages: {}\n").encode())
    assert "expands to more than 200000 values" in err.message
    # 10 + 110 + 1110 + 11110 + 111110 > 200000 happens inside a5's line
    assert err.location.line == 6


def test_deep_nesting_is_refused_at_the_level_past_the_limit(ws):
    depth = yamlmarks.MAX_DEPTH + 10
    err = load_error(ws, b"stages: {}\nparams:\n  x: " + b"[" * depth + b"]" * depth + b"\n")
    assert f"nesting deeper than {yamlmarks.MAX_DEPTH} levels" in err.message
    # the mapping and params' value are two levels; the 63rd '[' (column 6 + 62) is level 65
    assert (err.location.line, err.location.column) == (3, 6 + yamlmarks.MAX_DEPTH - 2)


def test_deep_block_nesting_is_refused_too(ws):
    text = "stages: {}\nparams:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(100)) + "  " * 101 + "v: 1\n"
    err = load_error(ws, text.encode())
    assert f"nesting deeper than {yamlmarks.MAX_DEPTH} levels" in err.message
    # level 1 is the document, level 2 starts at k0 (line 3): level 65 starts on line 66
    assert err.location.line == yamlmarks.MAX_DEPTH + 2


def test_huge_document_is_refused_before_parsing(ws, monkeypatch):
    monkeypatch.setattr(yamlmarks, "MAX_BYTES", 1000)
    err = load_error(ws, b"stages: {}\n" + b"# padding\n" * 200)
    assert err.message == "the file is 2011 bytes; a pipeline file is at most 1000 bytes (keep data in files the stages read)"
    # 11 bytes of 'stages: {}', then 10-byte lines: byte 1000 is on line 100
    assert err.location.line == 100


def test_non_utf8_bytes_are_located_at_the_bad_byte(ws):
    err = load_error(ws, b"stages:\n  a:\n    kind: run\n    cmd: echo caf\xe9\n")
    assert err.message == "byte 0xe9 is not UTF-8: save the file as UTF-8"
    assert (err.location.line, err.location.column) == (4, 18)


def test_a_control_character_is_located(ws):
    err = load_error(ws, b"stages: {}\nparams:\n  x: a\x07b\n")
    assert err.message.startswith("invalid YAML")
    assert err.location.line == 3


def test_a_bom_is_accepted(ws):
    (ws / "pipeline.yaml").write_bytes(b"\xef\xbb\xbfstages:\n  a:\n    kind: run\n    cmd: echo hi\n")
    assert list(ascendpipe.load(str(ws / "pipeline.yaml")).stages) == ["a"]


def test_unhashable_and_odd_keys_are_located(ws):
    err = load_error(ws, b"stages: {}\nparams:\n  ? !!set {a, b}\n  : 1\n")
    assert "mapping keys must be plain scalars, not set" in err.message and err.location.line == 3


def test_set_values_go_through_the_same_limits():
    with pytest.raises(UserError, match="alias \\*x is inside"):
        parse_override("params.x=&x [1, *x]")
    with pytest.raises(UserError, match="nesting deeper"):
        parse_override("params.x=" + "[" * 100 + "]" * 100)
    with pytest.raises(UserError, match="dotted KEY"):
        parse_override("params..x=1")
    assert parse_override("params.x=&a [1, *a]".replace("*a", "2")) == (["params", "x"], [1, 2])
    assert parse_override("stages.convert.params.keep_dtype=[/a, /b]") == (
        ["stages", "convert", "params", "keep_dtype"], ["/a", "/b"])
