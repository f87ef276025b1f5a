"""State files (``.ascendpipe/``: the build lock, the database and its side files, plans, no-op memos,
worker tokens, the remote configuration; ``cache/``: objects, run entries, dumps, lock
files and temp files) are never followed out of the workspace through a symbolic link.

A link where a state file belongs is one located error (``refuse_link``); files are opened with
``O_NOFOLLOW`` (``open_nofollow``), so a link made between the check and the open is refused by the
kernel, not followed. Temp files are made with ``O_EXCL`` (``fsutil.atomic_path``), which
never follows a link either. Every state file is read with ``read_state_file`` and written with
``write_state_file`` (or the lock and database's own opens): one check, no folder between the state
folder and the file may be a link (the state folder itself may be: a cache moved to another disk).
"""

from __future__ import annotations

import errno
import json
import os

from ascendpipe.errors import Location, UserError


def link_error(path: str, what: str) -> UserError:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return UserError(f"{what} is a symbolic link (to {target}); state files are never followed out of the workspace: "
                     f"remove the link (rm '{path}') and run again", Location(file=path))


def refuse_link(path: str, what: str) -> None:
    """A located error if ``path`` is a symbolic link (a missing path is fine)."""
    if os.path.islink(path):
        raise link_error(path, what)


def open_nofollow(path: str, flags: int, what: str, mode: int = 0o644) -> int:
    """``os.open`` that never follows a link at ``path``: a link is ``link_error``."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):  # EMLINK: the BSDs' word for it
            raise link_error(path, what) from None
        raise


def lock_holder(lock_path: str) -> str | None:
    """Who holds the build lock, as its holder wrote it into the file (``pid N (`argv`, since T)``)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = json.loads(os.read(fd, 1 << 16).decode("utf-8", "replace") or "{}")
    except ValueError:
        return None
    finally:
        os.close(fd)
    if not isinstance(info, dict) or "pid" not in info or info.get("pid") == os.getpid():
        return None  # nobody, or this very process (a build waiting on a database another process holds)
    argv = " ".join(map(str, info.get("argv") or [])) or "?"
    return f"pid {info.get('pid', '?')} (`{argv}`, since {info.get('since', '?')})"


_CHECKED: set[str] = set()


def refuse_linked_dirs(base: str, path: str, what: str) -> None:
    """A located error if a folder between ``base`` (itself may be a link: a cache moved to another
    disk) and ``path``'s folder is a symbolic link, so nothing is written through it out of the
    workspace. Folders found plain are remembered for the process (one lstat each)."""
    folder = os.path.dirname(path)
    rel = os.path.relpath(folder, base)
    if rel == "." or folder in _CHECKED:
        return
    if rel.startswith(".."):
        return  # not under base: not a state folder
    current = base
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        if current in _CHECKED:
            continue
        if os.path.islink(current):
            raise link_error(current, what)
        if os.path.isdir(current):
            _CHECKED.add(current)


def read_state_file(base: str, path: str, what: str) -> bytes | None:
    """The bytes of state file ``path`` under the state folder ``base`` (``.ascendpipe/``, ``cache/``),
    or None when there is none or it is not a regular file (a link, a FIFO, a device: never opened
    through, never blocked on). A folder between ``base`` and ``path`` that is a link is
    ``link_error``: nothing is read from out of the workspace (a planted plan or memo)."""
    import stat

    refuse_linked_dirs(base, path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def write_state_file(base: str, path: str, data: bytes, what: str) -> None:
    """Write state file ``path`` under ``base`` atomically, never through a link: a folder between
    ``base`` and ``path`` that is a link is ``link_error``; a link at ``path`` itself is replaced by the
    rename, never written through (the temp file is made with ``O_EXCL | O_NOFOLLOW``)."""
    from ascendpipe.fsutil import write_bytes_atomic

    refuse_linked_dirs(base, path, what)
    write_bytes_atomic(path, data)
