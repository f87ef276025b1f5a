"""The workspace database (``.ascendpipe/ascendpipe.db``, SQLite in WAL mode).

It holds what the tool observes, never what people write: the stat cache, the last built state of
each stage, the run-cache index, and the records of every build (runs and their stages, with the
remedy files' contents). Every stage is recorded in one transaction, written only after its outputs
are complete and stored, so a build killed at any point leaves nothing half-recorded.

``SCHEMA_VERSION`` is the one place the on-disk format is versioned; an older database is migrated
forward, a newer one is refused with a clear message.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time

from ascendpipe.errors import UserError

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
"""


def _j(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _uj(text):
    return json.loads(text) if text else None


class Database:
    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        try:
            self.conn = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise UserError(f"the workspace database {path} cannot be read ({exc}); move it away to start afresh") from None

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
        self.conn.close()

    # -- transactions --------------------------------------------------------------------------
    def _tx(self, fn):
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self.conn)
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
            return result

    # -- stat cache ----------------------------------------------------------------------------
    def stat_get(self, path: str):
        with self._lock:
            return self.conn.execute("SELECT ino, mtime_ns, ctime_ns, size, hash FROM stat_cache WHERE path=?", (path,)).fetchone()

    def stat_store(self, rows: list[tuple]) -> None:
        self._tx(lambda c: c.executemany("INSERT OR REPLACE INTO stat_cache VALUES(?,?,?,?,?,?)", rows))

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

    def set_stage_state(self, pipeline: str, name: str, *, key: str, components: dict, outs: dict, metrics: dict, run_id: int) -> None:
        """Make a stage's built state the one of an earlier run (``checkout``, after its outputs are back)."""
        self._tx(lambda c: c.execute(
            "INSERT OR REPLACE INTO stage_state VALUES(?,?,?,?,?,?,?)",
            (pipeline, name, key, _j(components), _j(outs), _j(metrics), run_id),
        ))

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
        """Drop run-cache entries whose outputs are not all in ``keep``."""
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

        return self._tx(tx)

    def mark_crashed(self) -> list[int]:
        """Runs still `running` become `crashed`: called under the build lock, so their owner is gone
        (killed, or the machine went down). Returns their ids."""
        with self._lock:
            ids = [r[0] for r in self.conn.execute("SELECT id FROM runs WHERE state='running' ORDER BY id")]
        if ids:
            self._tx(lambda c: c.executemany("UPDATE runs SET state='crashed' WHERE id=?", [(i,) for i in ids]))
        return ids

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

        def tx(c):
            # a fresh stage's remedy files and info are those of the build that made its outputs: the
            # run-cache entry of its key (one indexed read per chunk of keys, in this transaction)
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

        self._tx(tx)

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
