"""Every error points at its source: the YAML line of the offending value or key, the `--set`
argument, or the overrides file's line. YAML merge keys, names YAML reads as booleans or numbers,
new variants through --set, and YAML 1.1 booleans for string params."""

from __future__ import annotations

import pytest

import ascendpipe
from ascendpipe.errors import UserError


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    (root / "m.onnx").write_bytes(b"")
    return root


def write(ws, text: str):
    path = ws / "p.yaml"
    path.write_text(text)
    return str(path)


def error(ws, text: str, **kw) -> UserError:
    with pytest.raises(UserError) as err:
        ascendpipe.load(write(ws, text), **kw)
    return err.value


CONVERT = "stages:\n  convert:\n    kind: convert\n    model: m.onnx\n    matrix:\n      fp16: {precision_mode: force_fp16}\n"


def test_merge_keys_share_a_stage_body(ws):
    pipeline = ascendpipe.load(write(ws, """stages:
  a: &run
    kind: run
    cmd: "echo {{ params.x }} > {{ params.x }}"
    params: {x: one}
    outs: [one]
  b:
    <<: *run
    params: {x: two}
    outs: [two]
"""))
    assert pipeline.stages["b"].cmd == "echo two > two" and pipeline.stages["b"].outs == ["two"]
    assert pipeline.stages["a"].cmd == "echo one > one"


def test_an_error_in_a_merged_value_points_at_the_anchor(ws):
    err = error(ws, "stages:\n  a: &c\n    kind: convert\n    model: m.onnx\n    params: {precision_mode: fp17}\n"
                    "  b:\n    <<: *c\n    model: m.onnx\n")
    assert err.location.line == 5 and "precision_mode 'fp17'" in err.message


def test_a_merge_of_a_scalar_is_a_located_yaml_error(ws):
    err = error(ws, "params: {n: &n 1}\nstages:\n  a:\n    <<: *n\n    kind: run\n")
    # PyYAML marks the scalar that cannot be merged (the anchor's value)
    assert err.message.startswith("invalid YAML: expected a mapping") and err.location.line == 1


@pytest.mark.parametrize("key,word", [("on", "a boolean"), ("no", "a boolean"), ("1234", "a number"),
                                      ("~", "null"), ("1.5", "a number")])
def test_stage_names_must_be_strings(ws, key, word):
    err = error(ws, f"stages:\n  ok: {{kind: run, cmd: x, outs: [o]}}\n  {key}: {{kind: run, cmd: x, outs: [p]}}\n")
    assert err.message == f"stage name `{key}` is read by YAML as {word}; quote it: '{key}':"
    assert (err.location.line, err.location.column) == (3, 3)


def test_a_param_name_read_as_a_boolean_is_located(ws):
    err = error(ws, "stages:\n  a:\n    kind: run\n    cmd: x\n    outs: [o]\n    params:\n      off: 1\n")
    assert err.message.startswith("param name `off` is read by YAML as a boolean") and err.location.line == 7


def test_unknown_field_is_located_at_the_field(ws):
    err = error(ws, "stages:\n  a:\n    kind: run\n    cmd: x\n    outs: [o]\n    outz: [p]\n")
    assert "unknown field 'outz'" in err.message and (err.location.line, err.location.column) == (6, 5)
    err = error(ws, "stages:\n  c:\n    kind: convert\n    model: m.onnx\n\n    modle: m.onnx\n")
    assert "unknown field 'modle'" in err.message and err.location.line == 6


def test_a_missing_variant_is_located(ws):
    err = error(ws, CONVERT + "  infer:\n    kind: infer\n    model: convert@fp17\n    inputs: m.onnx\n")
    assert err.message == "stage 'convert' has no variant 'fp17'; it has: fp16"
    assert (err.location.line, err.location.stage) == (9, "infer")


def test_a_missing_input_path_is_located_at_the_field(ws):
    err = error(ws, "stages:\n  i:\n    kind: infer\n    model: m.onnx\n    inputs: data/nope.npy\n")
    assert "dep 'data/nope.npy' does not exist and no stage makes it" in err.message
    assert err.location.line == 5


def test_set_errors_are_located_at_the_set_argument(ws):
    err = error(ws, CONVERT, set=["stages.convert.matrix.fp16.precision_mode=fp17"])
    assert str(err.location) == "--set stages.convert.matrix.fp16.precision_mode=fp17: stage 'convert@fp16'"
    assert err.message.startswith("precision_mode 'fp17' is not one of")
    err = error(ws, CONVERT, set=["stages.convert.params.keep_dtype=[a, {b: 1}]"])
    assert err.location.file == "--set stages.convert.params.keep_dtype=[a, {b: 1}]"


def test_a_set_value_that_is_not_yaml_is_located(ws):
    err = error(ws, CONVERT, set=["params.x=[unclosed"])
    assert err.location.file == "--set params.x=[unclosed" and "is not valid YAML" in err.message


def test_overrides_file_errors_are_blamed_on_its_line(ws):
    (ws / "p.overrides").write_text("# written by checkout\n\nstages.convert.matrix.fp16.precision_mode=fp17\n")
    err = error(ws, CONVERT)
    assert (err.location.file, err.location.line) == (str(ws / "p.overrides"), 3)
    assert "precision_mode 'fp17'" in err.message
    # a --set after the file's lines is still blamed on itself
    (ws / "p.overrides").write_text("stages.convert.matrix.fp16.precision_mode=force_fp32\n")
    err = error(ws, CONVERT, set=["stages.convert.matrix.fp16.precision_mode=bad"])
    assert err.location.file == "--set stages.convert.matrix.fp16.precision_mode=bad"


def test_a_new_variant_through_set_is_refused_with_the_close_name(ws):
    err = error(ws, CONVERT, set=["stages.convert.matrix.fp17.precision_mode=force_fp32"])
    assert err.message == ("stage 'convert' has no variant 'fp17' (did you mean 'fp16'?); it has: fp16. To add a "
                           "variant on purpose: --set +stages.convert.matrix.fp17.precision_mode=force_fp32")
    pipeline = ascendpipe.load(write(ws, CONVERT), set=["+stages.convert.matrix.fp17.precision_mode=force_fp32"])
    assert list(pipeline.stages) == ["convert@fp16", "convert@fp17"]
    assert pipeline.stages["convert@fp17"].params["precision_mode"] == "force_fp32"


def test_set_reaches_a_numeric_variant_key(ws):
    text = "stages:\n  a:\n    kind: run\n    cmd: echo {{ params.b }} > o-{{ stage.variant }}\n" \
           "    outs: [\"o-{{ stage.variant }}\"]\n    matrix: {1: {b: 1}, 8: {b: 8}}\n"
    pipeline = ascendpipe.load(write(ws, text), set=["stages.a.matrix.8.b=16"])
    assert pipeline.stages["a@8"].cmd == "echo 16 > o-8" and list(pipeline.stages) == ["a@1", "a@8"]


def test_a_yaml_boolean_for_a_string_param_is_taken_as_written(ws):
    text = "stages:\n  c:\n    kind: compare\n    golden: m.onnx\n    target: m.onnx\n    inputs: m.onnx\n    params: {msit: off}\n"
    assert ascendpipe.load(write(ws, text)).stages["c"].params["msit"] == "off"
    assert ascendpipe.load(write(ws, text), set=["stages.c.params.msit=on"]).stages["c"].params["msit"] == "on"
    err = error(ws, text.replace("msit: off", "msit: yes"))
    assert err.message == "msit 'True' is not one of auto, on, off (YAML 1.1 reads `yes` as a boolean; quote it: 'yes')"
    assert err.location.line == 7
    top = "params: {msit: off}\n" + text.replace("    params: {msit: off}\n", "")
    assert ascendpipe.load(write(ws, top)).stages["c"].params["msit"] == "off"


def test_matrix_values_that_collide_as_strings(ws):
    err = error(ws, "stages:\n  a:\n    kind: run\n    cmd: x\n    outs: [o]\n    matrix:\n      p: [1, \"1\"]\n")
    assert err.message == "matrix values 1 and '1' of 'p' give the same variant name '1'"
    assert err.location.line == 7
    err = error(ws, "stages:\n  a:\n    kind: run\n    cmd: x\n    outs: [o]\n    matrix: {1: {}, \"1\": {}}\n")
    assert "are the same name '1'" in err.message
    err = error(ws, "stages:\n  a:\n    kind: run\n    cmd: x\n    outs: [o]\n    matrix: {a: [x-y, x], b: [z, y-z]}\n")
    assert err.message == "two variants are both named 'x-y-z' (names are joined with '-'); rename one"
