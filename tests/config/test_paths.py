"""The path rules (config/paths.py): what a stage may read, write and delete, decided from names and
``stat`` alone, before anything runs."""

from __future__ import annotations

import os
import socket

import pytest

from ascendpipe.config.paths import PathRules, overlap, special_file, variant_name_problem
from ascendpipe.errors import UserError


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "data").mkdir()
    (root / "data" / "in.txt").write_text("x")
    (root / "pipelines").mkdir()
    (root / "pipelines" / "p.yaml").write_text("stages: {}\n")
    (tmp_path / "victim").mkdir()
    return root


def rules_for(ws, build_dir="build") -> PathRules:
    rules = PathRules(str(ws), protected=[str(ws / "pipelines" / "p.yaml"), str(ws / "pipelines" / "p.overrides")])
    rules.set_build_dir(build_dir)
    return rules


def refused(call) -> str:
    with pytest.raises(UserError) as err:
        call()
    return err.value.message


def test_inside_normalises_and_resolves(ws):
    rules = rules_for(ws)
    assert rules.inside("data/../data/./in.txt") == "data/in.txt"
    assert rules.inside(str(ws / "data")) == "data"  # an absolute path inside is fine
    (ws / "alias").symlink_to("data")
    assert rules.inside("alias/in.txt") == "data/in.txt"
    assert rules.inside(".") == "."


@pytest.mark.parametrize("value", ["..", "../victim/x", "data/../../victim", "/tmp", "/"])
def test_outside_is_refused(ws, value):
    assert "is outside the workspace" in refused(lambda: rules_for(ws).inside(value, "out"))


def test_a_symlink_leading_outside_is_refused(ws):
    (ws / "up").symlink_to("..")
    assert "outside the workspace" in refused(lambda: rules_for(ws).inside("up/victim/x"))


@pytest.mark.parametrize("value", ["", "   ", None, 3])
def test_empty_or_non_string_paths_are_refused(ws, value):
    assert refused(lambda: rules_for(ws).inside(value, "dep")).startswith("expected a dep")


@pytest.mark.parametrize("value,why", [
    ("", "build_dir must be a folder inside the workspace"),
    (".", "is the workspace root"),
    ("./", "is the workspace root"),
    ("../x", "outside the workspace"),
    ("/tmp/elsewhere", "outside the workspace"),
    ("cache", "inside 'cache'"),
    (".ascendpipe/build", "inside '.ascendpipe'"),
    (".git/b", "inside '.git'"),
    ("pipelines", "holds the pipeline file 'pipelines/p.yaml'"),
])
def test_build_dir_rules(ws, value, why):
    assert why in refused(lambda: rules_for(ws, value))


def test_build_dir_is_normalised(ws):
    assert rules_for(ws, "./out/build/").build_dir == "out/build"
    assert rules_for(ws, str(ws / "b")).build_dir == "b"


@pytest.mark.parametrize("out,why", [
    (".", "is the workspace root"),
    (".git", "inside '.git'"),
    (".git/hooks", "inside '.git'"),
    ("cache", "inside 'cache'"),
    ("cache/objects/ab", "inside 'cache'"),
    (".ascendpipe", "inside '.ascendpipe'"),
    (".ascendpipe/ascendpipe.db", "inside '.ascendpipe'"),
    ("build", "is or holds the build root 'build'"),
    ("pipelines", "is or holds 'pipelines/p.yaml'"),
    ("pipelines/p.yaml", "is or holds 'pipelines/p.yaml'"),
    ("pipelines/p.overrides", "is or holds 'pipelines/p.overrides'"),
])
def test_protected_outs(ws, out, why):
    rules = rules_for(ws)
    assert why in refused(lambda: rules.check_out(rules.inside(out), out))


def test_ordinary_outs_pass(ws):
    rules = rules_for(ws)
    for out in ("data/out", "build/convert__fp16", "pipelines/other.txt", "cachex", ".gitignore"):
        rules.check_out(rules.inside(out), out)


def test_an_out_that_is_a_symlink_to_the_root_is_the_root(ws):
    (ws / "root").symlink_to(".")
    rules = rules_for(ws)
    assert "is the workspace root" in refused(lambda: rules.check_out(rules.inside("root"), "root"))


def test_special_files_are_named_without_opening_them(ws, tmp_path):
    os.mkfifo(ws / "fifo")
    (ws / "loop1").symlink_to("loop2")
    (ws / "loop2").symlink_to("loop1")
    (ws / "to_fifo").symlink_to("fifo")
    (ws / "dangling").symlink_to("nowhere")
    server = socket.socket(socket.AF_UNIX)
    sock = tmp_path / "s"  # AF_UNIX paths are short; the socket is linked into the workspace
    server.bind(str(sock))
    try:
        os.link(sock, ws / "sock")
    except OSError:
        (ws / "sock").symlink_to(sock)
    try:
        assert special_file(str(ws / "fifo")) == "a FIFO (named pipe)"
        assert special_file(str(ws / "to_fifo")) == "a FIFO (named pipe)"
        assert special_file(str(ws / "loop1")) == "a symlink loop"
        assert special_file(str(ws / "sock")) == "a socket"
        assert special_file(str(ws / "dangling")) is None  # the existence check reports it
        assert special_file(str(ws / "data")) is None and special_file(str(ws / "data" / "in.txt")) is None
        rules = rules_for(ws)
        assert refused(lambda: rules.check_dep("fifo", "fifo")) == \
            "dep 'fifo' is a FIFO (named pipe); a dep must be a regular file or a folder"
        assert "symlink loop" in refused(lambda: rules.check_dep("loop1", "loop1"))
    finally:
        server.close()


def test_a_device_dep_is_refused(ws):
    try:
        os.mknod(ws / "null", 0o600 | 0o020000, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("creating a device node needs root")
    assert special_file(str(ws / "null")) == "a device"


def test_logs_must_stay_inside_and_be_files(ws, tmp_path):
    (ws / "build").mkdir()
    rules = rules_for(ws)
    rules.check_log("build/a.log")  # absent: fine
    (ws / "build" / "b.log").symlink_to(tmp_path / "victim" / "log")
    assert "leads outside the workspace" in refused(lambda: rules.check_log("build/b.log"))
    os.mkfifo(ws / "build" / "c.log")
    assert "is a FIFO" in refused(lambda: rules.check_log("build/c.log"))
    (ws / "build" / "d.log").mkdir()
    assert "is a folder" in refused(lambda: rules.check_log("build/d.log"))


@pytest.mark.parametrize("name", ["fp16", "fp16_keep", "0.001", "1e-3", "v1.2", "A-b_c", "True", "8"])
def test_safe_variant_names(name):
    assert variant_name_problem(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "a..b", "../v", "x/../../../victim", "a b", "v;touch PWNED;",
                                  "-1", "_x", ".hidden", "a@b", "é", "a/b", "$(id)"])
def test_unsafe_variant_names(name):
    assert "variant names are [A-Za-z0-9][A-Za-z0-9_.-]* without '..'" in variant_name_problem(name)


def test_overlap():
    assert overlap("data", "data") and overlap("data", "data/x") and overlap("data/x", "data")
    assert not overlap("data", "data2") and not overlap("data/x", "data/y")
    assert overlap(".", "anything")
