"""Every failure is a failure: errors outside a stage's own command (E2BIG, a full disk or a
read-only folder while storing, signals, kills) end as `failed` stages and a `failed` /
`interrupted` / `crashed` run, never as `skipped` and `done`; the next build recovers."""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from tests.engine.conftest import CHAIN
from tests.engine.test_robustness import SLOW, SLOW_PY, _spawn_build, _wait_for, kill_mid_stage

import ascendpipe


def _cli(ws, *args):
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=ws.root, capture_output=True, text=True)


def test_a_command_over_the_os_limit_is_refused_before_it_runs(ws):
    # 200 kB in one argument: over Linux's 128 KiB per-string limit, refused when the pipeline resolves
    ws.pipeline("stages:\n  big:\n    kind: run\n    cmd: echo " + "x" * 200_000 + " > data/out.txt\n    outs: [data/out.txt]\n")
    proc = _cli(ws, "build", "pipeline.yaml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "pipeline.yaml:4:" in proc.stderr and "MAX_ARG_STRLEN" in proc.stderr
    assert not (ws.root / "data" / "out.txt").exists()


def test_an_exec_refused_by_the_os_fails_the_stage_and_the_run(ws, monkeypatch):
    # what passes the per-string check can still meet E2BIG (arguments and environment together over
    # ARG_MAX): the stage fails with the reason, never `skipped` with the run `done`
    def refuse(*args, **kw):
        raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))

    ws.pipeline("stages:\n  big:\n    kind: run\n    cmd: echo hi > data/out.txt\n    outs: [data/out.txt]\n")
    monkeypatch.setattr(subprocess, "run", refuse)  # the run kind's /bin/sh -c (imported where it runs)
    run = ws.build()
    assert run["state"] == "failed"
    assert run["stages"]["big"]["state"] == "failed"
    assert "too long for the operating system" in run["stages"]["big"]["error"]
    monkeypatch.undo()
    assert ws.states(ws.build()) == {"big": "ran"}


def _full_disk(*args, **kw):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_while_storing_outputs_fails_the_stage_then_the_next_build_recovers(ws, monkeypatch):
    from ascendpipe.store.objects import ObjectStore

    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    monkeypatch.setattr(ObjectStore, "put_file", _full_disk)  # fault injection: every object write
    run = ws.build()
    assert run["state"] == "failed"
    assert ws.states(run) == {"prepare": "failed", "train": "skipped", "report": "skipped"}
    error = run["stages"]["prepare"]["error"]
    assert error.startswith("no space left on the device while storing outputs (writing ")
    assert os.path.join(str(ws.root), "cache", "objects") in error and " free there)" in error
    # nothing half-recorded: the stage has no built state, so status calls it never built
    assert ascendpipe.status(str(ws.root / "pipeline.yaml"))["stages"]["prepare"]["reasons"] == ["never built"]
    monkeypatch.undo()
    ws.ran()
    again = ws.build()
    assert again["state"] == "done"
    assert ws.states(again) == {"prepare": "ran", "train": "ran", "report": "ran"}


def test_a_full_cache_while_recording_names_the_cache_not_the_database(ws, monkeypatch):
    """A run entry written to a full cache/ (issue 42): the error names cache/runs, where space is
    short, not .ascendpipe/ascendpipe.db (an OSError from a write names no file of its own)."""
    from ascendpipe.store import runcache

    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    monkeypatch.setattr(runcache, "write_bytes_atomic", _full_disk)
    run = ws.build()
    error = run["stages"]["prepare"]["error"]
    assert error.startswith("no space left on the device while recording (writing "), error
    assert os.path.join(str(ws.root), "cache", "runs") in error and "ascendpipe.db" not in error, error


def test_a_read_only_cache_fails_the_stage_with_the_path(ws, monkeypatch):
    from ascendpipe import fsutil

    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)

    def read_only(src, dst):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dst))

    monkeypatch.setattr("ascendpipe.store.objects.copy_atomic", read_only)
    run = ws.build()
    assert run["state"] == "failed"
    error = run["stages"]["prepare"]["error"]
    assert "cache/objects/" in error and "read-only file system" in error
    monkeypatch.setattr("ascendpipe.store.objects.copy_atomic", fsutil.copy_atomic)
    assert ws.build()["state"] == "done"


def test_a_database_that_refuses_the_record_fails_the_stage_not_the_process(ws, monkeypatch):
    from ascendpipe.store.db import Database

    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)

    def full(self, *a, **kw):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Database, "record_stage", full)
    run = ws.build()
    assert run["state"] == "failed"
    assert run["stages"]["prepare"]["state"] == "failed"
    assert run["stages"]["prepare"]["error"].startswith("no space left on the device while recording (writing ")
    assert "ascendpipe.db" in run["stages"]["prepare"]["error"]


def test_an_unreadable_cache_object_reruns_the_stage(ws, monkeypatch):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    first = ws.build()
    ws.build(set=["stages.train.params.lr=0.7"])
    digest = first["stages"]["train"]["outputs"]["data/model.txt"]
    from ascendpipe.store import objects

    real = objects.hash_file

    def unreadable(path):
        if path.endswith(digest[2:]):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(objects, "hash_file", unreadable)
    ws.ran()
    run = ws.build()
    # the restore fails on the object: a failure with the object's path, not a silent skip
    assert run["stages"]["train"]["state"] == "failed"
    assert "permission denied on " in run["stages"]["train"]["error"] and digest[2:] in run["stages"]["train"]["error"]
    assert run["state"] == "failed"


def _interrupt(ws, sig, group: bool):
    ws.pipeline(SLOW)
    ws.write("slow.py", SLOW_PY)
    proc = _spawn_build(ws)
    _wait_for(ws.root / "started.flag", proc)
    if group:
        os.killpg(proc.pid, sig)  # ^C at a terminal signals the whole foreground group
    else:
        os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


@pytest.mark.parametrize("sig, group, code", [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)])
def test_an_interrupted_build_is_recorded_interrupted_with_the_stage_it_stopped(ws, sig, group, code):
    rc, out, err = _interrupt(ws, sig, group)
    name = signal.Signals(sig).name
    assert rc == code, (out, err)
    assert f"interrupted by {name}" in err
    run = ascendpipe.show("latest", workspace=str(ws.root))
    assert run["state"] == "interrupted"
    assert run["stages"]["first"]["state"] == "ran"
    assert run["stages"]["slow"]["state"] == "failed"
    assert run["stages"]["slow"]["error"] == f"interrupted by {name}"
    # the clean rebuild reruns only the interrupted stage
    (ws.root / "finish.flag").write_text("")
    ws.ran()
    again = ws.build()
    assert ws.states(again) == {"first": "fresh", "slow": "ran"}
    assert again["state"] == "done"
    assert (ws.root / "data/slow.txt").read_text() == "partial complete"


def test_a_killed_build_is_recorded_crashed_at_the_next_build(ws):
    kill_mid_stage(ws)
    from ascendpipe.store.db import Database

    db = Database(str(ws.root / ".ascendpipe" / "ascendpipe.db"))
    killed = db.runs()[0]
    db.close()
    assert killed["state"] == "running"  # as the kill left it
    (ws.root / "finish.flag").write_text("")
    again = ws.build()
    assert again["state"] == "done" and again["id"] == killed["id"] + 1
    assert ascendpipe.show(killed["id"], workspace=str(ws.root))["state"] == "crashed"


def test_runs_calls_a_killed_build_crashed_but_not_a_running_one(ws):
    ws.pipeline(SLOW)
    ws.write("slow.py", SLOW_PY)
    proc = _spawn_build(ws)
    _wait_for(ws.root / "started.flag", proc)
    assert ascendpipe.runs(str(ws.root))[0]["state"] == "running"  # its build holds the lock
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    listed = _cli(ws, "runs")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[2].split()[4] == "crashed"
    assert ascendpipe.show("latest", workspace=str(ws.root))["state"] == "crashed"


PARALLEL = """\
stages:
  a: {kind: run, cmd: "sleep 29.71 && echo a > data/a.txt", outs: [data/a.txt]}
  b: {kind: run, cmd: "touch started.flag && sleep 29.71 && echo b > data/b.txt", outs: [data/b.txt]}
"""


def test_sigterm_with_parallel_stages_stops_every_command_and_records_each(ws):
    import time

    ws.pipeline(PARALLEL)
    proc = _spawn_build(ws, "-j", "2")
    _wait_for(ws.root / "started.flag", proc)
    time.sleep(0.5)  # both shells are up
    os.kill(proc.pid, signal.SIGTERM)  # the build alone, as a service manager would
    out, err = proc.communicate(timeout=20)  # not the 30 s the commands would take
    assert proc.returncode == 143, (out, err)
    run = ascendpipe.show("latest", workspace=str(ws.root))
    assert run["state"] == "interrupted"
    assert {n: (s["state"], s["error"]) for n, s in run["stages"].items()} == {
        "a": ("failed", "interrupted by SIGTERM"), "b": ("failed", "interrupted by SIGTERM")}
    stray = subprocess.run(["pgrep", "-f", "sleep 29.71"], capture_output=True, text=True).stdout.split()
    assert stray == []  # the shells and their sleeps were stopped, not orphaned


def test_describe_names_the_path_and_the_free_space():
    from ascendpipe.store.failures import describe

    # a temp file is named by the name it takes (atomic_path's .tmp-NAME.PID-N.tmp), a stage's temp output
    # folder (.tmp-NAME-XXXXXX) by its stage folder; shutil names the full destination second
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/ws/a.bin", None, "/ws/cache/objects/ab/.tmp-cd.x1-0.tmp")
    assert describe(full, free=1536, doing="storing outputs") == (
        "no space left on the device while storing outputs (writing /ws/cache/objects/ab/cd; 1.5 kB free there); "
        "free some space and build again")
    copying = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/ws/build/.tmp-source-k2j9x1/m.onnx.data")
    assert describe(copying, free=0).startswith("no space left on the device (writing /ws/build/source/m.onnx.data; ")
    # SQLite says "disk I/O error" when it cannot grow its -wal/-shm: full only when space is short
    assert describe(sqlite3.OperationalError("disk I/O error"), "/ws/.ascendpipe/ascendpipe.db", free=0).startswith(
        "no space left on the device (writing /ws/.ascendpipe/ascendpipe.db; 0 bytes free there)")
    assert describe(sqlite3.OperationalError("disk I/O error"), "/db", free=10 << 30) == "OperationalError: disk I/O error"
    assert describe(OSError(errno.EROFS, "Read-only file system", "/ws/build/x")).startswith("/ws/build/x is on a read-only file system")
    assert describe(ValueError("bad\nsecond line")) == "ValueError: bad"
