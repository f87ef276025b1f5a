"""Templates: values in a `run` command are shell-quoted, resource limits hold, include/import are
refused, and params may read other templated params."""

from __future__ import annotations

import io
import json

import pytest

import ascendpipe
from ascendpipe.config import template
from ascendpipe.config.template import render
from ascendpipe.errors import UserError


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    return root


def write(ws, text: str):
    path = ws / "p.yaml"
    path.write_text(text)
    return path


def build(ws, text: str, **kw):
    return ascendpipe.build(str(write(ws, text)), quiet=True, stream=io.StringIO(), **kw)


def load_error(ws, text: str, **kw) -> UserError:
    with pytest.raises(UserError) as err:
        ascendpipe.load(str(write(ws, text)), **kw)
    return err.value


HOSTILE = "x; touch PWNED; $(touch PWNED2) `touch PWNED3`"


def test_a_param_in_a_run_command_is_one_shell_word(ws):
    run = build(ws, f"""params: {{msg: {json.dumps(HOSTILE)}}}
stages:
  a:
    kind: run
    cmd: python -c "import sys; open('out.json', 'w').write(repr(sys.argv[1:]))" {{{{ params.msg }}}}
    outs: [out.json]
""")
    assert run["stages"]["a"]["state"] == "ran"
    assert (ws / "out.json").read_text() == repr([HOSTILE])
    assert not any((ws / n).exists() for n in ("PWNED", "PWNED2", "PWNED3"))


def test_set_values_and_variant_values_are_quoted_too(ws):
    text = """stages:
  a:
    kind: run
    cmd: python -c "import sys; open('out-{{ stage.variant }}.json', 'w').write(repr(sys.argv[1:]))" {{ params.v }} {{ params.w }}
    outs: ["out-{{ stage.variant }}.json"]
    matrix: {one: {v: a}}
"""
    build(ws, text, set=[f"stages.a.matrix.one.v={json.dumps(HOSTILE)}", "stages.a.params.w=a b"])
    assert (ws / "out-one.json").read_text() == repr([HOSTILE, "a b"])
    assert not (ws / "PWNED").exists()


def test_raw_and_shjoin(ws):
    run = build(ws, """params: {redirect: "> raw.txt", files: [a b, c]}
stages:
  a:
    kind: run
    cmd: python -c "import sys; print(repr(sys.argv[1:]))" {{ params.files | shjoin }} {{ params.redirect | raw }}
    outs: [raw.txt]
""")
    assert run["stages"]["a"]["state"] == "ran"
    assert (ws / "raw.txt").read_text().strip() == repr(["a b", "c"])


def test_quoting_applies_to_cmd_only(ws):
    pipeline = ascendpipe.load(str(write(ws, """params: {name: "a b"}
stages:
  a: {kind: run, cmd: "echo {{ params.name }} > '{{ params.name }}.txt'", outs: ["{{ params.name }}.txt"]}
""")))
    stage = pipeline.stages["a"]
    assert stage.outs == ["a b.txt"]
    # a value is quoted even inside quotes written around it (which then undo each other): don't quote
    # templates in a command yourself (docs/pipelines.md)
    assert stage.cmd == "echo 'a b' > ''a b'.txt'"


def test_safe_values_are_unchanged(ws):
    pipeline = ascendpipe.load(str(write(ws, """params: {seed: 0, lr: 0.001, name: convert@fp16, path: data/x_1.npy}
stages:
  a: {kind: run, cmd: "run {{ params.seed }} {{ params.lr }} {{ params.name }} {{ params.path }}", outs: [o]}
""")))
    assert pipeline.stages["a"].cmd == "run 0 0.001 convert@fp16 data/x_1.npy"


@pytest.mark.parametrize("text,why", [
    ("{{ range(10**9) | list }}", "Range too big"),
    ("{{ 'a' * 10**12 }}", "repeating a value would make a value of about 1000000000000 characters"),
    ("{{ [1, 2] * 10**9 }}", "repeating a value"),
    ("{{ 7 ** (10**9) }}", "7 ** 1000000000 is too large"),
    ("{{ (10**10000) * (10**10000) }}", "the product is too large"),
    ("{{ 'a'.ljust(10**9) }}", "str.ljust would make a value"),
    ("{{ 'ab'.replace('a', 'x' * 100000) * 1 }}{{ ('a' * 100000).replace('a', 'b' * 100) }}", "str.replace"),
    ("{{ 'a' | center(10**9) }}", "padding would make a value"),
    ("{{ '{:>99999999}'.format(1) }}", "a format width of 100000 or more"),
    ("{{ '%999999999d' % 1 }}", "a format width of 100000 or more"),
    ("{{ '%999999999d' | format(1) }}", "a format width of 100000 or more"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "joining strings with ~ would make a value of about 2097152"),
    ("{% for i in range(3000) %}{{ 'x' * 1000 }}{% endfor %}", "the rendered text would make a value"),
    ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursion too deep"),
    ("{% include 'other.txt' %}", "{% include %} is not allowed"),
    ("{% import 'macros.txt' as m %}", "{% import %} is not allowed"),
    ("{% from 'macros.txt' import m %}", "{% from ... import %} is not allowed"),
    ("{% extends 'base.txt' %}", "{% extends %} is not allowed"),
    ("{{ lipsum(10**9) }}", "'lipsum' is undefined"),
    ("{{ ''.__class__ }}", "not allowed in a pipeline template"),
    ("{{ 1 / 0 }}", "ZeroDivisionError"),
])
def test_template_limits(text, why):
    with pytest.raises(UserError) as err:
        render(text, {"params": {}})
    assert why in err.value.message and err.value.message.startswith("template error: ")


def test_render_time_is_limited(monkeypatch):
    monkeypatch.setattr(template, "MAX_SECONDS", 0.2)
    with pytest.raises(UserError) as err:
        render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {"params": {}})
    assert err.value.message == "template error: rendering took longer than 0.2 s (a loop too large?)"


def test_a_template_error_in_a_pipeline_is_located(ws):
    err = load_error(ws, "stages:\n  a:\n    kind: run\n    cmd: \"{{ 'a' * 10**12 }}\"\n    outs: [o]\n")
    assert (err.location.line, err.location.stage) == (4, "a")


def test_nested_param_templates_are_resolved(ws):
    pipeline = ascendpipe.load(str(write(ws, """params: {root: data, sub: "{{ params.root }}/x", file: "{{ params.sub }}/f.npy"}
stages:
  a: {kind: run, cmd: "echo {{ params.file }}", outs: ["{{ params.sub }}"], params: {mine: "{{ params.file }}!"}}
""")))
    stage = pipeline.stages["a"]
    assert stage.cmd == "echo data/x/f.npy"
    assert stage.outs == ["data/x"]
    assert stage.params["mine"] == "data/x/f.npy!"
    assert stage.params["file"] == "data/x/f.npy" and stage.params["sub"] == "data/x"


def test_a_param_cycle_is_located(ws):
    err = load_error(ws, 'params:\n  a: "{{ params.b }}"\n  b: "{{ params.a }}"\nstages:\n  s: {kind: run, cmd: "echo {{ params.a }}", outs: [o]}\n')
    assert err.message == "template error: params refer to each other in a cycle: a -> b -> a"
    assert err.location.line == 2


def test_a_literal_brace_from_a_param_is_not_rendered_again(ws):
    pipeline = ascendpipe.load(str(write(ws, """params: {a: "{{ '{{' }} x }}", b: "{{ params.a }}"}
stages:
  s: {kind: run, cmd: "echo {{ params.b | raw }}", outs: [o]}
""")))
    assert pipeline.stages["s"].cmd == "echo {{ x }}"
