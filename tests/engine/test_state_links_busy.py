"""State files are never followed out (a link at the build lock, the database, its side files or
a dump lock is one located line, and the file it points to is untouched); a database another
process holds locked is waited for and then one line, exit 1, never moved aside as damaged."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest

import ascendpipe
from tests.engine.conftest import CHAIN, built_chain as _built


def _cli(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd() if os.path.isdir("ascendpipe") else
                               os.environ.get("PYTHONPATH", ""), **(env or {})})


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def outside(tmp_path):
    """A file outside the workspace that a link in the state folder points to."""
    target = tmp_path / "precious.txt"
    target.write_text("the user's file, not ours\n" * 10)
    return target


def test_a_lock_symlink_is_refused_and_its_target_untouched(ws, outside):
    _built(ws)
    lock = ws.root / ".ascendpipe" / "build.lock"
    lock.unlink()
    os.symlink(outside, lock)
    before = _digest(outside)
    proc = _cli(ws.root, "build", "pipeline.yaml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"ascendpipe: error: {lock}: the build lock is a symbolic link (to {outside}); state files are never followed "
        f"out of the workspace: remove the link (rm '{lock}') and run again")
    assert _digest(outside) == before and outside.stat().st_size > 0
    assert ws.ran() == []


@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_a_database_symlink_is_refused_and_its_target_untouched(ws, outside, suffix):
    _built(ws)
    db = ws.root / ".ascendpipe" / "ascendpipe.db"
    path = str(db) + suffix
    if os.path.lexists(path):
        os.unlink(path)
    if not suffix:
        for side in ("-wal", "-shm"):
            if os.path.lexists(str(db) + side):
                os.unlink(str(db) + side)
    os.symlink(outside, path)
    before = _digest(outside)
    for args in (["build", "pipeline.yaml"], ["runs"]):
        proc = _cli(ws.root, *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ascendpipe: error: {path}: the workspace database"), lines
        assert "is a symbolic link" in lines[0] and f"rm '{path}'" in lines[0]
    assert _digest(outside) == before
    assert not list(db.parent.glob("ascendpipe.db.damaged-*"))  # refused, never "repaired"


def test_a_dump_lock_symlink_is_refused(tmp_path, outside):
    from ascendpipe.errors import UserError
    from ascendpipe.store.dump_cache import DumpCache

    cache = DumpCache(tmp_path / "cache")
    key = "a" * 64
    (tmp_path / "cache" / "dumps").mkdir(parents=True)
    os.symlink(outside, tmp_path / "cache" / "dumps" / f".lock-{key}")
    before = _digest(outside)
    with pytest.raises(UserError, match="is a symbolic link"):
        cache.get_or_make(key, lambda folder: None)
    assert _digest(outside) == before


def _hold(db_path, how: str):
    """Another process holding the database's lock until its stdin closes."""
    script = (
        "import sqlite3, sys\n"
        f"c = sqlite3.connect({str(db_path)!r}, isolation_level=None)\n"
        + ("c.execute('PRAGMA locking_mode=EXCLUSIVE')\n" if how == "exclusive" else "")
        + "c.execute('BEGIN IMMEDIATE')\n"
        "c.execute(\"INSERT INTO meta VALUES('holder', 'x')\")\n"
        + ("c.execute('COMMIT'); c.execute('BEGIN IMMEDIATE')\n" if how == "exclusive" else "")
        + "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("how", ["exclusive", "writer"])
def test_a_busy_database_is_waited_for_then_one_line_never_moved(ws, how):
    first = _built(ws)
    db = ws.root / ".ascendpipe" / "ascendpipe.db"
    # the holder says who it is in the build lock file, as a build does
    (ws.root / ".ascendpipe" / "build.lock").write_text('{"pid": 4242, "argv": ["ascendpipe", "build", "other.yaml"], '
                                                         '"since": "2026-01-01 00:00:00"}')
    holder = _hold(db, how)
    try:
        started = time.monotonic()
        proc = _cli(ws.root, "build", "pipeline.yaml", env={"ASCENDPIPE_DB_WAIT": "1.5"})
        took = time.monotonic() - started
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    # a holder of the exclusive lock stops the opening, before the build takes the build lock: the
    # lock file still names it; a writer is met after, when the build lock names this build itself
    who = ("pid 4242 (`ascendpipe build other.yaml`, since 2026-01-01 00:00:00)" if how == "exclusive"
           else "another process")
    assert lines[0] == f"waiting for .ascendpipe/ascendpipe.db, in use by {who} (up to 1.5 s; ASCENDPIPE_DB_WAIT sets it) ...", lines
    assert lines[-1] == ("ascendpipe: error: another ascendpipe process is using .ascendpipe/ascendpipe.db; "
                         "run again when it finishes"), lines
    assert len(lines) == 2, lines
    assert 1.5 <= took < 30
    assert not list(db.parent.glob("ascendpipe.db.damaged-*"))  # busy is not damaged
    assert ws.ran() == []
    runs = ascendpipe.runs(workspace=str(ws.root))
    assert [r["id"] for r in runs][-1] == first["id"]  # the history is intact
    # once the holder is gone, the next build goes on with the next run id
    again = ws.build()
    assert again["state"] == "done" and again["id"] > first["id"]
    assert set(ws.states(again).values()) == {"fresh"}


def test_the_wait_ends_early_when_the_holder_lets_go(ws):
    _built(ws)
    db = ws.root / ".ascendpipe" / "ascendpipe.db"
    holder = _hold(db, "exclusive")
    proc = subprocess.Popen([sys.executable, "-m", "ascendpipe", "runs"], cwd=ws.root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "ASCENDPIPE_DB_WAIT": "30"})
    time.sleep(1.0)
    holder.stdin.close()
    holder.wait(timeout=30)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err.startswith("waiting for .ascendpipe/ascendpipe.db, in use by another process"), err
    assert "run again" not in err


@pytest.mark.parametrize("linked", ["cache/objects", "cache/runs"])
def test_a_cache_folder_linked_outside_is_refused_never_written_through(ws, tmp_path, linked):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws.root / "cache").mkdir()
    os.symlink(elsewhere, ws.root / linked)
    run = ws.build()
    assert run["state"] == "failed"
    errors = [s.get("error") for s in run["stages"].values() if s["state"] == "failed"]
    assert errors and errors[0] == (
        f"{ws.root / linked}: a folder of the cache is a symbolic link (to {elsewhere}); state files are never "
        f"followed out of the workspace: remove the link (rm '{ws.root / linked}') and run again"), errors
    assert list(elsewhere.iterdir()) == []
