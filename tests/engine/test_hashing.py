"""The stat cache must never vouch for content it did not see."""

from __future__ import annotations

import os
import time

from ascendpipe.store import hashing
from ascendpipe.store.db import Database
from ascendpipe.store.hashing import Hasher, hash_file


def _hasher(tmp_path):
    return Hasher(Database(str(tmp_path / "state" / "db.sqlite")), str(tmp_path))


def test_fresh_files_are_not_cached_but_old_ones_are(tmp_path, monkeypatch):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    h = _hasher(tmp_path)
    assert h.hash_path("a.bin") == hash_file(str(f))
    h.flush()
    assert h.db.stat_get(str(f)) is None  # written just now: racily clean, not cached
    time.sleep(0.05)
    monkeypatch.setattr(hashing, "RACY_WINDOW_NS", 20_000_000)  # 20 ms: the file is now "old"
    h2 = _hasher(tmp_path)
    h2.hash_path("a.bin")
    h2.flush()
    row = h2.db.stat_get(str(f))
    assert row is not None and row[4] == hash_file(str(f))


def test_same_size_rewrite_with_mtime_restored_is_still_seen(tmp_path, monkeypatch):
    monkeypatch.setattr(hashing, "RACY_WINDOW_NS", -(10**12))  # cache everything: ctime must catch it
    f = tmp_path / "a.bin"
    f.write_bytes(b"a" * 64)
    old = time.time() - 60
    os.utime(f, (old, old))
    st = os.stat(f)
    h = _hasher(tmp_path)
    first = h.hash_path("a.bin")
    h.flush()
    assert h.db.stat_get(str(f)) is not None
    with open(f, "r+b") as fh:  # same inode, same size, other bytes
        fh.write(b"b" * 64)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back, as `cp -p` or tar would
    time.sleep(0.01)
    second = _hasher(tmp_path).hash_path("a.bin")
    assert first != second == hash_file(str(f))


def test_folder_hash_changes_with_any_file_and_not_with_touch(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "x").write_text("1")
    (d / "y").write_text("2")
    a = _hasher(tmp_path).hash_path("d")
    os.utime(d / "y", None)
    assert _hasher(tmp_path).hash_path("d") == a
    (d / "sub" / "x").write_text("3")
    b = _hasher(tmp_path).hash_path("d")
    assert b != a and b.endswith(".dir")
