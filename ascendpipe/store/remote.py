"""The remote cache: the object store's layout (``objects/ab/cdef...``, folders as ``.dir``
manifests) under a URL, plus the run-cache index as one JSON entry per stage key
(``runs/ab/cdef....json``: outputs, metrics, remedy files, info), and the shared dumps' keys
(``dumps/ab/cdef...``: a dump key -> its folder digest, so one golden is dumped once per cluster).

It speaks fsspec, so ``s3://bucket/prefix`` (through s3fs: AWS, MinIO, Huawei OBS), ``file://`` or a
plain folder all work. Credentials and endpoints come only from the environment and the usual AWS
config files (botocore's chain: ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ``~/.aws/credentials``,
``AWS_ENDPOINT_URL``...); nothing of them is stored in records or in the entries.

Every object is written complete before its name exists (an S3 PUT is atomic; local files go
through a temp name), files before the manifests naming them, and objects before the entry naming
them, so a reader never meets an entry whose objects are still missing. Every download is hashed
before use: a corrupted remote object is deleted from the remote and reported, never used.

A remote is untrusted input: every name read from it (an entry's digests, output paths, shared dump
keys, remedy hashes; a folder manifest's paths and hashes) is checked against the store's own shapes
(``objects.is_digest``, ``objects.path_problem``) before any path is made of it, and a whole entry
(with the manifests of its folders) is checked before anything is written. A name out of shape is
``RemoteUntrusted``, one line naming the remote and the entry. A folder remote holds no links: a
symbolic link on the way to an object or an entry is refused the same way, never followed.
"""

from __future__ import annotations

import json
import os

from ascendpipe.errors import UserError
from ascendpipe.store.hashing import DIR_SUFFIX, hash_bytes, hash_file
from ascendpipe.store.objects import (CorruptObject, UnsafeName, is_digest, is_file_digest, manifest_problem,
                                      path_problem)

ENTRY_FORMAT = "ascendpipe-remote-entry/1"
# short timeouts and few retries: an unreachable remote must fail in seconds, not minutes
_S3_CONFIG = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 3, "mode": "standard"}}


def object_path(digest: str) -> str:
    return f"objects/{digest[:2]}/{digest[2:]}"


def entry_path(key: str) -> str:
    return f"runs/{key[:2]}/{key[2:]}.json"


def dump_path(key: str) -> str:
    """The remote's name for a shared dump's key (``dumps/ab/cdef...``): its folder digest, one line."""
    return f"dumps/{key[:2]}/{key[2:]}"


def split_url(url: str) -> tuple[str, str]:
    """(protocol, root without protocol): ``s3://b/p/`` -> ('s3', 'b/p'); a plain path -> ('file', abs)."""
    if "://" not in url:
        return "file", os.path.abspath(url)
    protocol, _, rest = url.partition("://")
    protocol = protocol.lower()
    rest = rest.rstrip("/")
    if protocol == "file":
        if not rest:  # `file://` alone would be the file system's root
            raise UserError(f"remote '{url}' names no folder; use file:///PATH/TO/FOLDER or a plain folder path")
        return "file", os.path.abspath(rest if rest.startswith("/") else "/" + rest)
    if not rest:
        raise UserError(f"remote '{url}' names no bucket; use {protocol}://BUCKET/PREFIX")
    return protocol, rest


class RemoteUnreachable(UserError):
    pass


class RemoteUntrusted(UserError):
    """A name from the remote out of the store's shape (or a link in a folder remote): refused
    before any path is made of it, with nothing written or deleted."""


def entry_problem(key: str, entry: dict) -> str | None:
    """Why a remote run-cache entry is not one the store writes (None when it is one)."""
    outs = entry.get("outs")
    for out, digest in outs.items():
        why = path_problem(out)
        if why:
            return f"names the output {out!r}, which {why}"
        if not is_digest(digest):
            return f"gives {out!r} the digest {digest!r}, which is not a cache object's name"
    dumps = entry.get("dumps")
    if dumps is not None:
        if not isinstance(dumps, dict):
            return "has a 'dumps' field that is not a mapping"
        for dump_key, digest in dumps.items():
            if not is_file_digest(dump_key) or not (is_digest(digest) and digest.endswith(DIR_SUFFIX)):
                return f"names the shared dump {dump_key!r} -> {digest!r}, which is not a dump key and folder digest"
    remedy = entry.get("remedy")
    if remedy is not None:
        if not isinstance(remedy, list):
            return "has a 'remedy' field that is not a list"
        for blob in remedy:
            if not isinstance(blob, dict) or not is_file_digest(blob.get("hash")):
                return f"lists the remedy file {blob!r}, whose hash is not a sha256"
            name, path = blob.get("name"), blob.get("path")
            if path_problem(name) or "/" in name:  # a name, never a path (the record's 'path' is only shown)
                return f"lists a remedy file named {name!r}, which is not a plain name"
            if path is not None and not isinstance(path, str):
                return f"lists the remedy file {name!r} at {path!r}, which is not text"
            if not isinstance(blob.get("content", ""), str):
                return f"lists the remedy file {name!r} with content that is not text"
    for field in ("metrics", "info"):
        if entry.get(field) is not None and not isinstance(entry[field], dict):
            return f"has a '{field}' field that is not a mapping"
    return None


class RemoteCache:
    """One remote cache. ``fs`` may be handed in (tests); otherwise it is made from the URL."""

    def __init__(self, url: str, fs=None):
        self.url = url
        self.protocol, self.root = split_url(url)
        self._fs = fs

    # -- plumbing ------------------------------------------------------------------------------
    @property
    def fs(self):
        if self._fs is None:
            self._fs = _filesystem(self.protocol, self.url)
        return self._fs

    def _path(self, rel: str) -> str:
        """The remote path of ``rel`` (one of ``object_path``/``entry_path``'s names). A folder
        remote's path is refused if any part of it below the root is a symbolic link."""
        why = path_problem(rel)
        if why:
            self._refuse(repr(rel), why)
        if self.protocol == "file":
            path = self.root
            for part in rel.split("/"):
                path = os.path.join(path, part)
                if os.path.islink(path):
                    self._refuse(rel, f"is reached through the symbolic link {path}; a remote folder holds no links: remove it")
        return f"{self.root}/{rel}"

    def _refuse(self, what: str, why: str):
        raise RemoteUntrusted(f"remote cache {self.url}: {what} {why}; nothing was written",
                              hint="remove it from the remote, or use another remote")

    def _call(self, what: str, fn, *args, **kw):
        """Run one remote operation; missing objects are ``FileNotFoundError``, anything that says
        the remote cannot be used is one clear ``RemoteUnreachable`` line."""
        try:
            return fn(*args, **kw)
        except FileNotFoundError:
            raise
        except (UserError, CorruptObject, TypeError, AttributeError, NameError):
            raise  # ours, or a bug: not the remote's doing
        except Exception as exc:  # botocore/aiohttp/OS errors: one line, no traceback
            raise RemoteUnreachable(f"remote cache {self.url} unreachable while {what}: {_reason(exc)}", hint=_HINT) from None

    def check(self) -> None:
        """Fail now, with one line, if the remote cannot be listed (reachability and credentials)."""
        def probe():
            if self.protocol == "file":
                os.makedirs(self.root, exist_ok=True)
                return
            bucket = self.root.split("/", 1)[0]
            if self.protocol in ("s3", "s3a", "obs"):
                self.fs.call_s3("head_bucket", Bucket=bucket)  # one request, whatever the bucket holds
            else:
                self.fs.ls(bucket, detail=False)

        try:
            self._call("connecting", probe)
        except FileNotFoundError:
            raise RemoteUnreachable(f"remote cache {self.url}: the bucket does not exist", hint=_HINT) from None

    def exists(self, rel: str) -> bool:
        return bool(self._call(f"checking {rel}", self.fs.exists, self._path(rel)))

    def read_bytes(self, rel: str) -> bytes:
        return self._call(f"reading {rel}", self.fs.cat_file, self._path(rel))

    def write_bytes(self, rel: str, data: bytes) -> None:
        path = self._path(rel)
        if self.protocol == "file":
            from ascendpipe.fsutil import write_bytes_atomic

            self._call(f"writing {rel}", write_bytes_atomic, path, data)
            return
        self._call(f"writing {rel}", self.fs.pipe_file, path, data)

    def upload(self, local: str, rel: str) -> None:
        path = self._path(rel)
        if self.protocol == "file":
            from ascendpipe.fsutil import copy_atomic

            self._call(f"writing {rel}", copy_atomic, local, path)
            return
        self._call(f"writing {rel}", self.fs.put_file, local, path)

    def download(self, rel: str, local: str) -> None:
        """Copy ``rel`` to ``local`` (a temp name the caller renames once the content is verified)."""
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        self._call(f"reading {rel}", self.fs.get_file, self._path(rel), local)

    def delete(self, rel: str) -> None:
        try:
            self._call(f"deleting {rel}", self.fs.rm_file, self._path(rel))
        except FileNotFoundError:
            pass

    # -- run-cache entries ---------------------------------------------------------------------
    def get_entry(self, key: str) -> dict | None:
        """The entry for a stage key, or None (absent, or unreadable: then it is rebuilt)."""
        try:
            data = self.read_bytes(entry_path(key))
        except FileNotFoundError:
            return None
        try:
            entry = json.loads(data)
        except ValueError:
            return None
        if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT or entry.get("key") != key:
            return None
        if not isinstance(entry.get("outs"), dict):
            return None
        why = entry_problem(key, entry)
        if why:
            self._refuse(f"entry {entry_path(key)}", why)
        return entry

    def put_entry(self, key: str, entry: dict) -> None:
        body = {"format": ENTRY_FORMAT, "key": key, **{k: v for k, v in entry.items() if k not in ("format", "key")}}
        self.write_bytes(entry_path(key), json.dumps(body, sort_keys=True, default=str).encode())

    # -- shared dumps (store/dump_cache.py) ----------------------------------------------------
    def get_dump(self, key: str) -> str | None:
        """The folder digest the remote names for a shared dump key, or None (absent, or out of the
        store's shape: such a ref is never made a path; the dump is made again and the ref replaced)."""
        from ascendpipe.store.dump_cache import is_dump_ref

        if not is_file_digest(key):
            return None
        try:
            digest = self.read_bytes(dump_path(key)).decode("ascii", "replace").strip()
        except FileNotFoundError:
            return None
        return digest if is_dump_ref(key, digest) else None

    def put_dump(self, objects, key: str, digest: str, known: set | None = None) -> int:
        """Publish a shared dump: its files, then its manifest (``push_object``), then the key naming
        it, so no reader ever finds a key whose dump is not whole. Returns the objects uploaded."""
        from ascendpipe.store.dump_cache import is_dump_ref

        if not is_dump_ref(key, digest):
            raise UnsafeName(f"{key!r} -> {digest!r} is not a dump key and folder digest")
        sent = self.push_object(objects, digest, known)
        self.write_bytes(dump_path(key), (digest + "\n").encode())
        return sent

    # -- objects -------------------------------------------------------------------------------
    def push_object(self, objects, digest: str, known: set | None = None) -> int:
        """Upload one object (and a folder's files) from a local ObjectStore unless the remote has it.
        Each local object is verified first: a corrupted local object is never published.
        Returns the number of objects uploaded."""
        if not is_digest(digest):  # what this workspace's records say is checked like a remote's
            raise UnsafeName(f"{digest!r} is not a cache object's name")
        sent = 0
        if digest.endswith(DIR_SUFFIX):
            objects.verify(digest)
            for e in objects.manifest(digest):
                sent += self._push_one(objects, e["hash"], known)
        sent += self._push_one(objects, digest, known)
        return sent

    def _push_one(self, objects, digest: str, known: set | None) -> int:
        if known is not None and digest in known:
            return 0
        rel = object_path(digest)
        if self.exists(rel):
            if known is not None:
                known.add(digest)
            return 0
        if not digest.endswith(DIR_SUFFIX):
            objects.verify(digest)
        self.upload(objects.path_of(digest), rel)
        if known is not None:
            known.add(digest)
        return 1

    def fetch_object(self, objects, digest: str) -> int:
        """``fetch_objects`` of one digest."""
        return self.fetch_objects(objects, [digest])

    def fetch_objects(self, objects, digests) -> int:
        """Download objects (folders: manifest and files) into a local ObjectStore, each one verified
        before it takes its name there. Every name is checked first, and every folder's manifest is
        read and checked before any object is written, so a hostile entry writes nothing.
        Raises ``FileNotFoundError`` when the remote lacks one, ``CorruptObject`` when one does not
        hash to its name (it is deleted from the remote), ``RemoteUntrusted`` for a name out of shape."""
        digests = list(digests)
        for digest in digests:
            if not is_digest(digest):
                self._refuse(repr(digest), "is not a cache object's name")
        manifests: list[tuple[str, bytes | None, list[dict]]] = []
        files: list[str] = []
        for digest in digests:
            if not digest.endswith(DIR_SUFFIX):
                files.append(digest)
                continue
            data, entries = self._manifest(objects, digest)
            manifests.append((digest, data, entries))
            files.extend(e["hash"] for e in entries)
        got = 0
        for digest in dict.fromkeys(files):
            got += self._fetch_one(objects, digest)
        for digest, data, _ in manifests:  # after the files they name
            if data is not None:
                from ascendpipe.fsutil import write_bytes_atomic

                write_bytes_atomic(objects.target(digest), data)
                got += 1
        return got

    def _manifest(self, objects, digest: str) -> tuple[bytes | None, list[dict]]:
        """(bytes to store, or None when the local copy is whole; its checked entries)."""
        local = objects.path_of(digest)
        if os.path.exists(local):
            try:
                if _manifest_digest(local) == digest:
                    return None, objects.manifest(digest)
            except (UnsafeName, OSError):
                pass  # a bad local copy: the remote's is read, checked and written over it
        rel = object_path(digest)
        data = self.read_bytes(rel)
        found = hash_bytes(data) + DIR_SUFFIX
        if found != digest:
            self.delete(rel)  # never hand a bad object to anyone again
            raise CorruptObject(digest, found)
        try:
            entries = json.loads(data)
        except ValueError:
            entries = None
        why = "is not JSON" if entries is None else manifest_problem(entries)
        if why:
            self._refuse(f"folder manifest {rel}", why)
        return data, entries

    def _fetch_one(self, objects, digest: str) -> int:
        from ascendpipe.fsutil import atomic_path

        dst = objects.target(digest)
        if os.path.exists(dst):
            try:
                objects.verify(digest)
                return 0
            except (FileNotFoundError, CorruptObject):
                pass  # a bad local copy was dropped by verify: fetch it again
        rel = object_path(digest)
        with atomic_path(dst) as tmp:  # the object takes its name only once it hashes right
            self.download(rel, tmp)
            found = hash_file(tmp)
            if found != digest:
                self.delete(rel)  # never hand a bad object to anyone again
                raise CorruptObject(digest, found)
        return 1

    def has_object(self, digest: str) -> bool:
        return self.exists(object_path(digest))


def _manifest_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hash_bytes(f.read()) + DIR_SUFFIX




_HINT = "check the URL, AWS_ENDPOINT_URL and the AWS credentials in the environment or ~/.aws, or build with --no-remote"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _filesystem(protocol: str, url: str):
    try:
        import fsspec
    except ImportError:
        raise UserError(f"remote cache {url} needs fsspec: pip install s3fs (in a clone: pip install -e '.[remote]')") from None
    if protocol == "file":
        return fsspec.filesystem("file")
    if protocol in ("s3", "s3a", "obs"):
        try:
            import s3fs  # noqa: F401
        except ImportError:
            raise UserError(f"remote cache {url} needs s3fs: pip install s3fs (in a clone: pip install -e '.[remote]')") from None
        # credentials, region and endpoint from botocore's usual chain (env, ~/.aws/config,
        # ~/.aws/credentials); botocore's retries kept short so a dead endpoint fails fast
        return fsspec.filesystem("s3", config_kwargs=dict(_S3_CONFIG), skip_instance_cache=True)
    # another protocol is fsspec's to name, and only one it can open from the URL alone is taken: ftp,
    # sftp or http need a host as an argument (half-made, they print tracebacks when collected)
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise UserError(f"remote cache {url}: protocol '{protocol}' is not available ({exc}); use "
                        "s3://BUCKET/PREFIX or a folder") from None
    if protocol in ("ftp", "sftp", "ssh", "http", "https", "smb", "webhdfs", "git", "github", "zip", "tar"):
        raise UserError(f"remote cache {url}: protocol '{protocol}' ({cls.__name__}) cannot hold a remote cache "
                        "here; use s3://BUCKET/PREFIX or a folder")
    try:
        return fsspec.filesystem(protocol)
    except Exception as exc:  # noqa: BLE001 - fsspec's own, whatever the protocol's class raises
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"remote cache {url}: protocol '{protocol}' is not available ({first}); use "
                        "s3://BUCKET/PREFIX or a folder") from None


def remote_url(cli_url: str | None, pipeline_remote: str | None, workspace_root: str) -> str | None:
    """Which remote a command uses: ``--remote`` first, then the workspace's own
    ``.ascendpipe/config.json`` (a local override, never committed), then the pipeline's ``remote:``."""
    if cli_url:
        return cli_url
    from ascendpipe.store.statefiles import read_state_file, refuse_link

    config = os.path.join(workspace_root, ".ascendpipe", "config.json")
    refuse_link(config, "the workspace's remote configuration")
    raw = read_state_file(os.path.dirname(config), config, "the workspace's remote configuration")
    if raw is None:
        data = {}
    else:
        from ascendpipe.userfile import parse_json

        try:  # malformed, not text, or nested past reading (a RecursionError in json): one line
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            data = parse_json(text, "", "remote configuration") if text.strip() else {}
        except (UnicodeDecodeError, UserError) as exc:
            why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc.message.lstrip(": ")
            raise UserError(f"{config} is not JSON ({why}); fix it or remove it") from None
    if isinstance(data, dict) and data.get("remote"):
        if not isinstance(data["remote"], str):
            raise UserError(f"{config}: remote: {json.dumps(data['remote'])[:40]} is not a URL; give "
                            "s3://BUCKET/PREFIX or a folder path as text")
        return data["remote"]
    return pipeline_remote or None
