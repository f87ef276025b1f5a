"""A remote is untrusted input: a hostile folder remote and a hostile S3 remote (moto) whose entries
and manifests name '../' paths, absolute paths, links and digests that are no digests.

An entry that fails its checks is a miss (issue 48 item 8): nothing is written from it. Each case
pulls into a fresh clone and shows the one line naming the remote and the entry (pull only restores,
so the stage fails), and builds in another clone, where the stage runs and its line names the refused
entry; nothing outside the workspace and nothing already in it changed (the trees are hashed before
and after: the clone, the remote, and a decoy file beside them)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

import ascendpipe
from tests.scale.conftest import states

PIPELINE = """\
remote: REMOTE
stages:
  prepare:
    kind: run
    cmd: python3 step.py COUNTER data/raw/ input.txt
    deps: [step.py, input.txt]
    outs: [data/raw]
"""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree(root) -> dict[str, str]:
    """Every file under ``root`` (links as their target) -> its sha256; the clone's state folder
    (its database, lock and logs: written by any pull) left out."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".ascendpipe"]
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = "link:" + os.readlink(path)
            elif os.path.isfile(path) and not name.endswith(".log") and not name.endswith("-runs.log"):
                with open(path, "rb") as f:
                    found[rel] = _sha(f.read())
            elif os.path.isdir(path):
                found[rel] = "dir"
    return found


class _Remote:
    """Read and write a remote's raw objects and entries (a folder, or a bucket through s3fs)."""

    def __init__(self, url: str):
        if url.startswith("s3://"):
            import s3fs

            self.fs = s3fs.S3FileSystem(skip_instance_cache=True)
            self.root = url[len("s3://"):]
        else:
            import fsspec

            self.fs = fsspec.filesystem("file")
            self.root = url

    def get(self, rel: str) -> bytes:
        return self.fs.cat_file(f"{self.root}/{rel}")

    def put(self, rel: str, data: bytes) -> None:
        if not self.root.startswith("/"):
            self.fs.pipe_file(f"{self.root}/{rel}", data)
            return
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def put_object(self, data: bytes, suffix: str = "") -> str:
        digest = _sha(data) + suffix
        self.put(f"objects/{digest[:2]}/{digest[2:]}", data)
        return digest

    def entry_rel(self, key: str) -> str:
        return f"runs/{key[:2]}/{key[2:]}.json"


def _pushed(make_ws, url):
    a = make_ws("a")
    a.pipeline(PIPELINE.replace("REMOTE", url))
    a.write("input.txt", "some input\n")
    run = a.build()
    assert states(run) == {"prepare": "ran"}
    a.ran()
    pushed = ascendpipe.push(str(a.root / "pipeline.yaml"))
    assert pushed["stages"]["prepare"]["state"] == "pushed"
    return a, run["stages"]["prepare"]["key"]


def _hostile(case: str, remote: _Remote, key: str, tmp_path) -> str:
    """Rewrite the remote's entry for ``key`` as ``case``; returns the name the refusal must quote."""
    entry = json.loads(remote.get(remote.entry_rel(key)))
    content = b"written by a hostile remote\n"
    blob = remote.put_object(content)
    if case in ("dotdot", "absolute", "manifest-hash"):
        path = {"dotdot": "../../../escape.txt", "absolute": str(tmp_path / "abs_escape.txt")}.get(case, "a.txt")
        digest = "../../dir/decoy.txt" if case == "manifest-hash" else blob
        manifest = json.dumps([{"path": path, "hash": digest, "size": len(content)}], sort_keys=True,
                              separators=(",", ":")).encode()
        entry["outs"]["data/raw"] = remote.put_object(manifest, ".dir")
        quoted = path if case != "manifest-hash" else digest
    elif case == "digest-dotdot":
        entry["outs"]["data/raw"] = quoted = "../../dir/decoy.txt"
    elif case == "digest-nonhex":
        entry["outs"]["data/raw"] = quoted = "Z" * 64 + ".dir"
    elif case == "remedy-name":
        entry["remedy"] = [{"name": "../../evil.cfg", "path": "x", "hash": _sha(b"x"), "content": "x"}]
        quoted = "../../evil.cfg"
    elif case == "dump-key":
        entry["dumps"] = {"../../evil": entry["outs"]["data/raw"]}
        quoted = "../../evil"
    else:
        raise AssertionError(case)
    remote.put(remote.entry_rel(key), json.dumps(entry).encode())
    return quoted


CASES = ["dotdot", "absolute", "manifest-hash", "digest-dotdot", "digest-nonhex", "dump-key", "remedy-name"]


def _check_refused(make_ws, tmp_path, url, case):
    a, key = _pushed(make_ws, url)
    remote = _Remote(url)
    quoted = _hostile(case, remote, key, tmp_path)
    decoy = tmp_path / "dir" / "decoy.txt"  # where '../../dir/decoy.txt' from the remote's objects/ab/ lands
    decoy.parent.mkdir(exist_ok=True)
    decoy.write_text("keep me\n")
    b = a.clone("b")
    (b.root / "data").mkdir()
    (b.root / "data" / "raw").mkdir()
    (b.root / "data" / "raw" / "mine.txt").write_text("the user's own file\n")  # already there: kept
    before = _tree(tmp_path)

    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "pull", "pipeline.yaml"], cwd=b.root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    lines = [line for line in out.splitlines() if f"remote cache {url}" in line]
    assert len(lines) == 1, out
    assert quoted in lines[0] and "nothing was written" in lines[0], lines[0]
    assert "not in the local or remote cache" in lines[0] and "taken as a miss" in lines[0], lines[0]
    in_entry = case in ("digest-dotdot", "digest-nonhex", "dump-key", "remedy-name")
    where = f"entry runs/{key[:2]}/{key[2:]}.json" if in_entry else "folder manifest objects/"
    assert where in lines[0], lines[0]
    assert b.ran() == []
    # nothing written or deleted anywhere: not outside, not in the clone (its cache stays empty), not in the remote
    assert _tree(tmp_path) == before
    assert decoy.read_text() == "keep me\n"
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "abs_escape.txt").exists()

    # a build is valid whatever the remote holds: the refused entry is a miss, the stage runs here
    c = a.clone("c")
    outside = {rel: h for rel, h in _tree(tmp_path).items() if not rel.startswith("c/")}
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml"], cwd=c.root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out
    ran = [line for line in out.splitlines() if line.lstrip().startswith("ran")]
    assert len(ran) == 1 and "prepare" in ran[0] and quoted in ran[0] and where in ran[0], out
    assert "taken as a miss, nothing was written from it; built here" in ran[0], ran[0]
    assert c.ran() == ["prepare"] and (c.root / "data" / "raw").is_dir()
    assert {rel: h for rel, h in _tree(tmp_path).items() if not rel.startswith("c/")} == outside
    assert decoy.read_text() == "keep me\n"


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_folder_remote_writes_and_deletes_nothing(make_ws, tmp_path, case):
    _check_refused(make_ws, tmp_path, str(tmp_path / "remote"), case)


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_s3_remote_writes_and_deletes_nothing(make_ws, tmp_path, bucket, case):
    _check_refused(make_ws, tmp_path, bucket, case)


def test_a_link_inside_a_folder_remote_is_refused_not_followed(make_ws, tmp_path):
    url = str(tmp_path / "remote")
    a, key = _pushed(make_ws, url)
    # the remote's run entries moved outside and linked back: reading through the link is refused
    outside = tmp_path / "outside-runs"
    os.replace(os.path.join(url, "runs"), outside)
    os.symlink(outside, os.path.join(url, "runs"))
    b = a.clone("b")
    before = _tree(tmp_path)
    run = ascendpipe.pull(str(b.root / "pipeline.yaml"))
    assert states(run) == {"prepare": "failed"}
    error = run["stages"]["prepare"]["error"]
    assert error.startswith(f"not in the local or remote cache (remote cache {url}: runs/{key[:2]}/{key[2:]}.json is "
                            "reached through the symbolic link "), error
    assert "remove it" in error and "taken as a miss" in error
    assert _tree(tmp_path) == before
    assert not (b.root / "data").exists()


def test_push_into_a_folder_remote_never_writes_through_a_link(make_ws, tmp_path):
    url = str(tmp_path / "remote")
    a = make_ws("a")
    a.pipeline(PIPELINE.replace("REMOTE", url))
    a.write("input.txt", "some input\n")
    a.build()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.makedirs(url, exist_ok=True)
    os.symlink(outside, os.path.join(url, "objects"))
    before = _tree(outside)
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "push", "pipeline.yaml"], cwd=a.root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "is reached through the symbolic link" in proc.stderr, proc.stderr
    assert _tree(outside) == before == {}


def test_push_refuses_a_local_manifest_out_of_shape(make_ws, tmp_path):
    """What push reads back from this workspace's cache is checked like a remote's names."""
    url = str(tmp_path / "remote")
    a = make_ws("a")
    a.pipeline(PIPELINE.replace("REMOTE", url))
    a.write("input.txt", "some input\n")
    run = a.build()
    digest = run["stages"]["prepare"]["outputs"]["data/raw"]
    manifest = a.root / "cache" / "objects" / digest[:2] / digest[2:]
    entries = json.loads(manifest.read_bytes())
    entries[0]["hash"] = "../../../../etc/passwd"
    data = json.dumps(entries).encode()
    evil = _sha(data) + ".dir"
    (a.root / "cache" / "objects" / evil[:2]).mkdir(exist_ok=True)
    (a.root / "cache" / "objects" / evil[:2] / evil[2:]).write_bytes(data)
    import sqlite3

    con = sqlite3.connect(a.root / ".ascendpipe" / "ascendpipe.db")
    con.execute("UPDATE stage_state SET outs=?", (json.dumps({"data/raw": evil}),))
    con.execute("UPDATE run_cache SET outs=?", (json.dumps({"data/raw": evil}),))
    con.commit()
    con.close()
    pushed = ascendpipe.push(str(a.root / "pipeline.yaml"))
    assert pushed["stages"]["prepare"]["state"] == "not pushed"
    assert "is corrupted" in pushed["stages"]["prepare"]["reason"] and "'../../../../etc/passwd'" in pushed["stages"]["prepare"]["reason"]
    assert not os.path.exists(os.path.join(url, "runs"))
