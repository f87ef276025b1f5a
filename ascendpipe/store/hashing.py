"""Content hashes of files and folders, with a stat cache so unchanged files are not re-read.

A file's hash is the sha256 of its bytes. A folder's hash is the sha256 of its manifest (the sorted
list of relative paths, sizes and file hashes) with the suffix ``.dir``, as DVC does, so a folder
output can be stored file by file. The stat cache maps a path to (inode, mtime_ns, ctime_ns, size,
hash); any change of those stat fields means re-hashing, and files changed in the last two seconds
are never cached (see ``_stat_hash``). Touching a file without changing it re-hashes it
once and finds the same hash: content, not mtime, decides staleness.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time

from ascendpipe.digest import sha256_hex

CHUNK = 1 << 20
RACY_WINDOW_NS = 2_000_000_000
DIR_SUFFIX = ".dir"


def hash_bytes(data: bytes) -> str:
    return sha256_hex(data)


def hash_file(path: str) -> str:
    import hashlib  # OpenSSL's sha256, faster per byte; imported only when a file must be read

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def manifest_bytes(entries: list[dict]) -> bytes:
    return json.dumps(sorted(entries, key=lambda e: e["path"]), sort_keys=True, separators=(",", ":")).encode()


class Hasher:
    """Hashes workspace paths through a stat cache held in the state database."""

    def __init__(self, db, workspace: str):
        self.db = db
        self.workspace = workspace
        self._memo: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self._pending: list[tuple] = []
        # (device, inode, size, mtime, ctime) -> digest: one file under several names (an output hard-linked
        # to a cache object and to another stage's output, store/objects.py) is read once per process
        self._by_inode: dict[tuple, str] = {}
        # abspath -> the stat each hash was decided from (engine/noop_memo.py), when asked to keep them
        self.observed: dict[str, list | None] | None = None

    def _observe(self, abspath: str, st) -> None:
        if self.observed is not None:
            self.observed[abspath] = None if st is None else [
                st.st_mode, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns]

    def _stat_hash(self, abspath: str, st) -> str:
        if not stat.S_ISREG(st.st_mode):
            # never opened: a FIFO blocks the build until something writes to it, a device never ends
            self._refuse(abspath, st)
        row = self.db.stat_get(abspath)
        if row and row[:4] == (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size):
            return row[4]
        same = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        settled = st.st_nlink > 1 and time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_WINDOW_NS
        digest = self._by_inode.get(same) if settled else None
        if digest is None:
            digest = hash_file(abspath)
            if settled:
                with self._lock:
                    self._by_inode[same] = digest
        # "Racily clean" files (git's term): timestamps are only as fine as the kernel's clock tick,
        # and inodes are reused at once, so a file rewritten within the same tick with the same size
        # can look unchanged. Only files whose timestamps are safely in the past enter the cache;
        # a fresh output is hashed again once, on the next build.
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        if time.time_ns() - newest > RACY_WINDOW_NS:
            with self._lock:
                self._pending.append((abspath, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, digest))
        return digest

    def _refuse(self, abspath: str, st) -> None:
        from ascendpipe.fsutil import special_file
        from ascendpipe.errors import Location, UserError

        rel = os.path.relpath(abspath, self.workspace)
        what = special_file(abspath) or "not a regular file"
        raise UserError(f"'{rel}' is {what}: a dep or an output must be a regular file or a folder; replace it",
                        Location(file=rel))

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            self.db.stat_store(pending)

    def forget(self, rel: str) -> None:
        """Drop memoised hashes at or below ``rel`` (after a stage rewrote it)."""
        with self._lock:
            for key in [k for k in self._memo if k == rel or k.startswith(rel.rstrip("/") + "/")]:
                del self._memo[key]

    def hash_path(self, rel: str) -> str | None:
        """Hash of a workspace-relative file or folder; ``None`` if it does not exist."""
        with self._lock:
            if rel in self._memo:
                return self._memo[rel]
        abspath = os.path.join(self.workspace, rel)
        try:
            st = os.stat(abspath)
        except FileNotFoundError:
            digest = None
            self._observe(abspath, None)
        except OSError as exc:  # a symlink loop, a path through a file: the path cannot be read
            from ascendpipe.errors import Location, UserError

            raise UserError(f"'{rel}' cannot be read: {exc.strerror}; replace it", Location(file=rel)) from None
        else:
            self._observe(abspath, st)
            if stat.S_ISDIR(st.st_mode):  # the stat just taken (os.path.isdir would take another)
                digest = self._hash_dir(abspath)[0]
            else:
                digest = self._stat_hash(abspath, st)
        with self._lock:
            self._memo[rel] = digest
        return digest

    def _hash_dir(self, abspath: str) -> tuple[str, list[dict]]:
        entries = []
        skip = len(os.path.join(abspath, ""))  # every path os.walk gives starts with abspath + "/"
        for root, dirs, files in os.walk(abspath):
            dirs.sort()
            if self.observed is not None and root != abspath:  # a file made or removed in it moves its mtime
                try:
                    self._observe(root, os.stat(root))
                except OSError:
                    self._observe(root, None)
            for name in sorted(files):
                full = os.path.join(root, name)
                try:
                    st = os.stat(full)
                except OSError as exc:  # a dangling link or a loop inside a folder: its content is unknown
                    from ascendpipe.errors import Location, UserError

                    rel = os.path.relpath(full, self.workspace)
                    raise UserError(f"'{rel}' cannot be read: {exc.strerror}; replace it", Location(file=rel)) from None
                self._observe(full, st)
                entries.append(
                    {"path": full[skip:].replace(os.sep, "/"), "size": st.st_size, "hash": self._stat_hash(full, st)}
                )
        return hash_bytes(manifest_bytes(entries)) + DIR_SUFFIX, entries

    def dir_manifest(self, rel: str) -> tuple[str, list[dict]]:
        return self._hash_dir(os.path.join(self.workspace, rel))
