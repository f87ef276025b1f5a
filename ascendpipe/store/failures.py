"""Any exception met while doing a stage, said as one line a user can act on.

A build must never turn an error into `skipped` or `done`: the executor catches everything a stage,
storing its outputs or recording it can raise, and shows it with ``describe``. The common causes get
a sentence naming the path and what to do (a full disk with the free space left, a read-only or
unwritable folder, a command line over the OS limit, the database refusing a write); anything else
is its type and first line. ``describe`` is pure; ``explain`` adds the free space it looks up.
"""

from __future__ import annotations

import errno
import os

_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_DENIED = (errno.EACCES, errno.EPERM)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def sqlite_kind(exc: BaseException) -> str | None:
    """'full' | 'readonly' | 'corrupt' | 'io' | 'busy' for sqlite3 errors (matched by name: no sqlite3
    import here). 'busy' is another process holding the database's lock: never a damage."""
    if type(exc).__module__ != "sqlite3":
        return None
    text = str(exc).lower()
    if "database is locked" in text or "database schema is locked" in text or "database is busy" in text:
        return "busy"
    if "disk is full" in text:
        return "full"
    if "readonly" in text or "read-only" in text:
        return "readonly"
    if "malformed" in text or "not a database" in text:
        return "corrupt"
    if "disk i/o error" in text:
        return "io"
    return None


_PATH_SHAPE = (errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP)
ENVIRONMENT_ERRNOS = frozenset((*_FULL, *_DENIED, *_PATH_SHAPE, errno.EROFS, errno.E2BIG))


def is_environmental(exc: BaseException) -> bool:
    """An OSError of the machine or of a path given (a full disk, a read-only or forbidden folder, a
    file where a folder must be, an over-long command line), not a bug: said in one line, never with
    a traceback."""
    if isinstance(exc, OSError) and exc.errno == errno.EEXIST:  # makedirs of a path that is a file
        return _is_file(exc.filename)
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS


def _is_file(path) -> bool:
    return bool(path) and os.path.lexists(str(path)) and not os.path.isdir(str(path))


def describe(exc: BaseException, path: str | None = None, free: int | None = None, doing: str | None = None,
             retry: str = "build again") -> str:
    """One line for ``exc``; ``path`` is where it happened when the exception does not say, ``free``
    the bytes left on that file system, ``doing`` what was being done (``storing outputs``),
    ``retry`` what to do once it is fixed."""
    where = (getattr(exc, "filename2", None) if getattr(exc, "errno", None) in _FULL else None) \
        or getattr(exc, "filename", None) or path  # shutil names the source first, the full one second
    if where:
        from ascendpipe.fsutil import shown_path

        where = shown_path(where)  # a temp file or a stage's temp output folder: the name it takes
    during = f" while {doing}" if doing else ""
    code = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
    kind = sqlite_kind(exc)
    if kind == "io" and free is not None and free < (1 << 20):
        kind = "full"  # SQLite says "disk I/O error" when it cannot grow its -wal/-shm on a full disk
    if code in _FULL or kind == "full":
        return (f"no space left on the device{during} (writing {where}; {human_bytes(free)} free there); "
                f"free some space and {retry}")
    if code == errno.EROFS or kind == "readonly":
        return f"{where} is on a read-only file system or cannot be written{during}; make it writable and {retry}"
    if code in _DENIED:
        return f"permission denied on {where}{during}; check its owner and mode, then {retry}"
    if code == errno.EEXIST and _is_file(where):
        return f"{where} is a file where a folder must be{during}; give a folder's path (or move the file) and {retry}"
    if code == errno.ENOTDIR:
        return f"{where}: part of this path is a file, not a folder{during}; give a folder's path (or move the file) and {retry}"
    if code == errno.EISDIR:
        return f"{where} is a folder where a file was expected{during}; give a file's path and {retry}"
    if code == errno.ENAMETOOLONG:
        return f"a file name is too long for the file system{during} ({where}); use a shorter name and {retry}"
    if code == errno.ELOOP:
        return f"{where}: too many levels of symbolic links (a link loop?){during}; fix the link and {retry}"
    if code == errno.E2BIG:
        return ("the command is too long for the operating system (E2BIG: arguments and environment over its "
                "limit); pass long values through a file")
    if kind == "corrupt":
        return f"the workspace database {where} is damaged ({exc}); the next build moves it aside and rebuilds it"
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}{': ' + first if first else ''}{during}"


def free_bytes(path: str | None) -> int | None:
    """Bytes available to this user on the file system holding ``path`` (or its nearest parent)."""
    if not path:
        return None
    folder = os.path.abspath(path)
    while folder and not os.path.exists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def explain(exc: BaseException, path: str | None = None, doing: str | None = None, retry: str = "build again") -> str:
    where = getattr(exc, "filename2", None) or getattr(exc, "filename", None) or path
    return describe(exc, path, free_bytes(where) if _needs_space(exc) else None, doing, retry)


def _needs_space(exc: BaseException) -> bool:
    return (isinstance(exc, OSError) and exc.errno in _FULL) or sqlite_kind(exc) in ("full", "io")
