"""A corpus of malformed and hostile pipelines. Each one, built with `ascendpipe build`, exits 2
with one located line on stderr and no traceback, and leaves the workspace (build/, cache/, the
database, the pipeline) and the files outside it byte-identical.

The workspace was built once before (a real run stage), so build/, cache/ and the database hold
something to lose. Each case gets a fresh copy of it beside a `victim/` folder outside it, and the
special files a hostile pipeline points at (a FIFO, a symlink loop, a symlink to the parent).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path

import pytest

import ascendpipe
from ascendpipe.cli.main import main
from ascendpipe.config import template


def run(outs="[o]", deps=None, cmd="echo hi > o", extra=""):
    """A one-stage run pipeline: `outs` on line 5, `deps` on line 6, `extra` from line 6 or 7."""
    text = f"stages:\n  a:\n    kind: run\n    cmd: {cmd}\n    outs: {outs}\n"
    if deps is not None:
        text += f"    deps: {deps}\n"
    return text + extra


CONVERT = "stages:\n  convert:\n    kind: convert\n    model: m.onnx\n    matrix:\n      fp16: {precision_mode: force_fp16}\n"
COMPARE = "stages:\n  c:\n    kind: compare\n    golden: m.onnx\n    target: m.onnx\n    inputs: m.onnx\n"
TEMPLATE = "stages:\n  a:\n    kind: run\n    cmd: \"{}\"\n    outs: [o]\n"  # the template on line 4


def tpl(text: str) -> str:
    return TEMPLATE.format(text.replace('"', '\\"'))


# (id, pipeline text, extra build args, where the error is (prefix of the location), words of the message)
CASES = [
    # -- outs that would destroy the workspace (outs are deleted before a run stage runs)
    ("out-root", run("[.]"), (), "p.yaml:5:", "out '.' is the workspace root"),
    ("out-root-slash", run("[./]"), (), "p.yaml:5:", "is the workspace root"),
    ("out-root-dotdot", run("[data/..]"), (), "p.yaml:5:", "is the workspace root"),
    ("out-root-symlink", run("[rootlink]"), (), "p.yaml:5:", "is the workspace root"),
    ("out-root-absolute", run("[WS]"), (), "p.yaml:5:", "is the workspace root"),
    ("out-git", run("[.git]"), (), "p.yaml:5:", "inside '.git'"),
    ("out-git-inner", run("[.git/HEAD]"), (), "p.yaml:5:", "inside '.git'"),
    ("out-cache", run("[cache]"), (), "p.yaml:5:", "inside 'cache'"),
    ("out-cache-objects", run("[cache/objects]"), (), "p.yaml:5:", "inside 'cache'"),
    ("out-state", run("[.ascendpipe]"), (), "p.yaml:5:", "inside '.ascendpipe'"),
    ("out-database", run("[.ascendpipe/ascendpipe.db]"), (), "p.yaml:5:", "inside '.ascendpipe'"),
    ("out-build-root", run("[build]"), (), "p.yaml:5:", "is or holds the build root 'build'"),
    ("out-pipeline", run("[p.yaml]"), (), "p.yaml:5:", "is or holds 'p.yaml', a pipeline or overrides file"),
    ("out-overrides", run("[p.overrides]"), (), "p.yaml:5:", "is or holds 'p.overrides'"),
    ("out-own-dep", run("[data/in.txt]", "[data/in.txt]"), (), "p.yaml:5:", "out 'data/in.txt' is the stage's own dep"),
    ("out-holds-dep", run("[data]", "[data/in.txt]"), (), "p.yaml:5:", "out 'data' holds the stage's own dep"),
    ("out-inside-dep", run("[data/new]", "[data]"), (), "p.yaml:5:", "out 'data/new' is inside the stage's own dep"),
    ("metrics-in-state", run(extra="    metrics: .ascendpipe/m.json\n"), (), "p.yaml:6:", "inside '.ascendpipe'"),
    ("out-templated-root", "params: {o: .}\n" + run('["{{ params.o }}"]').replace("stages:", "stages:", 1),
     (), "p.yaml:6:", "is the workspace root"),
    # -- escapes: build_dir, outs, deps, logs, variant folders outside the workspace
    ("build-dir-parent", "build_dir: ../x\n" + run(), (), "p.yaml:1:", "build_dir '../x' is outside the workspace"),
    ("build-dir-absolute", "build_dir: /tmp/ascendpipe-hostile\n" + run(), (), "p.yaml:1:", "is outside the workspace"),
    ("build-dir-empty", "build_dir: ''\n" + run(), (), "p.yaml:1:", "build_dir must be a folder inside the workspace"),
    ("build-dir-root", "build_dir: .\n" + run(), (), "p.yaml:1:", "is the workspace root"),
    ("build-dir-cache", "build_dir: cache\n" + run(), (), "p.yaml:1:", "inside 'cache'"),
    ("build-dir-state", "build_dir: .ascendpipe/b\n" + run(), (), "p.yaml:1:", "inside '.ascendpipe'"),
    ("build-dir-symlink", "build_dir: up/victim\n" + run(), (), "p.yaml:1:", "is outside the workspace"),
    ("build-dir-set-absolute", run(), ("--set", "build_dir=/tmp/x"), "--set build_dir=/tmp/x", "is outside the workspace"),
    ("build-dir-set-parent", run(), ("--set", "build_dir=.."), "--set build_dir=..", "is outside the workspace"),
    ("build-dir-not-string", "build_dir: [a]\n" + run(), (), "p.yaml:1:", "build_dir: expected string"),
    ("out-parent", run("[../victim/file.txt]"), (), "p.yaml:5:", "is outside the workspace"),
    ("out-absolute", run("[VICTIM/file.txt]"), (), "p.yaml:5:", "is outside the workspace"),
    ("out-through-symlink", run("[up/victim/file.txt]"), (), "p.yaml:5:", "is outside the workspace"),
    ("dep-parent", run("[o]", "[../victim/file.txt]"), (), "p.yaml:6:", "dep '../victim/file.txt' is outside"),
    ("metrics-parent", run(extra="    metrics: ../victim/m.json\n"), (), "p.yaml:6:", "metrics file '../victim/m.json' is outside"),
    ("out-from-list-param", "params: {p: ../victim/x}\n" + run('["out/../{{ params.p }}"]'), (), "p.yaml:6:", "is outside the workspace"),
    ("log-symlink-outside", run(), (), "p.yaml:2:", "the stage's log 'build/a.log' leads outside the workspace"),
    ("variant-folder-symlink", CONVERT, (), "p.yaml:2:", "stage folder 'build/convert__fp16' is outside the workspace"),
    ("variant-traversal", run(extra="    matrix: {\"x/../../../victim\": {}}\n"), (), "p.yaml:6:",
     "variant name 'x/../../../victim' is not allowed"),
    ("variant-dotdot", run(extra="    matrix: {\"..\": {}}\n"), (), "p.yaml:6:", "variant name '..' is not allowed"),
    ("variant-hidden", run(extra="    matrix: {.hidden: {}}\n"), (), "p.yaml:6:", "variant name '.hidden' is not allowed"),
    ("variant-shell", run(extra="    matrix: {\"v;touch PWNED;\": {}}\n"), (), "p.yaml:6:", "variant name 'v;touch PWNED;'"),
    ("variant-product-traversal", run(extra="    matrix: {p: [ok, ../../victim]}\n"), (), "p.yaml:6:",
     "variant name '../../victim' is not allowed"),
    ("variant-product-space", run(extra="    matrix: {p: [a b]}\n"), (), "p.yaml:6:", "variant name 'a b'"),
    ("variant-product-subst", run(extra="    matrix: {p: [\"$(touch PWNED)\"]}\n"), (), "p.yaml:6:", "is not allowed"),
    ("variant-product-mapping", run(extra="    matrix: {p: [{a: 1}]}\n"), (), "p.yaml:6:", "must be a number or a short string"),
    ("variant-added-through-set", run(extra="    matrix: {ok: {}}\n"), ("--set", "+stages.a.matrix.$(id).p=1"),
     "--set +stages.a.matrix.$(id).p=1", "variant name '$(id)' is not allowed"),
    # -- values that collide, and --set that would add a variant by a typo
    ("matrix-collide-int-str", run(extra="    matrix: {p: [1, \"1\"]}\n"), (), "p.yaml:6:", "give the same variant name '1'"),
    ("matrix-collide-bool-str", run(extra="    matrix: {p: [true, \"True\"]}\n"), (), "p.yaml:6:", "same variant name 'True'"),
    ("matrix-collide-keys", run(extra="    matrix: {1: {}, \"1\": {}}\n"), (), "p.yaml:6:", "are the same name '1'"),
    ("matrix-collide-joined", run(extra="    matrix: {a: [x-y, x], b: [z, y-z]}\n"), (), "p.yaml:6:",
     "two variants are both named 'x-y-z'"),
    ("set-typo-variant", CONVERT, ("--set", "stages.convert.matrix.fp17.precision_mode=force_fp32"),
     "--set stages.convert.matrix.fp17.precision_mode=force_fp32", "has no variant 'fp17' (did you mean 'fp16'?)"),
    # -- what Linux would refuse to exec (E2BIG) when the stage starts
    ("cmd-too-long", tpl("echo {{ 'x' * 200000 }}"), (), "p.yaml:4:", "the command is 200005 bytes once rendered"),
    ("params-too-long", run(extra="    params: {blob: \"{{ 'x' * 140000 }}\"}\n"), (), "p.yaml:6:",
     "an environment value is at most 131071 bytes"),
    # -- templates: resource limits, include/import, cycles
    ("tpl-range", tpl("{{ range(10**9) | list }}"), (), "p.yaml:4:", "Range too big"),
    ("tpl-repeat", tpl("{{ 'a' * 10**12 }}"), (), "p.yaml:4:", "repeating a value"),
    ("tpl-power", tpl("{{ 7 ** (10**9) }}"), (), "p.yaml:4:", "7 ** 1000000000 is too large"),
    ("tpl-ljust", tpl("{{ 'a'.ljust(10**10) }}"), (), "p.yaml:4:", "str.ljust"),
    ("tpl-center", tpl("{{ 'a' | center(10**10) }}"), (), "p.yaml:4:", "padding"),
    ("tpl-format-width", tpl("{{ '{:>999999999}'.format(1) }}"), (), "p.yaml:4:", "format width"),
    ("tpl-doubling", tpl("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
     (), "p.yaml:4:", "joining strings with ~"),
    ("tpl-output", tpl("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"), (), "p.yaml:4:", "the rendered text"),
    ("tpl-time", tpl("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), (),
     "p.yaml:4:", "rendering took longer than"),
    ("tpl-recursion", tpl("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"), (), "p.yaml:4:", "recursion too deep"),
    ("tpl-include", tpl("{% include '/etc/passwd' %}"), (), "p.yaml:4:", "{% include %} is not allowed"),
    ("tpl-import", tpl("{% import 'x' as y %}"), (), "p.yaml:4:", "{% import %} is not allowed"),
    ("tpl-extends", tpl("{% extends 'x' %}"), (), "p.yaml:4:", "{% extends %} is not allowed"),
    ("tpl-internals", tpl("{{ cycler.__init__.__globals__ }}"), (), "p.yaml:4:", "not allowed in a pipeline template"),
    ("tpl-env-not-allowed", tpl("{{ env.HOME }}"), (), "p.yaml:4:", "env.HOME is not allow-listed"),
    ("tpl-undefined", tpl("{{ params.nope }}"), (), "p.yaml:4:", "template error"),
    ("tpl-param-cycle", "params: {a: \"{{ params.b }}\", b: \"{{ params.a }}\"}\n" + tpl("{{ params.a }}"), (),
     "p.yaml:1:", "params refer to each other in a cycle: a -> b -> a"),
    ("tpl-syntax", tpl("{{ params.a "), (), "p.yaml:4:", "template error"),
    # -- names YAML reads as something else than a string
    ("stage-on", "stages:\n  on: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:2:3", "stage name `on` is read by YAML as a boolean"),
    ("stage-int", "stages:\n  1234: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:2:3", "stage name `1234` is read by YAML as a number"),
    ("stage-null", "stages:\n  ~: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:2:3", "stage name `~` is read by YAML as null"),
    ("stage-field-yes", run(extra="    yes: 1\n"), (), "p.yaml:6:5", "field name `yes` is read by YAML as a boolean"),
    ("param-name-off", "params: {off: 1}\n" + run(), (), "p.yaml:1:", "param name `off` is read by YAML as a boolean"),
    ("matrix-key-bool", run(extra="    matrix: {yes: {}}\n"), (), "p.yaml:6:", "variant name `yes` is read by YAML as a boolean"),
    ("stage-dunder", "stages:\n  a__b: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:2:3", "stage name 'a__b' is not allowed"),
    ("stage-at", "stages:\n  a@b: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:2:3", "stage name 'a@b' is not allowed"),
    ("stage-slash", "stages:\n  ../x: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:2:3", "stage name '../x' is not allowed"),
    # -- deps that are not files or folders (never opened)
    ("dep-fifo", run("[o]", "[fifo]"), (), "p.yaml:6:", "dep 'fifo' is a FIFO (named pipe)"),
    ("dep-fifo-symlink", run("[o]", "[to_fifo]"), (), "p.yaml:6:", "is a FIFO"),
    ("dep-loop", run("[o]", "[loop1]"), (), "p.yaml:6:", "dep 'loop1' is a symlink loop"),
    ("dep-device", run("[o]", "[/dev/zero]"), (), "p.yaml:6:", "is outside the workspace"),
    ("input-fifo", "stages:\n  i:\n    kind: infer\n    model: m.onnx\n    inputs: fifo\n", (), "p.yaml:5:", "is a FIFO"),
    ("dep-dangling", run("[o]", "[dangling]"), (), "p.yaml:6:", "does not exist and no stage makes it"),
    # -- precise locations
    ("missing-variant", CONVERT + "  infer:\n    kind: infer\n    model: convert@fp17\n    inputs: m.onnx\n", (),
     "p.yaml:9:", "stage 'convert' has no variant 'fp17'; it has: fp16"),
    ("unknown-field", run(extra="    outz: [x]\n"), (), "p.yaml:6:5", "unknown field 'outz'"),
    ("unknown-field-kind", "stages:\n  i:\n    kind: infer\n    model: m.onnx\n    inputz: m.onnx\n", (), "p.yaml:5:5",
     "unknown field 'inputz'"),
    ("unknown-top-field", "stagez:\n  a: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:1:1", "unknown field 'stagez'"),
    ("set-new-axis", run(extra="    matrix: {p: [1, 2]}\n"), ("--set", "stages.a.matrix.q=[3]"), "--set stages.a.matrix.q=[3]",
     "stage 'a' has no matrix param 'q'; it has: p. To add one (it adds variants) on purpose: --set +stages.a.matrix.q=[3]"),
    ("missing-inputs-path", "stages:\n  i:\n    kind: infer\n    model: m.onnx\n    inputs: data/nope.npy\n", (),
     "p.yaml:5:", "dep 'data/nope.npy' does not exist"),
    ("set-bad-value", CONVERT, ("--set", "stages.convert.matrix.fp16.precision_mode=fp17"),
     "--set stages.convert.matrix.fp16.precision_mode=fp17", "precision_mode 'fp17' is not one of"),
    ("set-not-yaml", CONVERT, ("--set", "params.x=[unclosed"), "--set params.x=[unclosed", "is not valid YAML"),
    ("set-unknown-stage", CONVERT, ("--set", "stages.convrt.params.x=1"), "--set stages.convrt.params.x=1",
     "unknown stage 'convrt' (did you mean 'convert'?)"),
    ("overrides-file-value", CONVERT, (), "p.overrides:2", "precision_mode 'fp17' is not one of"),
    ("overrides-file-unknown-stage", CONVERT, (), "p.overrides:1", "unknown stage 'nope'"),
    ("overrides-file-fifo", CONVERT, (), "p.overrides", "the overrides file p.overrides is a FIFO (named pipe)"),
    ("yaml-bool-for-string", COMPARE + "    params: {msit: yes}\n", (), "p.yaml:7:",
     "(YAML 1.1 reads `yes` as a boolean; quote it: 'yes')"),
    ("merge-scalar", "params: {n: &n 1}\nstages:\n  a:\n    <<: *n\n    kind: run\n", (), "p.yaml:1:", "invalid YAML"),
    ("two-writers", run() + "  b: {kind: run, cmd: x, outs: [o]}\n", (), "p.yaml:6:", "'o' is written by both 'a' and 'b'"),
    ("out-holds-other-out", run("[data/out/x]") + "  b: {kind: run, cmd: x, outs: [data/out]}\n", (), "p.yaml:6:",
     "'data/out' is written by both 'a' and 'b'"),
    ("cycle", run("[o]", "[q]") + "  b: {kind: run, cmd: x, outs: [q], deps: [o]}\n", (), "p.yaml:2:", "form a cycle"),
]

OVERRIDES = {
    "overrides-file-value": "# from checkout\nstages.convert.matrix.fp16.precision_mode=fp17\n",
    "overrides-file-unknown-stage": "stages.nope.params.x=1\n",
}


def test_the_corpus_is_large_and_ids_are_unique():
    assert len(CASES) >= 60
    assert len({c[0] for c in CASES}) == len(CASES)


def snapshot(root: Path) -> dict:
    """Every entry under ``root``: content hash of files, target of symlinks, kind of the rest."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                out[rel] = ("dir", st.st_mode)
            elif os.path.isfile(path):
                out[rel] = ("file", st.st_mode, hashlib.sha256(Path(path).read_bytes()).hexdigest())
            else:
                out[rel] = ("special", st.st_mode)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A workspace with a real build behind it: build/, cache/ and the database hold something."""
    root = tmp_path_factory.mktemp("hostile") / "base"
    ws = root / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "data").mkdir()
    (ws / "data" / "in.txt").write_text("input\n")
    (ws / "m.onnx").write_bytes(b"not really onnx")
    (ws / "base.yaml").write_text("stages:\n  ok:\n    kind: run\n    cmd: mkdir -p data/out && cp data/in.txt data/out/x.txt\n"
                                  "    deps: [data/in.txt]\n    outs: [data/out]\n")
    run_record = ascendpipe.build(str(ws / "base.yaml"), quiet=True, stream=io.StringIO())
    assert run_record["stages"]["ok"]["state"] == "ran"
    assert any((ws / "cache").rglob("*")) and (ws / ".ascendpipe" / "ascendpipe.db").exists()
    (root / "victim").mkdir()
    (root / "victim" / "file.txt").write_text("must survive\n")
    return root


def prepare(base: Path, dest: Path, case_id: str) -> Path:
    shutil.copytree(base, dest, symlinks=True)
    ws = dest / "ws"
    # special files are made per copy (copying a FIFO would open it)
    os.mkfifo(ws / "fifo")
    (ws / "to_fifo").symlink_to("fifo")
    (ws / "loop1").symlink_to("loop2")
    (ws / "loop2").symlink_to("loop1")
    (ws / "up").symlink_to("..")
    (ws / "rootlink").symlink_to(".")
    (ws / "dangling").symlink_to("nowhere")
    if case_id == "log-symlink-outside":
        (ws / "build").mkdir(exist_ok=True)
        (ws / "build" / "a.log").symlink_to(dest / "victim" / "file.txt")
    if case_id == "variant-folder-symlink":
        (ws / "build").mkdir(exist_ok=True)
        (ws / "build" / "convert__fp16").symlink_to(dest / "victim")
    if case_id in OVERRIDES:
        (ws / "p.overrides").write_text(OVERRIDES[case_id])
    if case_id == "overrides-file-fifo":
        os.mkfifo(ws / "p.overrides")
    return ws


@pytest.mark.parametrize("case_id,text,args,where,words", CASES, ids=[c[0] for c in CASES])
def test_hostile_pipeline(built, tmp_path, monkeypatch, capsys, case_id, text, args, where, words):
    if case_id == "tpl-time":
        monkeypatch.setattr(template, "MAX_SECONDS", 0.5)
    root = tmp_path / "case"
    ws = prepare(built, root, case_id)
    text = text.replace("VICTIM", str(root / "victim")).replace("[WS]", f"[{ws}]")
    (ws / "p.yaml").write_text(text)
    before = snapshot(root)
    monkeypatch.chdir(ws)
    capsys.readouterr()
    code = main(["build", "p.yaml", *args])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if not line.startswith("note: the --set lines of")]
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err
    line = lines[0]
    assert line.startswith("ascendpipe: error: " + where), line
    assert words in line, line
    assert snapshot(root) == before
    assert not list(root.rglob("PWNED*"))


def test_outs_dot_through_the_real_command_line(built, tmp_path):
    """The case that used to delete the whole workspace and exit 0, as a user runs it."""
    import subprocess
    import sys

    root = tmp_path / "case"
    ws = prepare(built, root, "out-root")
    (ws / "p.yaml").write_text(run("[.]", cmd="echo hi > marker"))
    before = snapshot(root)
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "p.yaml"], cwd=ws, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "ascendpipe: error: p.yaml:5:12: stage 'a': out '.' is the workspace root: outs are deleted before a stage runs"]
    assert snapshot(root) == before
