"""Shared dumps in the content-addressed cache: a model's dump for one feed is made once.

Every compare stage of a pipeline dumps the same fp32 golden for the same inputs, and two ``dump``
stages of one model dump the same tensors: a dump is keyed on what decides its bytes (the model's
content and the files beside it that the run reads, the feeds' content, the dump settings, the tool
versions) and stored as a folder object in ``cache/objects/`` (the store's ``.dir`` manifest plus
one object per file), with ``cache/dumps/<key>`` naming the folder's digest. It survives
``rm -rf build``; ``gc`` keeps it while a recorded stage output lists it in its ``object_refs.json``
(``OBJECT_REFS``), and drops it with the last such output.

Concurrency: the first stage to want a key takes a per-key ``flock`` and makes the dump; another
stage (a ``-j 2`` thread, a Ray worker on the same host) waits for the lock and then finds it made.
Every write is atomic (a temp folder, objects renamed into place, the key file replaced last), so a
kill leaves either no entry or a whole one; the store's objects are never partial.

Scale-out: on a worker with a remote cache, ``served`` gives the stage a ``DumpCache`` in the host's
worker cache backed by the remote: a key is looked up there before dumping, and a dump made is
uploaded (files, manifest, then the key: ``dumps/ab/cdef...``), so a golden is dumped once per cluster.

Reading: a cached dump is read in place, from the objects (no copy); each file is hashed as it is
read, so a corrupted object is reported (``CorruptObject``) and removed, never used.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ascendpipe.contract import CACHE_DIR
from ascendpipe.store.hashing import DIR_SUFFIX, hash_bytes, hash_file, manifest_bytes
from ascendpipe.store.objects import CorruptObject, ObjectStore, UnsafeName, is_file_digest, parse_manifest

KEY_FORMAT = 1  # bump when what goes into a key changes
REFS_DIR = "dumps"
OBJECT_REFS = "object_refs.json"  # in a stage's output folder: cache objects that folder's files stand for
OBJECT_REFS_FORMAT = "ascendpipe-object-refs/1"
SIDE_FILES = ("runtime.json", "precision_plan.json")  # read by a dump beside the model (session options, compaction)


# --- keys (pure but for reading the files they name) ---------------------------------------------

def feeds_digest(feeds: dict) -> str:
    """sha256 over each feed's name, dtype, shape and bytes (in name order)."""
    import numpy as np

    h = hashlib.sha256()
    for name in sorted(feeds):
        # C order, rank kept: the same bytes and key as before for any array of rank 1 and up; a 0-d feed
        # hashes as shape [] (ascontiguousarray made it [1], the key of a one-element array)
        array = np.require(feeds[name], requirements="C")
        h.update(json.dumps([name, array.dtype.str, list(array.shape)]).encode())
        if array.size:  # an empty feed (a 0-length KV cache) has no bytes; memoryview refuses to cast it
            h.update(memoryview(array).cast("B"))
    return h.hexdigest()


def model_files(model: Path) -> dict[str, str]:
    """The files whose content decides the model's run: the model, its external weights (each
    reference checked by the strict reader, ``onnxexternal.references``: never a file outside the
    model's folder), and the side files a dump reads beside it; name (relative to the model's folder)
    -> sha256."""
    from ascendpipe import onnxexternal

    model = Path(model)
    files = {model.name: hash_file(str(model))}
    for ref in onnxexternal.references(model):
        if ref.location not in files:
            files[ref.location] = hash_file(ref.path)
    for name in SIDE_FILES:
        path = model.parent / name
        if path.is_file():
            files[name] = hash_file(str(path))
    return files


def dump_key(model: Path, feeds: dict, *, settings: dict, tools: dict) -> str:
    """The key of a dump: model files, feeds, dump settings (fusions, format, compaction) and tool versions."""
    doc = {"key_format": KEY_FORMAT, "model": model_files(model), "feeds": feeds_digest(feeds),
           "settings": settings, "tools": tools}
    return hash_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


# --- the cache ------------------------------------------------------------------------------------

class CachedDump:
    """A dump folder held in the object store, read in place."""

    def __init__(self, objects: ObjectStore, key: str, digest: str, entries: list[dict]):
        self.objects = objects
        self.key = key
        self.digest = digest
        self.files = {e["path"]: e["hash"] for e in entries}
        self.bytes = sum(int(e.get("size", 0)) for e in entries)
        self._index = None

    def __repr__(self):
        return f"CachedDump(key={self.key[:12]}, digest={self.digest[:12]}, bytes={self.bytes})"

    def __str__(self):  # what a message names
        return f"cached dump {self.key[:12]}"

    def __fspath__(self) -> str:
        """A name for messages that join it with a file name (``Path(dump) / entry["file"]``): the
        dump's key file. The tensors are read through ``load_tensor``, never through this path."""
        return os.path.join(os.path.dirname(str(self.objects.root)), REFS_DIR, self.key)

    def read_bytes(self, rel: str) -> bytes:
        """A file of the dump, hashed as read: a corrupted object is removed and raises ``CorruptObject``."""
        digest = self.files.get(rel)
        if digest is None:
            raise FileNotFoundError(f"{rel} is not in {self}")
        with open(self.objects.path_of(digest), "rb") as handle:
            data = handle.read()
        found = hash_bytes(data)
        if found != digest:
            try:
                os.unlink(self.objects.path_of(digest))
            except OSError:
                pass
            raise CorruptObject(digest, found)
        return data

    def read_index(self) -> dict:
        if self._index is None:
            self._index = json.loads(self.read_bytes("index.json"))
        return self._index

    def load_tensor(self, rel: str):
        """A tensor file as a read-only array viewing the verified bytes (no second copy)."""
        import io

        import numpy as np

        data = self.read_bytes(rel)
        stream = io.BytesIO(data)
        from ascendpipe.npyheader import read_array_header

        version = np.lib.format.read_magic(stream)
        shape, fortran, dtype = read_array_header(stream, version)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        array = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
        return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)

    def copy_to(self, dest: Path) -> None:
        """The dump as a plain folder at ``dest`` (created; files verified as copied)."""
        from ascendpipe.fsutil import write_bytes_atomic

        for rel in sorted(self.files):
            write_bytes_atomic(Path(dest) / rel, self.read_bytes(rel))


# scratch workspace -> (cache root, remote) for the stage a scale-out worker runs there (``served``)
_SERVED: dict[str, "served"] = {}


class served:
    """While a scale-out worker runs a stage in the scratch folder ``workspace``, the stage's shared
    dumps (``DumpCache.for_workspace``) live in the host's worker cache ``cache_root``, backed by the
    build's ``remote``: one golden per model and inputs across the cluster, not one per stage."""

    def __init__(self, workspace: str | os.PathLike, cache_root: str | os.PathLike, remote):
        self.workspace = os.path.realpath(workspace)
        self.cache_root = str(cache_root)
        self.remote = remote
        self.notes: list[str] = []  # what went wrong with the remote, for the stage's log

    def __enter__(self):
        _SERVED[self.workspace] = self
        return self

    def __exit__(self, *exc):
        _SERVED.pop(self.workspace, None)
        return False


class DumpCache:
    """``remote`` (a ``store.remote.RemoteCache``, or None): a key missing here is looked up there
    (``dumps/ab/cdef...`` names its folder, fetched and verified into this store) before anything is
    dumped, and a dump made here is uploaded there (files, manifest, then the key). Both best
    effort: a remote that fails, lacks the dump or holds it damaged or out of shape means a dump here."""

    def __init__(self, cache_root: str | os.PathLike, remote=None, notes: list | None = None):
        self.root = Path(cache_root)
        self.objects = ObjectStore(str(self.root))
        self.refs = self.root / REFS_DIR
        self.remote = remote
        self.remote_notes: list[str] = [] if notes is None else notes  # remote trouble (best effort: never fatal)

    @classmethod
    def for_workspace(cls, workspace: str | os.PathLike) -> "DumpCache":
        found = _SERVED.get(os.path.realpath(workspace))
        if found is not None:  # a stage on a scale-out worker
            return cls(found.cache_root, remote=found.remote, notes=found.notes)
        return cls(os.path.join(str(workspace), CACHE_DIR))

    def _ref(self, key: str) -> Path:
        return self.refs / key

    def _check_refs(self) -> None:
        """``cache/dumps/`` is never a link out of the workspace (keys, locks and scratch go there)."""
        from ascendpipe.store.statefiles import refuse_linked_dirs

        refuse_linked_dirs(str(self.root), str(self.refs / "_"), "a folder of the cache")

    def get(self, key: str) -> CachedDump | None:
        """The cached dump of ``key`` if it is whole (its manifest and every file present); else None."""
        try:
            digest = self._ref(key).read_text().strip()
        except OSError:
            return None
        if not digest.endswith(DIR_SUFFIX):
            return None
        try:
            with open(self.objects.path_of(digest), "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        if hash_bytes(data) + DIR_SUFFIX != digest:
            return None
        try:
            entries = parse_manifest(data, digest)
        except UnsafeName:
            return None  # never made by the store: dump again
        if not all(os.path.exists(self.objects.path_of(e["hash"])) for e in entries):
            return None  # gc or a hand removed part of it: dump again
        return CachedDump(self.objects, key, digest, entries)

    def drop(self, key: str) -> None:
        try:
            self._ref(key).unlink()
        except OSError:
            pass

    def put(self, key: str, folder: Path, *, move: bool = False) -> CachedDump:
        """Store a dump folder under ``key``. ``move``: the folder's files are renamed into the store
        (the folder is the caller's scratch), else copied."""
        from ascendpipe.fsutil import copy_atomic, write_text_atomic

        folder = Path(folder)
        entries = []
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            digest = hash_file(str(path))
            entries.append({"path": rel, "size": path.stat().st_size, "hash": digest})
            target = self.objects.target(digest)
            if os.path.exists(target):
                continue
            if move:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                try:
                    os.replace(path, target)  # atomic: the object appears whole or not at all
                    continue
                except OSError:  # another file system: copy instead
                    pass
            copy_atomic(path, target)
        manifest = manifest_bytes(entries)
        digest = hash_bytes(manifest) + DIR_SUFFIX
        from ascendpipe.fsutil import write_bytes_atomic

        if not os.path.exists(self.objects.target(digest)):
            write_bytes_atomic(self.objects.target(digest), manifest)
        self._check_refs()
        write_text_atomic(self._ref(key), digest + "\n")  # last: the key names a whole dump
        return CachedDump(self.objects, key, digest, entries)

    def link(self, key: str, digest: str) -> bool:
        """Name the folder object ``digest`` (already whole in the store, e.g. fetched from a remote)
        as the dump of ``key``, unless a whole dump already has that key. Whether it now does."""
        from ascendpipe.fsutil import write_text_atomic

        if not is_dump_ref(key, digest):
            return False
        if self.get(key) is not None:
            return True
        self._check_refs()
        self.refs.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self._ref(key), digest + "\n")
        if self.get(key) is None:  # not whole after all: leave no key naming it
            self.drop(key)
            return False
        return True

    def get_or_make(self, key: str, make) -> tuple[CachedDump, bool]:
        """(the dump of ``key``, whether this call made it). ``make(folder)`` writes a dump folder."""
        import fcntl
        import shutil
        import tempfile

        found = self.get(key)
        if found is not None:
            return found, False
        from ascendpipe.store.statefiles import open_nofollow

        self._check_refs()
        self.refs.mkdir(parents=True, exist_ok=True)
        fd = open_nofollow(str(self.refs / f".lock-{key}"), os.O_RDWR | os.O_CREAT, "the dump lock")  # never a link out
        with os.fdopen(fd, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released on close, or by the kernel if killed
            try:
                found = self.get(key) or self._from_remote(key)  # made while we waited, or elsewhere
                if found is not None:
                    return found, False
                scratch = Path(tempfile.mkdtemp(dir=self.refs, prefix=f".tmp-{key[:12]}-"))
                try:
                    make(scratch / "dump")
                    made = self.put(key, scratch / "dump", move=True)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                self._to_remote(made)
                return made, True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _from_remote(self, key: str) -> CachedDump | None:
        """The dump of ``key`` fetched from the remote (every object hashed on arrival) and named
        here, or None: no remote, no such dump there, or one that cannot be had whole."""
        if self.remote is None:
            return None
        from ascendpipe.errors import UserError

        try:
            digest = self.remote.get_dump(key)
            if digest is None:
                return None
            self.remote.fetch_object(self.objects, digest)  # checks the manifest's names before writing
        except FileNotFoundError:
            self.remote_notes.append(f"dump {key[:12]}: named by the remote but not whole there")
            return None
        except (CorruptObject, UnsafeName, UserError, OSError) as exc:  # damaged (deleted there), hostile, unreachable
            self.remote_notes.append(f"dump {key[:12]}: not fetched from the remote ({exc})")
            return None
        return self.get(key) if self.link(key, digest) else None

    def _to_remote(self, dump: CachedDump) -> None:
        """Upload a dump made here (best effort: the stage's results never depend on it)."""
        if self.remote is None:
            return
        from ascendpipe.errors import UserError

        try:
            self.remote.put_dump(self.objects, dump.key, dump.digest)
        except (CorruptObject, UnsafeName, UserError, OSError) as exc:
            self.remote_notes.append(f"dump {dump.key[:12]}: not uploaded to the remote ({exc})")


def refs_document(objects: list[dict]) -> dict:
    """``object_refs.json``: the cache objects a stage's results were computed from, each
    {"what", "digest", ...} (a shared dump: its folder digest, key and bytes)."""
    return {"format": OBJECT_REFS_FORMAT, "objects": objects}


def _ref_entries(document: bytes) -> list[dict]:
    """The entries of an ``object_refs.json`` ([] for anything unreadable)."""
    try:
        objects = json.loads(document).get("objects", [])
    except (ValueError, AttributeError):
        return []
    return objects if isinstance(objects, list) and all(isinstance(o, dict) for o in objects) else []


def is_dump_ref(key, digest) -> bool:
    """Whether (key, digest) have the shapes the cache gives them (a sha256 key, a folder digest), so
    they can become paths: a name read from elsewhere (a remote entry) with '../' in it never does."""
    return is_file_digest(key) and isinstance(digest, str) and digest.endswith(DIR_SUFFIX) and is_file_digest(digest[:-len(DIR_SUFFIX)])


def referenced_dumps(document: bytes) -> dict[str, str]:
    """The shared dumps an ``object_refs.json`` names, key -> folder digest."""
    return {o["key"]: o["digest"] for o in _ref_entries(document) if is_dump_ref(o.get("key"), o.get("digest"))}


def referenced_objects(document: bytes) -> list[str]:
    """The digests an ``object_refs.json`` names (for gc)."""
    return [o["digest"] for o in _ref_entries(document) if isinstance(o.get("digest"), str)]
