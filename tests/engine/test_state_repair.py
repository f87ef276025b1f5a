"""State repair: a damaged, empty or unreadable database is moved aside and rebuilt from cache/
(nothing built before reruns); a lock path that is not a file and a folder with no workspace are
clear errors; read-only commands never create a database."""

from __future__ import annotations

import os
import subprocess
import sys

import ascendpipe
from tests.engine.conftest import built_chain as _built


def _cli(cwd, *args):
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=cwd, capture_output=True, text=True)


def _assert_restored_not_rerun(ws, first):
    db = ws.root / ".ascendpipe" / "ascendpipe.db"
    proc = _cli(ws.root, "build", "pipeline.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "moved to ascendpipe.db.damaged-" in proc.stderr
    assert "rebuilt from 3 run-cache entries in cache/" in proc.stderr and "run history it held is lost" in proc.stderr
    assert ws.ran() == []  # every stage came back from cache/, none reran
    run = ascendpipe.show("latest", workspace=str(ws.root))
    assert {n: s["state"] for n, s in run["stages"].items()} == {"prepare": "restored", "train": "restored", "report": "restored"}
    assert {n: s["outputs"] for n, s in run["stages"].items()} == {n: s["outputs"] for n, s in first["stages"].items()}
    assert run["id"] == first["id"] + 1  # a new history, but run ids go on: never run 1 again
    assert [r["id"] for r in ascendpipe.runs(workspace=str(ws.root))] == [run["id"]]
    assert [p.name for p in db.parent.glob("ascendpipe.db.damaged-*")]
    # and the build after it is a no-op
    again = ws.build()
    assert set(ws.states(again).values()) == {"fresh"}


def test_an_empty_database_is_rebuilt_from_cache(ws):
    first = _built(ws)
    (ws.root / ".ascendpipe" / "ascendpipe.db").write_bytes(b"")
    _assert_restored_not_rerun(ws, first)


def test_a_database_that_is_not_sqlite_is_rebuilt_from_cache(ws):
    first = _built(ws)
    (ws.root / ".ascendpipe" / "ascendpipe.db").write_bytes(b"not a database at all" * 300)
    _assert_restored_not_rerun(ws, first)


def test_a_malformed_page_is_a_clear_error_then_repaired(ws):
    _built(ws)
    db = ws.root / ".ascendpipe" / "ascendpipe.db"
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    for at in range(page, len(data)):  # every page after the first (the header stays valid)
        data[at] = 0xA5
    db.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(db) + suffix):
            os.unlink(str(db) + suffix)
    proc = _cli(ws.root, "runs")  # the first command to meet it repairs it, whichever it is
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "was damaged (" in proc.stderr and "moved to ascendpipe.db.damaged-" in proc.stderr
    assert "rebuilt from 3 run-cache entries in cache/" in proc.stderr
    assert "no runs" in proc.stdout or proc.stdout.count("\n") <= 2
    run = ws.build()
    assert ws.ran() == []
    assert set(ws.states(run).values()) == {"restored"}


def test_a_malformed_page_met_while_running_is_a_clear_error_then_checked(ws):
    """The next opening checks the file (PRAGMA quick_check): a sound one is kept, history and all;
    only one that fails it is moved aside."""
    from ascendpipe.store.db import Database, DatabaseDamaged

    first = _built(ws)
    path = ws.root / ".ascendpipe" / "ascendpipe.db"
    db = Database(str(path))
    real = db.conn._conn

    class Broken:  # what sqlite raises on a page it cannot parse, mid-command
        def execute(self, *a):
            import sqlite3

            raise sqlite3.DatabaseError("database disk image is malformed")

    db.conn._conn = Broken()
    try:
        db.runs()
        raise AssertionError("no error")
    except DatabaseDamaged as exc:
        assert str(exc).startswith(f"the workspace database {db.path} is damaged (database disk image is malformed); "
                                   "the next command moves it aside")
    finally:
        real.close()
    assert os.path.exists(str(path) + ".damaged")
    proc = _cli(ws.root, "build", "pipeline.yaml")  # the file itself is whole: kept
    assert proc.returncode == 0, proc.stderr
    assert "moved to" not in proc.stderr and not list(path.parent.glob("ascendpipe.db.damaged-*"))
    assert not os.path.exists(str(path) + ".damaged")
    assert [r["id"] for r in ascendpipe.runs(workspace=str(ws.root))] == [first["id"] + 1, first["id"]]
    # a file that really fails quick_check is moved aside, and run ids still go on
    data = bytearray(path.read_bytes())
    for at in range(4096, len(data)):
        data[at] = 0xA5
    path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(path) + suffix):
            os.unlink(str(path) + suffix)
    proc = _cli(ws.root, "build", "pipeline.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "moved to ascendpipe.db.damaged-" in proc.stderr and f"(run ids go on after {first['id'] + 1})" in proc.stderr
    assert ws.ran() == []
    assert [r["id"] for r in ascendpipe.runs(workspace=str(ws.root))] == [first["id"] + 2]


def test_a_database_that_is_a_folder_is_moved_aside(ws):
    first = _built(ws)
    db = ws.root / ".ascendpipe" / "ascendpipe.db"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(str(db) + suffix):
            os.unlink(str(db) + suffix)
    db.mkdir()
    _assert_restored_not_rerun(ws, first)


def test_a_lock_path_that_is_a_folder_is_a_clear_error(ws):
    _built(ws)
    lock = ws.root / ".ascendpipe" / "build.lock"
    lock.unlink()
    lock.mkdir()
    proc = _cli(ws.root, "build", "pipeline.yaml")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"ascendpipe: error: {lock} is a directory, not the build lock file; "
                                   f"remove it (rmdir {lock}) and build again")


def test_runs_and_show_outside_a_workspace_create_nothing(tmp_path):
    for args in (["runs"], ["show", "latest"], ["gc"]):
        proc = _cli(tmp_path, *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (f"ascendpipe: error: no workspace here (no .ascendpipe/ found from {tmp_path} up); "
                                       "run `ascendpipe build` first")
        assert list(tmp_path.iterdir()) == []


def test_runs_in_a_workspace_with_no_database_creates_none(tmp_path):
    (tmp_path / ".ascendpipe").mkdir()
    proc = _cli(tmp_path, "runs")
    assert proc.returncode == 2
    assert "nothing was built here yet" in proc.stderr
    assert list((tmp_path / ".ascendpipe").iterdir()) == []


def test_a_damaged_doit_state_file_is_replaced_not_a_silent_skip(ws):
    first = _built(ws)
    (ws.root / ".ascendpipe" / "doit.sqlite3").write_bytes(b"\x00garbage" * 500)
    run = ws.build(force=True)  # doit only schedules: its file holds nothing of ours
    assert run["state"] == "done"
    assert ws.states(run) == {"prepare": "ran", "train": "ran", "report": "ran"}
    assert (ws.root / ".ascendpipe" / "doit.sqlite3").read_bytes()[:16] == b"SQLite format 3\x00"
    assert {n: s["outputs"] for n, s in run["stages"].items()} == {n: s["outputs"] for n, s in first["stages"].items()}
