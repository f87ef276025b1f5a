"""The content-addressed object store under ``cache/objects/``.

Files are stored by their sha256 (``ab/cdef...``); a folder is stored as its manifest (an object
named ``<hash>.dir`` listing relative paths and file hashes) plus each file. Objects are written to a
temporary name and renamed, so a half-written object never carries a valid name. Every restore
re-hashes what it copies: a corrupted object is detected, deleted and reported, never used.

A file of at least ``SHARE_MIN`` bytes shares its bytes between the workspace and the store (a
reflink where the file system shares blocks, else a hard link): a 2.4 GB model's weights cost the
disk once, in ``build/`` and ``cache/`` together. Outputs are never written in place (a stage writes
a fresh folder and renames it over the old one; a ``run`` stage's outputs are removed before its
command runs), so a link never lets a later write reach an object; and a restore re-hashes the
object first, as before. onnx refuses to load a hard-linked external weights file ("a potential
hardlink attack"); ascendpipe reads them with its own reader and onnxruntime, which take them
(docs/emulation.md, "Models past 2 GB").
"""

from __future__ import annotations

import json
import os

from ascendpipe.fsutil import copy_atomic, hard_links_allowed, link_atomic, share_file, write_bytes_atomic
from ascendpipe.store.hashing import DIR_SUFFIX, hash_file, manifest_bytes, hash_bytes


class CorruptObject(Exception):
    def __init__(self, digest: str, found: str | None, why: str | None = None):
        super().__init__(f"cache object {digest[:12]} is corrupted ({why or f'content hashes to {str(found)[:12]}'})")
        self.digest = digest


class UnsafeName(ValueError):
    """A digest or a manifest path not in the store's own shape: never made into a path."""


_HEX = frozenset("0123456789abcdef")


def is_file_digest(value) -> bool:
    """A file object's name: a sha256, 64 lowercase hex digits."""
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def is_digest(value) -> bool:
    """An object's name: a file's sha256, or a folder's (its manifest's sha256 plus ``.dir``)."""
    if isinstance(value, str) and value.endswith(DIR_SUFFIX):
        value = value[:-len(DIR_SUFFIX)]
    return is_file_digest(value)


def path_problem(rel) -> str | None:
    """Why ``rel`` is not a relative path the store would write (None when it is one): a non-empty
    string of '/'-separated parts, none empty, '.' or '..', no absolute start, backslash or NUL."""
    if not isinstance(rel, str) or not rel:
        return "is not a non-empty string"
    if "\x00" in rel:
        return "holds a NUL character"
    if "\\" in rel:
        return "holds a backslash"
    if rel.startswith("/"):
        return "is an absolute path"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "has an empty, '.' or '..' part"
    return None


def manifest_problem(entries) -> str | None:
    """Why a folder manifest is not one the store makes (None when it is): a list of
    {"path", "hash", "size"} with safe, distinct paths, none inside another, and sha256 hashes."""
    if not isinstance(entries, list):
        return "is not a list of files"
    seen = set()
    for e in entries:
        if not isinstance(e, dict):
            return "lists something that is not a file entry"
        rel = e.get("path")
        why = path_problem(rel)
        if why:
            return f"lists the path {rel!r}, which {why}"
        if not is_file_digest(e.get("hash")):
            return f"gives {rel!r} the hash {e.get('hash')!r}, which is not a sha256"
        size = e.get("size", 0)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return f"gives {rel!r} the size {size!r}"
        if rel in seen:
            return f"lists {rel!r} twice"
        seen.add(rel)
    for rel in seen:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in seen:
                return f"lists {rel!r} inside the file {'/'.join(parts[:i])!r}"
    return None


def parse_manifest(data: bytes, digest: str) -> list[dict]:
    """A manifest's entries, checked for the store's shape (``UnsafeName`` if not)."""
    try:
        entries = json.loads(data)
    except ValueError:
        raise UnsafeName(f"folder manifest {digest[:12]} is not JSON") from None
    why = manifest_problem(entries)
    if why:
        raise UnsafeName(f"folder manifest {digest[:12]} {why}")
    return entries


class ObjectStore:
    def __init__(self, root: str):
        self.root = os.path.join(root, "objects")

    def path_of(self, digest: str) -> str:
        if not is_digest(digest):  # a name read from elsewhere never becomes a path ('../', '/etc')
            raise UnsafeName(f"{digest!r} is not a cache object's name")
        return os.path.join(self.root, digest[:2], digest[2:])

    def has(self, digest: str) -> bool:
        return is_digest(digest) and os.path.exists(self.path_of(digest))

    def target(self, digest: str) -> str:
        """Where to write an object: ``path_of``, with no link among the folders under the store's
        parent (``cache/``), so nothing is written through one out of the workspace."""
        from ascendpipe.store.statefiles import refuse_linked_dirs

        path = self.path_of(digest)
        refuse_linked_dirs(os.path.dirname(self.root), path, "a folder of the cache")
        return path

    def put_file(self, src: str, digest: str, *, share: bool = False) -> None:
        """Store ``src`` as the object ``digest``. With ``share`` (``src`` is a stage's output: ours,
        never written in place; never a user's file), a big file (``SHARE_MIN``) shares its bytes with
        the object (``share_file``: a reflink, else a hard link), so an output and its cache entry
        cost the disk once; and a big output whose object is there already, as another inode, becomes
        a link to it (once the object is checked), so equal outputs of several stages cost it once."""
        dst = self.target(digest)
        big = share and _big(src) and not os.path.islink(src)  # a link an output holds may reach a user's file
        if not os.path.exists(dst):
            if big:
                share_file(src, dst, link=True)
            else:
                copy_atomic(src, dst)
            return
        if big and hard_links_allowed() and not os.path.samefile(src, dst) and hash_file(dst) == digest:
            link_atomic(dst, src)

    def put_dir(self, src: str, digest: str, entries: list[dict], *, share: bool = False) -> None:
        why = manifest_problem(entries)
        if why:
            raise UnsafeName(f"{src}: the folder {why}; the cache stores only plain relative names: rename it")
        for e in entries:
            self.put_file(os.path.join(src, e["path"]), e["hash"], share=share)
        dst = self.target(digest)
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
            try:
                entries = parse_manifest(data, digest)
            except UnsafeName as exc:  # the store never makes one: not used, and dropped
                os.unlink(manifest_path)
                raise CorruptObject(digest, None, str(exc)) from None
            for e in entries:
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
            entries = self.manifest(digest)
            tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-restore-")
            try:
                for e in entries:
                    target = os.path.join(tmp, e["path"])
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    _materialise(self.path_of(e["hash"]), target)
                replace_path(tmp, dest)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        else:
            src = self._checked_file(digest)
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            _materialise(src, dest)

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
        """A folder's entries, in the store's shape (``UnsafeName``, a ValueError, if not)."""
        with open(self.path_of(digest), "rb") as f:
            return parse_manifest(f.read(), digest)


SHARE_MIN = 1 << 20  # files this big share their bytes between outputs and objects (smaller: a copy, cheap)


def _big(path: str) -> bool:
    return os.path.getsize(path) >= SHARE_MIN


def _materialise(obj: str, dest: str) -> None:
    """An object's bytes at ``dest`` (checked already): shared where it is big (a reflink, else a
    hard link: a restored output costs no disk), else a copy."""
    if _big(obj):
        share_file(obj, dest, link=True)
    else:
        copy_atomic(obj, dest)


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
