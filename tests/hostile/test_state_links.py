"""State folders linked out of the workspace (issue 42): a link at ``.ascendpipe/plans``,
``.ascendpipe/noop``, ``.ascendpipe/workers``, ``.ascendpipe/config.json`` or ``cache/dumps`` is one
located line, exit 2, and nothing is written through it nor read from it (a planted plan or memo is
never trusted). The lock, the database and ``cache/objects``/``cache/runs`` are covered in
tests/engine/test_state_links_busy.py. Every state path goes through ``store/statefiles.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile.test_corpus import snapshot

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = """\
stages:
  prep:
    kind: run
    cmd: python3 -c "open('out.txt', 'w').write(open('in.txt').read().upper())"
    deps: [in.txt]
    outs: [out.txt]
"""


def _cli(cwd, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def _line(path, what: str, target) -> str:
    return (f"ascendpipe: error: {path}: {what} is a symbolic link (to {target}); state files are never followed "
            f"out of the workspace: remove the link (rm '{path}') and run again")


@pytest.fixture
def built(tmp_path):
    """A workspace built once (its plan and no-op memo written), and a folder outside it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".ascendpipe").mkdir()
    (ws / "pipeline.yaml").write_text(PIPELINE)
    (ws / "in.txt").write_text("hello\n")
    first = _cli(ws, "build", "pipeline.yaml")
    assert first.returncode == 0, first.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    return ws, outside


@pytest.fixture
def remembered(built):
    """``built`` with its no-op memo written (past the stat cache's two-second racy window)."""
    ws, outside = built
    for _ in range(4):  # a stat changed within the window (a loaded machine, a module edited): once more
        time.sleep(2.1)
        again = _cli(ws, "build", "pipeline.yaml")
        assert again.returncode == 0, again.stderr
        if (ws / ".ascendpipe" / "noop").is_dir() and list((ws / ".ascendpipe" / "noop").iterdir()):
            break
    assert list((ws / ".ascendpipe" / "noop").iterdir())
    return ws, outside


def _relink(ws: Path, rel: str, outside: Path, planted: bool) -> Path:
    """``rel`` made a link to ``outside`` holding (when ``planted``) copies of what ``rel`` held."""
    folder = ws / rel
    if planted:
        for item in folder.iterdir():
            (outside / item.name).write_bytes(item.read_bytes())
    for item in folder.iterdir():
        item.unlink()
    folder.rmdir()
    folder.symlink_to(outside)
    return folder


BUILD, FORCED, STATUS = ["build", "pipeline.yaml"], ["build", "pipeline.yaml", "--force", "prep"], ["status", "pipeline.yaml"]


@pytest.mark.parametrize("rel,what,commands", [
    (".ascendpipe/plans", "the plan cache's folder", [BUILD, FORCED, STATUS]),
    (".ascendpipe/noop", "the no-op memo folder", [BUILD]),  # the only command that reads or writes a memo
])
@pytest.mark.parametrize("planted", [False, True], ids=["empty", "planted"])
def test_a_state_folder_linked_outside_is_refused_and_never_written_through(remembered, rel, what, commands, planted):
    ws, outside = remembered
    link = _relink(ws, rel, outside, planted)
    before, before_out = snapshot(ws), snapshot(outside)
    for argv in commands:
        proc = _cli(ws, *argv)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert proc.stderr.splitlines() == [_line(link, what, outside)], proc.stderr
        assert proc.stdout == ""
    assert snapshot(outside) == before_out and snapshot(ws) == before


def test_the_plan_is_written_again_once_the_link_is_gone(built):
    ws, outside = built
    link = _relink(ws, ".ascendpipe/plans", outside, planted=False)
    assert _cli(ws, "build", "pipeline.yaml").returncode == 2
    link.unlink()
    proc = _cli(ws, "build", "pipeline.yaml")
    assert proc.returncode == 0, proc.stderr
    assert len(list((ws / ".ascendpipe" / "plans").glob("*.json"))) == 1 and list(outside.iterdir()) == []


def test_a_plan_file_that_is_a_link_is_replaced_never_read_nor_written_through(built):
    ws, outside = built
    (plan,) = (ws / ".ascendpipe" / "plans").glob("*.json")
    victim = outside / "victim.json"
    data = json.loads(plan.read_text())
    data["pipeline"]["stages"]["prep"]["cmd"] = "python3 -c \"open('pwned.txt', 'w').write('x')\""
    victim.write_text(json.dumps(data))
    plan.unlink()
    plan.symlink_to(victim)
    kept = victim.read_bytes()
    proc = _cli(ws, "build", "pipeline.yaml", "--force", "prep")
    assert proc.returncode == 0, proc.stderr
    assert not (ws / "pwned.txt").exists() and victim.read_bytes() == kept
    assert plan.is_file() and not plan.is_symlink()


def test_a_linked_remote_configuration_is_refused(built):
    ws, outside = built
    config = outside / "config.json"
    config.write_text(json.dumps({"remote": str(outside / "remote")}))
    link = ws / ".ascendpipe" / "config.json"
    link.symlink_to(config)
    before, before_out = snapshot(ws), snapshot(outside)
    proc = _cli(ws, "push", "pipeline.yaml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [_line(link, "the workspace's remote configuration", config)]
    assert snapshot(outside) == before_out and snapshot(ws) == before


def test_the_workers_token_is_never_written_through_a_linked_folder(tmp_path):
    from ascendpipe.engine.worker import token_path
    from ascendpipe.errors import UserError
    from ascendpipe.store import statefiles

    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / ".ascendpipe").mkdir(parents=True)
    outside.mkdir()
    (root / ".ascendpipe" / "workers").symlink_to(outside)
    path = token_path(str(root), 7)
    with pytest.raises(UserError) as err:
        statefiles.write_state_file(str(root / ".ascendpipe"), path, b"token", "the workers' token folder")
    assert str(err.value) == _line(root / ".ascendpipe" / "workers", "the workers' token folder",
                                   outside).removeprefix("ascendpipe: error: ")
    assert list(outside.iterdir()) == []


def test_the_dump_cache_folder_linked_outside_is_refused(tmp_path):
    from ascendpipe.errors import UserError
    from ascendpipe.store.dump_cache import DumpCache

    cache, outside = tmp_path / "ws" / "cache", tmp_path / "outside"
    cache.mkdir(parents=True)
    outside.mkdir()
    (cache / "dumps").symlink_to(outside)
    with pytest.raises(UserError) as err:
        DumpCache(cache)._check_refs()
    assert str(err.value) == _line(cache / "dumps", "a folder of the cache", outside).removeprefix("ascendpipe: error: ")
    assert list(outside.iterdir()) == []


def test_an_ownership_record_naming_a_file_outside_is_never_read(built):
    """An owners row (an edited database) naming a pipeline out of the workspace: that file is never
    resolved (a FIFO there would block the build; it is treated as gone and its claim released)."""
    import sqlite3

    ws, outside = built
    os.mkfifo(outside / "p.yaml")  # opened for reading, it would block forever
    db = sqlite3.connect(ws / ".ascendpipe" / "ascendpipe.db")
    with db:
        db.execute("UPDATE owners SET pipeline = ?", (os.path.relpath(outside / "p.yaml", ws),))
    db.close()
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--force", "prep"], cwd=ws,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
    assert proc.returncode == 0, proc.stderr
    assert "ran" in proc.stdout
    assert proc.stderr == ("note: out.txt, build/prep.log belonged to ../outside/p.yaml, which no longer exists; "
                           "now pipeline.yaml's\n")


def test_a_remote_configuration_that_is_not_a_url_is_refused(built):
    ws, _ = built
    config = ws / ".ascendpipe" / "config.json"
    config.write_text(json.dumps({"remote": 5}))
    before = snapshot(ws)
    proc = _cli(ws, "push", "pipeline.yaml")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"ascendpipe: error: {config}: remote: 5 is not a URL; give "
                                        "s3://BUCKET/PREFIX or a folder path as text"]
    assert snapshot(ws) == before and not (ws / "5").exists()


@pytest.mark.parametrize("url,line", [
    ("file://", "remote 'file://' names no folder; use file:///PATH/TO/FOLDER or a plain folder path"),
    ("ftp://host/x", "remote cache ftp://host/x: protocol 'ftp' (FTPFileSystem) cannot hold a remote cache here; use "
     "s3://BUCKET/PREFIX or a folder"),
    ("nope://b/p", "remote cache nope://b/p: protocol 'nope' is not available (Protocol not known: nope); use "
     "s3://BUCKET/PREFIX or a folder"),
])
def test_a_remote_url_that_names_no_place_is_refused(built, url, line):
    """`file://` alone was the file system's root (objects/ and runs/ written at /); a protocol fsspec
    cannot open without more was an internal error."""
    ws, _ = built
    _cli(ws, "status", "pipeline.yaml")  # the plan cache written beforehand: the refusal writes nothing
    before = snapshot(ws)
    proc = _cli(ws, "push", "pipeline.yaml", "--remote", url)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, ["ascendpipe: error: " + line])
    assert snapshot(ws) == before
