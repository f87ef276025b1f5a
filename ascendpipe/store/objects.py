"""The content-addressed object store under ``cache/objects/``.

Files are stored by their sha256 (``ab/cdef...``); a folder is stored as its manifest (an object
named ``<hash>.dir`` listing relative paths and file hashes) plus each file. Objects are written to a
temporary name and renamed, so a half-written object never carries a valid name. Every restore
re-hashes what it copies: a corrupted object is detected, deleted and reported, never used.
"""

from __future__ import annotations

import json
import os

from ascendpipe.fsutil import copy_atomic, write_bytes_atomic
from ascendpipe.store.hashing import DIR_SUFFIX, hash_file, manifest_bytes, hash_bytes


class CorruptObject(Exception):
    def __init__(self, digest: str, found: str | None):
        super().__init__(f"cache object {digest[:12]} is corrupted (content hashes to {str(found)[:12]})")
        self.digest = digest


class ObjectStore:
    def __init__(self, root: str):
        self.root = os.path.join(root, "objects")

    def path_of(self, digest: str) -> str:
        return os.path.join(self.root, digest[:2], digest[2:])

    def has(self, digest: str) -> bool:
        return os.path.exists(self.path_of(digest))

    def put_file(self, src: str, digest: str) -> None:
        dst = self.path_of(digest)
        if not os.path.exists(dst):
            copy_atomic(src, dst)

    def put_dir(self, src: str, digest: str, entries: list[dict]) -> None:
        for e in entries:
            self.put_file(os.path.join(src, e["path"]), e["hash"])
        dst = self.path_of(digest)
        if not os.path.exists(dst):
            write_bytes_atomic(dst, manifest_bytes(entries))

    def put(self, abspath: str, digest: str, hasher_manifest=None) -> None:
        if digest.endswith(DIR_SUFFIX):
            self.put_dir(abspath, digest, hasher_manifest)
        else:
            self.put_file(abspath, digest)

    def _checked_file(self, digest: str) -> str:
        path = self.path_of(digest)
        if not os.path.exists(path):
            raise FileNotFoundError(digest)
        found = hash_file(path)
        if found != digest:
            os.unlink(path)  # never hand out a bad object again
            raise CorruptObject(digest, found)
        return path

    def verify(self, digest: str) -> None:
        """Raise ``FileNotFoundError`` or ``CorruptObject`` unless the object (and its files) are intact."""
        if digest.endswith(DIR_SUFFIX):
            manifest_path = self.path_of(digest)
            if not os.path.exists(manifest_path):
                raise FileNotFoundError(digest)
            with open(manifest_path, "rb") as f:
                data = f.read()
            if hash_bytes(data) + DIR_SUFFIX != digest:
                os.unlink(manifest_path)
                raise CorruptObject(digest, hash_bytes(data))
            for e in json.loads(data):
                self._checked_file(e["hash"])
        else:
            self._checked_file(digest)

    def restore(self, digest: str, dest: str) -> None:
        """Materialise an object at ``dest`` atomically (verified while copying)."""
        import shutil
        import tempfile

        parent = os.path.dirname(dest) or "."
        os.makedirs(parent, exist_ok=True)
        if digest.endswith(DIR_SUFFIX):
            self.verify(digest)
            with open(self.path_of(digest), "rb") as f:
                entries = json.loads(f.read())
            tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-restore-")
            try:
                for e in entries:
                    target = os.path.join(tmp, e["path"])
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copyfile(self.path_of(e["hash"]), target)
                replace_path(tmp, dest)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        else:
            src = self._checked_file(digest)
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            copy_atomic(src, dest)

    def all_digests(self):
        if not os.path.isdir(self.root):
            return
        for prefix in os.listdir(self.root):
            folder = os.path.join(self.root, prefix)
            if not os.path.isdir(folder):
                continue
            for rest in os.listdir(folder):
                if not rest.startswith(".tmp-"):
                    yield prefix + rest, os.path.join(folder, rest)

    def manifest(self, digest: str) -> list[dict]:
        with open(self.path_of(digest), "rb") as f:
            return json.loads(f.read())


def replace_path(src: str, dest: str) -> None:
    """Put ``src`` (file or folder) at ``dest``, replacing what is there, without a moment where a
    partial ``dest`` exists: the old one is moved aside first and removed after."""
    import shutil
    import tempfile

    if os.path.lexists(dest):
        trash = tempfile.mkdtemp(dir=os.path.dirname(dest) or ".", prefix=".tmp-old-")
        aside = os.path.join(trash, "old")
        os.replace(dest, aside)
        os.replace(src, dest)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(src, dest)
