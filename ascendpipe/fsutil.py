"""Atomic file writes: a reader (or a build killed half-way) never sees half a file.

One implementation for the whole package: write to a temp file in the same folder, then
``os.replace`` it over the target (atomic on POSIX within one file system). Temp names start with
``TEMP_PREFIX`` so the object store skips them and ``gc`` removes ones a kill left behind.
A leaf module (standard library only).
"""

from __future__ import annotations

import itertools
import json
import os

TEMP_PREFIX = ".tmp-"
_COUNTER = itertools.count()


_UMASK: list[int] = []


def _umask() -> int:
    """The process umask, read once (setting it to read it back is not thread-safe, so not per write)."""
    if not _UMASK:
        try:
            with open("/proc/self/status") as f:  # Linux: readable without changing it
                _UMASK.extend(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
        except (OSError, ValueError, IndexError):
            pass
        if not _UMASK:
            old = os.umask(0o022)
            os.umask(old)
            _UMASK.append(old)
    return _UMASK[0]


class atomic_path:
    """``with atomic_path(target) as tmp:`` write the file at ``tmp`` (any writer: np.save, onnx.save,
    shutil.copyfile); on success it replaces ``target``, on an exception it is removed.

    (A class rather than ``contextlib.contextmanager``: contextlib costs a no-op build an import.)
    """

    def __init__(self, path):
        self.path = os.fspath(path)

    def __enter__(self) -> str:
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, exist_ok=True)
        # a name no other writer uses (this process's id and a counter; O_EXCL refuses one a killed
        # process left): what tempfile.mkstemp does, without its import on every no-op build
        while True:
            self.tmp = os.path.join(folder, f"{TEMP_PREFIX}{os.path.basename(self.path)}.{os.getpid()}-{next(_COUNTER)}.tmp")
            try:
                fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            os.close(fd)
            return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            # mkstemp makes the file 0600; give it what open() would (0644 under umask 022), so a page
            # or a result another user reads is not private by accident
            os.chmod(self.tmp, 0o666 & ~_umask())
            os.replace(self.tmp, self.path)
        elif os.path.exists(self.tmp):
            os.unlink(self.tmp)
        return False


def write_bytes_atomic(path, data: bytes):
    """Write ``data`` atomically; returns ``path`` as given (a Path stays a Path)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)
    return path


def write_text_atomic(path, text: str):
    """Write UTF-8 text atomically; returns ``path`` as given."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path, obj, *, default=None, allow_nan: bool = True, sort_keys: bool = False):
    """Indented JSON plus a final newline, atomically; returns ``path`` as given."""
    text = json.dumps(obj, indent=2, allow_nan=allow_nan, default=default, sort_keys=sort_keys) + "\n"
    return write_text_atomic(path, text)


def copy_atomic(src, dst):
    """Copy a file's bytes to ``dst`` atomically; returns ``dst`` as given."""
    import shutil

    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
    return dst


HARD_LINKS_ENV = "ASCENDPIPE_CACHE_HARDLINKS"


def hard_links_allowed() -> bool:
    """Whether our own big files (stage outputs, cache objects) may share an inode where no reflink is to be
    had. ``onnx.load`` refuses a weights file with several links ("a potential hardlink attack"); with
    ``ASCENDPIPE_CACHE_HARDLINKS=0`` each is a reflink or a copy instead, at the cost of the disk the links
    saved."""
    return os.environ.get(HARD_LINKS_ENV, "1").strip() != "0"


def share_file(src, dst, *, link: bool = False) -> str:
    """``dst`` made to hold ``src``'s bytes atomically, sharing them where the file system lets it:
    a reflink (FICLONE: btrfs, XFS; no byte copied, each file its own), else with ``link`` a hard link
    (the same inode: for files of ours that are never written in place), else an in-kernel copy.
    Returns "reflinked", "linked" or "copied". ``ASCENDPIPE_CACHE_HARDLINKS=0`` turns hard links off
    (``hard_links_allowed``)."""
    link = link and hard_links_allowed()

    class _LinkInstead(Exception):
        pass

    try:
        with atomic_path(dst) as tmp, open(src, "rb") as source, open(tmp, "wb") as target:
            if _reflink(source.fileno(), target.fileno()):
                return "reflinked"
            if link:
                raise _LinkInstead
            _copy(source.fileno(), target.fileno(), os.fstat(source.fileno()).st_size)
            return "copied"
    except _LinkInstead:
        pass
    if link_atomic(src, dst):
        return "linked"
    return share_file(src, dst)  # another file system, or one without hard links: a copy


def _reflink(src: int, dst: int) -> bool:
    try:
        import fcntl

        fcntl.ioctl(dst, 0x40049409, src)  # FICLONE (linux/fs.h)
    except (ImportError, OSError):
        return False
    return True


def _copy(src: int, dst: int, size: int) -> None:
    """Copy ``size`` bytes in the kernel (copy_file_range, which moves both files' offsets), the rest
    (a file system that refuses it) through a 16 MB buffer."""
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    try:
        while copy_range is not None and done < size:
            sent = copy_range(src, dst, size - done)
            if not sent:
                break
            done += sent
    except OSError:
        pass
    while True:
        chunk = memoryview(os.read(src, 16 << 20))
        if not chunk:
            return
        while chunk:
            chunk = chunk[os.write(dst, chunk):]


def link_atomic(src, dst) -> bool:
    """``dst`` made a hard link to ``src`` atomically (a temp link renamed over it): the same inode,
    no byte copied, its mode and times untouched. False where the file system cannot (another
    device, no hard links, the link count at its limit): the caller copies instead."""
    folder = os.path.dirname(os.fspath(dst)) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f"{TEMP_PREFIX}{os.path.basename(os.fspath(dst))}.{os.getpid()}-{next(_COUNTER)}.link")
    try:
        os.link(src, tmp)
    except OSError:
        return False
    try:
        os.replace(tmp, dst)
    finally:
        if os.path.lexists(tmp):  # rename does nothing where both names are links of one file already
            os.unlink(tmp)
    return True


def workspace_relative(value, root):
    """``value`` (a str, or lists/dicts of them) with paths under ``root`` made relative to it,
    wherever they stand in a string (``--model=/ws/m.onnx`` -> ``--model=m.onnx``).

    Outputs that name their inputs (a convert's equivalent atc line, the remedy files it read) must
    not carry the workspace's absolute path: two clones, or a Ray worker's scratch folder, would
    write different bytes for the same build, and every stage downstream would get another key.
    """
    prefix = str(root).rstrip(os.sep) + os.sep
    if isinstance(value, str):
        return value.replace(prefix, "")
    if isinstance(value, list):
        return [workspace_relative(v, root) for v in value]
    if isinstance(value, tuple):
        return tuple(workspace_relative(v, root) for v in value)
    if isinstance(value, dict):
        return {k: workspace_relative(v, root) for k, v in value.items()}
    return value


def special_file(path: str) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (after symlinks):
    'a FIFO', 'a socket', 'a device', 'a symlink loop'. ``stat`` only, never ``open``."""
    import errno
    import stat

    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        return None  # missing or dangling: the existence check says so
    mode = st.st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
