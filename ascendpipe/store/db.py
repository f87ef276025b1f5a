"""The workspace database (``.ascendpipe/ascendpipe.db``, SQLite in WAL mode).

It holds what the tool observes, never what people write: the stat cache, the last built state of
each stage, the run-cache index, and the records of every build (runs and their stages, with the
remedy files' contents). Every stage is recorded in one transaction, written only after its outputs
are complete and stored, so a build killed at any point leaves nothing half-recorded.

``SCHEMA_VERSION`` is the one place the on-disk format is versioned; an older database is migrated
forward, a newer one is refused with a clear message.

Opening it (waiting for a lock another process holds, checking and repairing a damaged file, never
through a link) is ``store/db_open.py``.
"""

from __future__ import annotations

import json
import os
import _thread  # threading's locks without its import (0.7 ms of a replayed no-op, engine/noop_replay.py)
import sqlite3
import time

from ascendpipe.contract import CACHE_DIR
from ascendpipe.errors import UserError
from ascendpipe.store.db_open import (_SIDE_FILES, DatabaseBusy, DatabaseDamaged, Opening, _Conn,  # noqa: F401
                                      _unmark_damaged, db_wait)
from ascendpipe.store.failures import sqlite_kind
from ascendpipe.store.statefiles import refuse_link

SCHEMA_VERSION = 2  # 2: stat_cache gained ctime_ns

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS stat_cache(path TEXT PRIMARY KEY, ino INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, size INTEGER, hash TEXT);
CREATE TABLE IF NOT EXISTS stage_state(
    pipeline TEXT, name TEXT, key TEXT, components TEXT, outs TEXT, metrics TEXT, run_id INTEGER,
    PRIMARY KEY(pipeline, name));
CREATE TABLE IF NOT EXISTS run_cache(
    key TEXT PRIMARY KEY, stage TEXT, outs TEXT, metrics TEXT, remedy TEXT, info TEXT, created REAL);
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY AUTOINCREMENT, pipeline TEXT, started TEXT, finished TEXT, state TEXT,
    argv TEXT, backend TEXT, version TEXT);
CREATE TABLE IF NOT EXISTS stage_runs(
    run_id INTEGER, seq INTEGER, name TEXT, kind TEXT, state TEXT, key TEXT, params TEXT, deps TEXT,
    outs TEXT, tools TEXT, metrics TEXT, remedy TEXT, info TEXT, reasons TEXT, duration REAL,
    log_path TEXT, error TEXT, PRIMARY KEY(run_id, name));
CREATE TABLE IF NOT EXISTS blobs(hash TEXT PRIMARY KEY, content TEXT);
CREATE TABLE IF NOT EXISTS owners(path TEXT PRIMARY KEY, pipeline TEXT, stage TEXT, how TEXT);
"""


def _j(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _uj(text):
    return json.loads(text) if text else None


def _insert_stage_rows(c, run_id: int, recs: list[dict]) -> None:
    """Stage rows of a run, inside the caller's transaction. A fresh stage's remedy files and info
    are those of the build that made its outputs: the run-cache entry of its key (one indexed read
    per chunk of keys)."""
    wanted = [r["key"] for r in recs if r["state"] == "fresh" and r.get("key") and not r.get("remedy") and not r.get("info")]
    made: dict[str, tuple[str, str]] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        rows = c.execute(f"SELECT key, remedy, info FROM run_cache WHERE key IN ({','.join('?' * len(chunk))})", chunk)
        made.update((k, (remedy, info)) for k, remedy, info in rows)
    c.executemany(
        "INSERT OR REPLACE INTO stage_runs VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            (
                run_id, r.get("seq", 0), r["name"], r["kind"], r["state"], r.get("key"), _j(r.get("params")), _j(r.get("deps")),
                _j(r.get("outputs")), _j(r.get("tools")), _j(r.get("metrics")),
                *(made.get(r.get("key")) or (_j(r.get("remedy", [])), _j(r.get("info")))),
                _j(r.get("reasons")), r.get("duration"), r.get("log"), r.get("error"),
            )
            for r in recs
        ],
    )


class Database(Opening):
    """``create=False``: a command that only reads (runs, show) never makes a database appear.

    A damaged database (not SQLite, empty, or failing ``PRAGMA quick_check``) is moved aside to
    ``ascendpipe.db.damaged-<time>`` and a new one is made from the run-cache entries in
    ``cache/runs/`` (``store/runcache.py``), so what was built is restored rather than rerun; the run
    history it held is lost (run ids go on after it), and ``notes`` says so. A full disk is a clear
    error, a lock held by another process is waited for: never a repair.
    """

    def __init__(self, path: str, *, create: bool = True, cache_root: str | None = None):
        self.path = path
        self.cache_root = cache_root or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), CACHE_DIR)
        self.notes: list[str] = []
        self._lock = _thread.RLock()
        self.conn = None
        self._stat_rows = None  # the stat cache, read on first use (stat_get)
        self.SCHEMA, self.SCHEMA_VERSION = _SCHEMA, SCHEMA_VERSION
        self.wait = db_wait()
        self._told_waiting = False
        for suffix in _SIDE_FILES:  # never read or written through a link out of the workspace
            refuse_link(path + suffix, "the workspace database" + (f"'s {suffix.strip('.-')} file" if suffix else ""))
        if not os.path.lexists(path):
            if not create:
                raise UserError(f"no workspace database at {path}: nothing was built here yet; run `ascendpipe build PIPELINE` first")
            self._create()
        damage = self._damage()
        if damage is None:
            try:
                self._connect()
            except DatabaseDamaged as exc:
                damage = f"damaged ({exc.__cause__ or 'a malformed page'})"
            except sqlite3.DatabaseError as exc:
                kind = sqlite_kind(exc)
                if kind in ("full", "io", "readonly"):
                    raise self._storage_error(exc) from None
                damage = f"unreadable ({exc})"
        if damage is not None:
            confirmed = self._confirm_damage(damage)
            if confirmed is None:  # SQLite, and quick_check finds it whole: kept, history and all
                _unmark_damaged(path)
                if self.conn is None:
                    try:
                        self._connect()
                    except sqlite3.DatabaseError as exc:
                        raise self._storage_error(exc) from None
            else:
                self._repair(confirmed)

    # -- opening, creating, repairing ------------------------------------------------------------
    def _migrate(self) -> None:
        with self._lock:
            self.conn.executescript(_SCHEMA)
            row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self.conn.execute("INSERT INTO meta VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise UserError(
                    f"{self.path} was written by a newer ascendpipe (schema {row[0]} > {SCHEMA_VERSION}); upgrade ascendpipe"
                )
            elif int(row[0]) < SCHEMA_VERSION:
                # 1 -> 2: the stat cache is only a cache; rebuild it with the new column
                self.conn.execute("DROP TABLE stat_cache")
                self.conn.executescript(_SCHEMA)
                self.conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    # -- transactions --------------------------------------------------------------------------
    def _tx(self, fn):
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self.conn)
            except BaseException:
                try:
                    self.conn.execute("ROLLBACK")
                except Exception:
                    pass  # the error that got us here says more
                raise
            self.conn.execute("COMMIT")
            return result

    # -- stat cache ----------------------------------------------------------------------------
    def stat_get(self, path: str):
        """The cached (ino, mtime_ns, ctime_ns, size, hash) of ``path``, or None. The table is read in
        one query on first use (a no-op build asks for every dep and out: one statement per file was
        most of its database time); a row another process changed since is only a stat mismatch
        (the file is hashed again), never a wrong hash."""
        with self._lock:
            if self._stat_rows is None:
                self._stat_rows = {r[0]: r[1:] for r in self.conn.execute(
                    "SELECT path, ino, mtime_ns, ctime_ns, size, hash FROM stat_cache")}
            return self._stat_rows.get(path)

    def stat_store(self, rows: list[tuple]) -> None:
        self._tx(lambda c: c.executemany("INSERT OR REPLACE INTO stat_cache VALUES(?,?,?,?,?,?)", rows))
        with self._lock:
            if self._stat_rows is not None:
                self._stat_rows.update((r[0], tuple(r[1:])) for r in rows)

    # -- stage state ---------------------------------------------------------------------------
    def all_state(self, pipeline: str) -> dict[str, dict]:
        with self._lock:
            rows = self.conn.execute(
                "SELECT name, key, components, outs, metrics, run_id FROM stage_state WHERE pipeline=?", (pipeline,)
            ).fetchall()
        return {
            r[0]: {"key": r[1], "components": _uj(r[2]), "outs": _uj(r[3]) or {}, "metrics": _uj(r[4]) or {}, "run_id": r[5]}
            for r in rows
        }

    def decision_digest(self, pipeline: str, keys: list[str]) -> str:
        """A digest of every row a no-op build of ``pipeline`` reads (engine/noop_memo.py): its stages'
        states, all ownership claims (another pipeline's may refuse it) and the run-cache entries of
        ``keys`` (a fresh stage's record takes its remedy files and info from them). Rows as stored,
        so any change to them, by any writer, shows."""
        from ascendpipe.digest import sha256_hex

        with self._lock:
            rows = [
                self.conn.execute("SELECT * FROM stage_state WHERE pipeline=? ORDER BY name", (pipeline,)).fetchall(),
                self.conn.execute("SELECT * FROM owners ORDER BY path").fetchall(),
            ]
            for start in range(0, len(keys), 500):
                chunk = sorted(keys)[start:start + 500]
                rows.append(self.conn.execute(
                    f"SELECT key, remedy, info FROM run_cache WHERE key IN ({','.join('?' * len(chunk))}) ORDER BY key",
                    chunk).fetchall())
        return sha256_hex(repr(rows).encode())

    def set_stage_state(self, pipeline: str, name: str, *, key: str, components: dict, outs: dict, metrics: dict, run_id: int) -> None:
        """Make a stage's built state the one of an earlier run (``checkout``, after its outputs are back)."""
        self._tx(lambda c: c.execute(
            "INSERT OR REPLACE INTO stage_state VALUES(?,?,?,?,?,?,?)",
            (pipeline, name, key, _j(components), _j(outs), _j(metrics), run_id),
        ))

    # -- which pipeline file writes which path (engine/owners.py) ---------------------------------
    def owners(self) -> list[dict]:
        """Every claimed path: ``{"path", "pipeline", "stage", "how"}`` (how: the overrides and backend
        of the build that claimed it, to resolve that pipeline again as it was built)."""
        with self._lock:
            rows = self.conn.execute("SELECT path, pipeline, stage, how FROM owners").fetchall()
        return [{"path": r[0], "pipeline": r[1], "stage": r[2], "how": _uj(r[3]) or {}} for r in rows]

    def set_owners(self, pipeline: str, claims: list[tuple[str, str]], how: dict, released=()) -> None:
        """In one transaction: ``pipeline`` claims exactly ``claims`` ([(path, stage)]), its earlier
        claims go, and the ``released`` paths (stale claims of other pipelines) are dropped."""

        def tx(c):
            c.execute("DELETE FROM owners WHERE pipeline=?", (pipeline,))
            c.executemany("DELETE FROM owners WHERE path=?", [(p,) for p in released])
            c.executemany("INSERT OR REPLACE INTO owners VALUES(?,?,?,?)",
                          [(path, pipeline, stage, _j(how)) for path, stage in claims])

        self._tx(tx)

    # -- identity ------------------------------------------------------------------------------
    def workspace_id(self) -> str:
        """A random id made once per workspace database: exports name the workspace by it."""
        import uuid

        with self._lock:
            row = self.conn.execute("SELECT value FROM meta WHERE key='workspace_id'").fetchone()
        if row:
            return row[0]
        self._tx(lambda c: c.execute("INSERT OR IGNORE INTO meta VALUES('workspace_id', ?)", (uuid.uuid4().hex,)))
        with self._lock:
            return self.conn.execute("SELECT value FROM meta WHERE key='workspace_id'").fetchone()[0]

    # -- run cache -----------------------------------------------------------------------------
    def cache_get(self, key: str) -> dict | None:
        with self._lock:
            r = self.conn.execute("SELECT stage, outs, metrics, remedy, info FROM run_cache WHERE key=?", (key,)).fetchone()
        if r is None:
            return None
        return {"stage": r[0], "outs": _uj(r[1]) or {}, "metrics": _uj(r[2]) or {}, "remedy": _uj(r[3]) or [], "info": _uj(r[4]) or {}}

    def cache_drop(self, key: str) -> None:
        self._tx(lambda c: c.execute("DELETE FROM run_cache WHERE key=?", (key,)))

    def cache_prune(self, keep: set[str]) -> None:
        """Drop run-cache entries whose outputs are not all in ``keep`` (their files in cache/runs/
        go with them at gc)."""
        doomed = [e["key"] for e in self.cache_entries() if not set(e["outs"].values()) <= keep]
        self._tx(lambda c: c.executemany("DELETE FROM run_cache WHERE key=?", [(k,) for k in doomed]))

    def cache_entries(self) -> list[dict]:
        with self._lock:
            rows = self.conn.execute("SELECT key, outs FROM run_cache").fetchall()
        return [{"key": r[0], "outs": _uj(r[1]) or {}} for r in rows]

    # -- runs ----------------------------------------------------------------------------------
    def start_run(self, pipeline: str, argv: list[str], backend: str, version: str) -> int:
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

        def tx(c):
            cur = c.execute(
                "INSERT INTO runs(pipeline, started, state, argv, backend, version) VALUES(?,?,?,?,?,?)",
                (pipeline, started, "running", _j(argv), backend, version),
            )
            return cur.lastrowid

        run_id = self._tx(tx)
        self._set_high_water(run_id)
        return run_id

    def has_running(self) -> bool:
        with self._lock:
            return self.conn.execute("SELECT 1 FROM runs WHERE state='running' LIMIT 1").fetchone() is not None

    def mark_crashed(self) -> list[int]:
        """Runs still `running` become `crashed`: called under the build lock, so their owner is gone
        (killed, or the machine went down). Returns their ids."""
        with self._lock:
            ids = [r[0] for r in self.conn.execute("SELECT id FROM runs WHERE state='running' ORDER BY id")]
        if ids:
            self._tx(lambda c: c.executemany("UPDATE runs SET state='crashed' WHERE id=?", [(i,) for i in ids]))
        return ids

    def prune_runs(self, keep: int, *, dry_run: bool = False) -> tuple[list[int], list[int]]:
        """Drop run records but the newest ``keep``, the runs that built a current output (checkout
        and the explorer read those) and any still running; then the remedy blobs nothing names.
        Returns (removed ids, kept ids), newest first."""
        with self._lock:
            ids = [r[0] for r in self.conn.execute("SELECT id FROM runs ORDER BY id DESC")]
            current = {r[0] for r in self.conn.execute("SELECT DISTINCT run_id FROM stage_state") if r[0] is not None}
            running = {r[0] for r in self.conn.execute("SELECT id FROM runs WHERE state='running'")}
        kept = set(ids[:max(0, keep)]) | current | running
        doomed = [i for i in ids if i not in kept]
        if doomed and not dry_run:
            def tx(c):
                for start in range(0, len(doomed), 500):
                    chunk = doomed[start:start + 500]
                    marks = ",".join("?" * len(chunk))
                    c.execute(f"DELETE FROM stage_runs WHERE run_id IN ({marks})", chunk)
                    c.execute(f"DELETE FROM runs WHERE id IN ({marks})", chunk)
                named = set()
                for (remedy,) in c.execute("SELECT remedy FROM stage_runs UNION ALL SELECT remedy FROM run_cache"):
                    named.update(b.get("hash") for b in (_uj(remedy) or []) if isinstance(b, dict))
                unnamed = [(h,) for (h,) in c.execute("SELECT hash FROM blobs") if h not in named]
                c.executemany("DELETE FROM blobs WHERE hash=?", unnamed)

            self._tx(tx)
        return doomed, [i for i in ids if i in kept]

    def finish_run(self, run_id: int, state: str) -> None:
        finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._tx(lambda c: c.execute("UPDATE runs SET finished=?, state=? WHERE id=?", (finished, state, run_id)))

    def record_stage(self, run_id: int, pipeline: str, rec: dict, *, state_update: bool, cache_key: str | None) -> None:
        """One transaction: the stage's record, its remedy blobs, its state and its run-cache entry."""

        def tx(c):
            for blob in rec.get("remedy_blobs", []):
                c.execute("INSERT OR IGNORE INTO blobs VALUES(?,?)", (blob["hash"], blob["content"]))
            blobs = rec.get("remedy_blobs") or []
            # a restored stage brings its remedy files' name/path/hash from the run-cache (contents are
            # in the blob table since it ran)
            remedy = [{k: v for k, v in b.items() if k != "content"} for b in blobs] if blobs else rec.get("remedy") or []
            c.execute(
                "INSERT OR REPLACE INTO stage_runs VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id, rec.get("seq", 0), rec["name"], rec["kind"], rec["state"], rec.get("key"), _j(rec.get("params")),
                    _j(rec.get("deps")), _j(rec.get("outputs")), _j(rec.get("tools")), _j(rec.get("metrics")),
                    _j(remedy), _j(rec.get("info")), _j(rec.get("reasons")), rec.get("duration"),
                    rec.get("log"), rec.get("error"),
                ),
            )
            if state_update:
                c.execute(
                    "INSERT OR REPLACE INTO stage_state VALUES(?,?,?,?,?,?,?)",
                    (pipeline, rec["name"], rec["key"], _j(rec["components"]), _j(rec["outputs"]), _j(rec.get("metrics")), run_id),
                )
            if cache_key:
                c.execute(
                    "INSERT OR REPLACE INTO run_cache VALUES(?,?,?,?,?,?,?)",
                    (cache_key, rec["name"], _j(rec["outputs"]), _j(rec.get("metrics")), _j(remedy), _j(rec.get("info")), time.time()),
                )

        self._tx(tx)

    def record_fresh(self, run_id: int, recs: list[dict]) -> None:
        """Bulk-record stages that were fresh (the whole of a no-op build): one transaction."""
        self._tx(lambda c: _insert_stage_rows(c, run_id, recs))

    def record_noop_run(self, pipeline: str, argv: list[str], backend: str, version: str, recs: list[dict]) -> int:
        """A whole run of fresh stages in one transaction (a replayed no-op, engine/noop_replay.py):
        never seen half-written, never left `running`. Returns its id."""
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")

        def tx(c):
            run_id = c.execute(
                "INSERT INTO runs(pipeline, started, finished, state, argv, backend, version) VALUES(?,?,?,?,?,?,?)",
                (pipeline, when, when, "done", _j(argv), backend, version),
            ).lastrowid
            _insert_stage_rows(c, run_id, recs)
            return run_id

        run_id = self._tx(tx)
        self._set_high_water(run_id)
        return run_id

    def runs(self, limit: int | None = None) -> list[dict]:
        q = "SELECT id, pipeline, started, finished, state, argv, backend, version FROM runs ORDER BY id DESC"
        if limit:
            q += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self.conn.execute(q).fetchall()
        return [
            {"id": r[0], "pipeline": r[1], "started": r[2], "finished": r[3], "state": r[4], "argv": _uj(r[5]), "backend": r[6], "version": r[7]}
            for r in rows
        ]

    def run_ids(self) -> list[int]:
        with self._lock:
            return [r[0] for r in self.conn.execute("SELECT id FROM runs ORDER BY id DESC")]

    def run(self, run_id: int) -> dict | None:
        with self._lock:
            r = self.conn.execute(
                "SELECT id, pipeline, started, finished, state, argv, backend, version FROM runs WHERE id=?", (run_id,)
            ).fetchone()
        if r is None:
            return None
        return {"id": r[0], "pipeline": r[1], "started": r[2], "finished": r[3], "state": r[4], "argv": _uj(r[5]), "backend": r[6], "version": r[7]}

    def stage_runs(self, run_ids: list[int]) -> dict[int, dict[str, dict]]:
        if not run_ids:
            return {}
        marks = ",".join("?" * len(run_ids))
        with self._lock:
            rows = self.conn.execute(
                f"SELECT run_id, name, kind, state, key, params, deps, outs, tools, metrics, remedy, info, reasons, duration, log_path, error "
                f"FROM stage_runs WHERE run_id IN ({marks}) ORDER BY run_id, seq",
                run_ids,
            ).fetchall()
        out: dict[int, dict[str, dict]] = {}
        for r in rows:
            out.setdefault(r[0], {})[r[1]] = {
                "kind": r[2], "state": r[3], "key": r[4], "params": _uj(r[5]) or {}, "deps": _uj(r[6]) or {},
                "outputs": _uj(r[7]) or {}, "tools": _uj(r[8]) or {}, "metrics": _uj(r[9]) or {},
                "remedy_files": _uj(r[10]) or [], "info": _uj(r[11]) or {}, "reasons": _uj(r[12]) or [],
                "duration": r[13], "log": r[14], "error": r[15],
            }
        return out

    def blob(self, digest: str) -> str | None:
        with self._lock:
            r = self.conn.execute("SELECT content FROM blobs WHERE hash=?", (digest,)).fetchone()
        return r[0] if r else None

    def recorded_outputs(self) -> set[str]:
        """Every output path a stage state or a run record names (where a killed build leaves temps)."""
        paths: set[str] = set()
        with self._lock:
            for (outs,) in self.conn.execute("SELECT outs FROM stage_state UNION SELECT DISTINCT outs FROM stage_runs"):
                value = _uj(outs)
                if isinstance(value, dict):
                    paths.update(value)
        return paths

    def referenced_hashes(self, current_only: bool = False) -> set[str]:
        """Every output hash the run-cache or the current state still names (what gc must keep)."""
        hashes: set[str] = set()
        with self._lock:
            if not current_only:
                for (outs,) in self.conn.execute("SELECT outs FROM run_cache"):
                    hashes.update((_uj(outs) or {}).values())
            for (outs,) in self.conn.execute("SELECT outs FROM stage_state"):
                hashes.update((_uj(outs) or {}).values())
        return {h for h in hashes if h}
