"""Property-based fuzzing of the pipeline loader and the ``--set`` parser: whatever the input, the
result is a pipeline or one UserError with a location, never another exception."""

from __future__ import annotations

import os

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the fuzz tests need hypothesis (pip install -e '.[test]')")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ascendpipe  # noqa: E402
from ascendpipe.config.overrides import apply_overrides, parse_override  # noqa: E402
from ascendpipe.config.yamlmarks import decode, load_yaml  # noqa: E402
from ascendpipe.errors import UserError  # noqa: E402

# FUZZ_EXAMPLES / FUZZ_SLOW_EXAMPLES raise the counts for a longer hunt (thousands ran clean).
# The suite's examples are the same on every run (derandomized), so a CI run gates on a fixed set;
# FUZZ_RANDOM=1 draws new ones, for a hunt.
FUZZ = settings(deadline=None, database=None, max_examples=int(os.environ.get("FUZZ_EXAMPLES", 200)),
                derandomize=not os.environ.get("FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# whole-pipeline loads build the schema and resolve: fewer examples keep the suite quick
FUZZ_SLOW = settings(FUZZ, max_examples=int(os.environ.get("FUZZ_SLOW_EXAMPLES", 60)))

# pieces of YAML that reach the interesting corners: anchors, aliases, tags, flow and block
# collections, complex keys, quoting, pipeline words, odd characters
FRAGMENTS = st.sampled_from([
    "stages:", "\n", "  ", "    ", "- ", ": ", "a", "b", "x", "kind: run", "kind: convert", "kind: nope",
    "cmd: echo hi", "params:", "matrix:", "model: m.onnx", "backend: ascend", "backend: zz", "{", "}",
    "[", "]", ",", "&x ", "*x", "&y ", "*y", "!!set ", "!!python/object ", "!!binary ", "!!timestamp ",
    "? ", "'", '"', "|", ">", "#", "%YAML 1.1\n", "---\n", "...\n", "{{ params.n }}", "{% if x %}",
    "1", "-1", "0x1f", "1e400", ".nan", "null", "~", "yes", "2020-01-01", "\t", "\x00", "\x07", "\u2028",
    "\ufeff", "é", "𝔘", "\\", "@", "`", "env:", "- HOME", "thresholds:", "cosine: 2", "build_dir: /",
])
YAMLISH = st.lists(FRAGMENTS, max_size=40).map("".join)
TEXT = st.one_of(YAMLISH, st.text(max_size=200))


def assert_located(err: UserError) -> None:
    assert err.message and err.location is not None


@FUZZ
@given(text=TEXT)
def test_load_yaml_returns_data_or_a_user_error(text):
    try:
        load_yaml(text, "fuzz.yaml")
    except UserError as err:
        assert_located(err)
        assert err.location.file == "fuzz.yaml"


@FUZZ
@given(data=st.one_of(st.binary(max_size=200), YAMLISH.map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_decode_and_load_bytes(data):
    try:
        load_yaml(decode(data, "fuzz.yaml"), "fuzz.yaml")
    except UserError as err:
        assert_located(err)


@FUZZ_SLOW
@given(text=st.one_of(YAMLISH, YAMLISH.map(lambda t: "stages:\n  s:\n    kind: run\n    cmd: echo\n" + t)))
def test_whole_pipeline_load_never_raises_anything_else(tmp_path_factory, text):
    ws = tmp_path_factory.mktemp("ws")
    (ws / ".ascendpipe").mkdir()
    path = ws / "pipeline.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        ascendpipe.load(str(path))
    except UserError as err:
        assert_located(err)


KEYS = st.lists(st.sampled_from(["params", "stages", "s", "cmd", "matrix", "backend", "thresholds", "env",
                                 "build_dir", "x", "", " ", "0", "kind"]), min_size=0, max_size=5).map(".".join)
SET_LINES = st.one_of(st.text(max_size=60), st.tuples(KEYS, st.sampled_from(["=", "", "=="]), YAMLISH)
                      .map(lambda t: "".join(t)))
BASE = {"stages": {"s": {"kind": "run", "cmd": "echo"}}, "params": {"n": 1}}


@FUZZ
@given(lines=st.lists(SET_LINES, max_size=3))
def test_set_parser_and_overlay_never_raise_anything_else(lines):
    for line in lines:
        try:
            parse_override(line)
        except UserError as err:
            assert_located(err)
    try:
        apply_overrides(BASE, lines)
    except UserError as err:
        assert_located(err)


@FUZZ_SLOW
@given(lines=st.lists(SET_LINES, max_size=2))
def test_set_lines_on_a_real_pipeline(tmp_path_factory, lines):
    ws = tmp_path_factory.mktemp("ws")
    (ws / ".ascendpipe").mkdir()
    (ws / "pipeline.yaml").write_text("params:\n  n: 1\nstages:\n  s:\n    kind: run\n    cmd: echo {{ params.n }}\n")
    try:
        ascendpipe.load(str(ws / "pipeline.yaml"), set=lines)
    except UserError as err:
        assert_located(err)
