"""Opening the workspace database: connecting, waiting for a lock another process holds, checking
and repairing a damaged file (``store/db.py``'s ``Database`` takes these as its base class).

Busy is not damaged: another process holding SQLite's lock is waited for (``ASCENDPIPE_DB_WAIT``
seconds, 60 by default), with a line naming the holder where the build lock says it, then
``DatabaseBusy`` (one line, exit 1). Only a file that is not SQLite or fails ``PRAGMA quick_check`` is
moved aside and rebuilt from ``cache/runs/``; run ids go on from the highest one ever given
(``last-run-id`` beside the database), so a repair never starts the history at run 1 again. The
database and its side files are never opened through a symbolic link (``store/statefiles.py``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

from ascendpipe.errors import UserError
from ascendpipe.store.failures import sqlite_kind

DB_WAIT_ENV = "ASCENDPIPE_DB_WAIT"  # seconds a command waits for another process's lock (default 60)
_BUSY_SLICE = 0.25  # SQLite's own busy wait per attempt; the rest of the wait is ours, so it can say so
_SQLITE_HEADER = b"SQLite format 3\x00"
HIGH_WATER = "last-run-id"  # beside the database: the highest run id ever given, kept through a repair
_SIDE_FILES = ("", "-wal", "-shm", "-journal", ".damaged")


def db_wait() -> float:
    """How long to wait for another process's database lock (``ASCENDPIPE_DB_WAIT``; 60 s)."""
    try:
        value = float(os.environ.get(DB_WAIT_ENV, "60"))
    except ValueError:
        return 60.0
    return value if 0 <= value < float("inf") else 60.0


def _j(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _marker(path: str) -> str:
    return path + ".damaged"


def _mark_damaged(path: str) -> None:
    """Remember a damaged page met while running, for the next opening to check (and repair)."""
    try:
        fd = os.open(_marker(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError:
        return
    try:
        os.write(fd, (time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def _unmark_damaged(path: str) -> None:
    try:
        os.unlink(_marker(path))
    except FileNotFoundError:
        pass


class DatabaseDamaged(UserError):
    """A page of the database cannot be read: the command stops here; the next opening repairs it."""


class DatabaseBusy(UserError):
    """Another process held the database's lock past the wait: not a damage; run again later."""

    exit_code = 1


class _Conn:
    """The sqlite3 connection, with a damaged page or a full disk turned into one clear error."""

    __slots__ = ("_conn", "_db")

    def __init__(self, conn, db):
        self._conn = conn
        self._db = db

    def _call(self, fn, *args):
        deadline = None
        while True:
            try:
                return fn(*args)
            except sqlite3.DatabaseError as exc:
                if sqlite_kind(exc) == "busy":  # another process holds the lock: wait, never a damage
                    deadline = self._db._wait_busy(deadline)
                    continue
                self._db._raise_for(exc)
                raise

    def execute(self, *args):
        return self._call(self._conn.execute, *args)

    def executemany(self, *args):
        return self._call(self._conn.executemany, *args)

    def executescript(self, *args):
        return self._call(self._conn.executescript, *args)

    def close(self):
        self._conn.close()


class Opening:
    """The opening and repair half of ``Database``: it sets ``path``, ``cache_root``, ``notes``,
    ``conn``, ``wait`` and provides ``_tx``, ``_migrate``, ``SCHEMA`` and ``SCHEMA_VERSION``."""

    def _short(self) -> str:
        return os.path.join(os.path.basename(os.path.dirname(os.path.abspath(self.path))), os.path.basename(self.path))

    def _wait_busy(self, deadline: float | None) -> float:
        """Another process holds the lock: say so once, wait up to ``self.wait``, then DatabaseBusy."""
        now = time.monotonic()
        if deadline is None:
            deadline = now + self.wait
            if not self._told_waiting and self.wait > 0:
                self._told_waiting = True
                from ascendpipe.store.statefiles import lock_holder

                holder = lock_holder(os.path.join(os.path.dirname(self.path), "build.lock")) or "another process"
                sys.stderr.write(f"waiting for {self._short()}, in use by {holder} (up to {self.wait:g} s; "
                                 f"{DB_WAIT_ENV} sets it) ...\n")
                sys.stderr.flush()
        if now >= deadline:
            raise DatabaseBusy(f"another ascendpipe process is using {self._short()}; run again when it finishes")
        time.sleep(min(0.05, deadline - now))
        return deadline

    def _connect(self) -> None:
        conn = sqlite3.connect(self.path, timeout=_BUSY_SLICE, check_same_thread=False, isolation_level=None)
        try:
            self.conn = _Conn(conn, self)
            # no memory map over the database file: a store into a block a full disk cannot give is
            # SIGBUS (the process dies without a word); reads and writes report SQLITE_FULL instead
            self.conn.execute("PRAGMA mmap_size=0")
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except BaseException:
            conn.close()
            self.conn = None
            raise

    def _create(self) -> None:
        """A new database is made under a temp name and renamed into place, so a database file of
        0 bytes is never one being created: it can only be one that lost its content."""
        import tempfile

        from ascendpipe.fsutil import TEMP_PREFIX

        folder = os.path.dirname(self.path) or "."
        tmp = None
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{TEMP_PREFIX}{os.path.basename(self.path)}.", suffix=".tmp")
            os.close(fd)
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.executescript(self.SCHEMA)
                conn.execute("INSERT INTO meta VALUES('schema_version', ?)", (str(self.SCHEMA_VERSION),))
            finally:
                conn.close()
            try:
                os.link(tmp, self.path)  # never over one another command made meanwhile (a build's)
            except FileExistsError:
                pass
            except OSError:  # a file system without hard links: the rename, still atomic
                if not os.path.lexists(self.path):
                    os.replace(tmp, self.path)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise self._storage_error(exc) from None
        finally:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)

    def _damage(self) -> str | None:
        """Why the database file may not be usable as it is (``_confirm_damage`` decides), or None."""
        try:
            st = os.lstat(self.path)
        except OSError as exc:
            raise self._storage_error(exc) from None
        import stat

        if not stat.S_ISREG(st.st_mode):
            return "not a file"
        if st.st_size == 0:
            return "empty (0 bytes)"
        if not os.access(self.path, os.R_OK | os.W_OK):
            raise self._storage_error(PermissionError(13, "Permission denied", self.path))
        if os.path.lexists(_marker(self.path)):
            return "damaged (a malformed page was met)"
        return None

    def _confirm_damage(self, why: str) -> str | None:
        """``why`` when the file is not SQLite or fails ``PRAGMA quick_check`` (then it is moved
        aside); None when it is a whole SQLite database after all (kept)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return why  # a folder, a socket: not a database
        try:
            head = os.read(fd, len(_SQLITE_HEADER))
        except OSError:
            head = b""
        finally:
            os.close(fd)
        if head != _SQLITE_HEADER:
            return why if why.startswith(("empty", "not a file")) else f"not an SQLite database ({why})"
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        try:
            conn = sqlite3.connect(self.path, timeout=_BUSY_SLICE, isolation_level=None)
        except sqlite3.DatabaseError as exc:  # cannot even open it: the machine's doing, not a damage
            raise self._storage_error(exc) from None
        try:
            rows = _Conn(conn, self).execute("PRAGMA quick_check").fetchall()  # busy waits like any statement
        except DatabaseDamaged as exc:
            return f"{why}; quick_check: {exc.__cause__ or exc}"
        except sqlite3.DatabaseError as exc:
            if sqlite_kind(exc) == "corrupt":
                return f"{why}; quick_check: {exc}"
            raise self._storage_error(exc) from None  # a file it cannot check is left where it is
        finally:
            conn.close()
        result = "; ".join(str(r[0]) for r in rows[:3])
        return None if result == "ok" else f"{why}; quick_check: {result}"

    def _storage_error(self, exc) -> UserError:
        from ascendpipe.store.failures import explain

        return UserError(explain(exc, self.path, "opening the workspace database"))

    def _raise_for(self, exc) -> None:
        kind = sqlite_kind(exc)
        if kind == "busy":
            raise DatabaseBusy(f"another ascendpipe process is using {self._short()}; run again when it finishes") from None
        if kind == "corrupt":
            _mark_damaged(self.path)
            raise DatabaseDamaged(
                f"the workspace database {self.path} is damaged ({exc}); the next command moves it aside and "
                "rebuilds it from cache/"
            ) from exc
        if kind in ("full", "readonly", "io"):
            raise self._storage_error(exc) from None

    def _repair(self, why: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = f"{self.path}.damaged-{stamp}"
        try:
            for suffix in ("-wal", "-shm", ""):
                if os.path.lexists(self.path + suffix):
                    os.replace(self.path + suffix, aside + suffix)
            _unmark_damaged(self.path)
            self._create()
            self._connect()
        except OSError as exc:
            raise UserError(f"the workspace database {self.path} is {why} and cannot be moved aside ({exc.strerror}); "
                            "move it away by hand") from None
        recovered = self.import_entries()
        high = self._high_water()
        if high:  # run ids go on after the last one ever given: a repair never restarts them at 1
            self._tx(lambda c: (c.execute("DELETE FROM sqlite_sequence WHERE name='runs'"),
                                c.execute("INSERT INTO sqlite_sequence(name, seq) VALUES('runs', ?)", (high,))))
        note = (f"the workspace database {self.path} was {why}: moved to {os.path.basename(aside)} and rebuilt from "
                f"{recovered} run-cache entr{'y' if recovered == 1 else 'ies'} in cache/ (stages built before are restored, "
                "not rerun); the run history it held is lost" + (f" (run ids go on after {high})" if high else ""))
        self.notes.append(note)
        sys.stderr.write(f"ascendpipe: {note}\n")

    def import_entries(self) -> int:
        """Fill the run-cache index (and remedy blobs) from ``cache/runs/``; returns how many."""
        from ascendpipe.store.runcache import read_entries

        rows, blobs = [], []
        for e in read_entries(self.cache_root):
            remedy = []
            for b in e.get("remedy") or []:
                if isinstance(b, dict) and "hash" in b:
                    if "content" in b:
                        blobs.append((b["hash"], b["content"]))
                    remedy.append({k: v for k, v in b.items() if k != "content"})
            rows.append((e["key"], e.get("stage"), _j(e["outs"]), _j(e.get("metrics") or {}), _j(remedy),
                         _j(e.get("info") or {}), time.time()))

        def tx(c):
            c.executemany("INSERT OR IGNORE INTO blobs VALUES(?,?)", blobs)
            c.executemany("INSERT OR IGNORE INTO run_cache VALUES(?,?,?,?,?,?,?)", rows)

        self._tx(tx)
        return len(rows)

    def _high_water_path(self) -> str:
        return os.path.join(os.path.dirname(self.path), HIGH_WATER)

    def _high_water(self) -> int:
        """The highest run id this workspace ever gave (0 when unknown)."""
        try:
            fd = os.open(self._high_water_path(), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return 0
        try:
            return max(0, int(os.read(fd, 64).decode("ascii", "replace").strip() or 0))
        except ValueError:
            return 0
        finally:
            os.close(fd)

    def _set_high_water(self, run_id: int) -> None:
        from ascendpipe.fsutil import write_bytes_atomic

        try:
            if run_id > self._high_water():
                write_bytes_atomic(self._high_water_path(), f"{run_id}\n".encode())
        except OSError:
            pass  # only a guard for a repair: the run itself is recorded
