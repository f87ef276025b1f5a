"""Deciding and doing one stage: fresh, restored from the run-cache, or run; then stored and recorded.

The order of effects is what makes a killed build safe:
1. outputs are produced (built-in kinds into a temp folder, moved into place only on success);
2. outputs are hashed and copied into the object store (each object written atomically);
3. one database transaction records the stage (its state, its run-cache entry, its run record).
A kill before 3 leaves the stage unrecorded, so the next build decides it again from scratch.
"""

from __future__ import annotations

import os
import threading
import time

from ascendpipe.contract import stage_folder
from ascendpipe.engine import model_deps
from ascendpipe.errors import Location, StageFailed, UserError
from ascendpipe.graph import key as keymod
from ascendpipe.store.hashing import DIR_SUFFIX, hash_bytes
from ascendpipe.store.objects import CorruptObject, replace_path

REMEDY_SUFFIXES = (".cfg", ".json", ".txt", ".ini")
MAX_REMEDY_BYTES = 1 << 20


class Outcome:
    def __init__(self, name, state, reasons=None, duration=0.0, metrics=None, outputs=None, error=None, log=None, note=None):
        self.name = name
        self.state = state  # ran | restored | fresh | failed | skipped
        self.reasons = list(reasons or [])
        self.duration = duration
        self.metrics = dict(metrics or {})
        self.outputs = dict(outputs or {})
        self.error = error
        self.log = log
        self.note = note  # e.g. "cache object corrupted, rebuilt"


class StageExecutor:
    def __init__(self, pipeline, ws, db, hasher, objects, run_id: int, *, forced: set[str] = frozenset(), use_run_cache: bool = True, run_command=None):
        self.pipeline = pipeline
        self.ws = ws
        self.db = db
        self.hasher = hasher
        self.objects = objects
        self.run_id = run_id
        self.forced = set(forced)
        self.use_run_cache = use_run_cache
        self.run_command = run_command
        self.pipeline_key = ws.rel_pipeline(pipeline.path)
        self.state = db.all_state(self.pipeline_key) if db is not None else {}  # None: a worker that only runs
        self.outcomes: dict[str, Outcome] = {}
        self._lock = threading.Lock()
        self._seq = 0
        self._tool_cache: dict[tuple, dict] = {}
        self._produced = {o for st in pipeline.stages.values() for o in st.outs}
        self.on_start = None  # callback(name, reasons) when a stage starts running
        self.on_progress = None  # callback(name, done, total, unit): a running stage's counts (ascendpipe.ticker)
        self.running: set[str] = set()  # stages being decided or done now (an interrupt fails them)
        self._phase: dict[str, tuple] = {}  # stage -> (what it is doing, the path that involves)
        self.record_errors: list[str] = []  # failures the database could not take
        self._interrupted: set[str] = set()  # stages a signal stopped (their record says so)
        self.keys: dict[str, str] = {}  # stage -> key of its latest decision
        self._fresh_now: dict[str, bool] = {}  # stage -> whether its latest decision found it fresh
        # scale-out (engine/ray_executor.py, engine/remote_sync.py): a shared remote cache consulted
        # after the local run-cache, and a runner that runs a stage elsewhere; None: here only
        self.remote = None
        self.runner = None

    def _made_by_a_stage(self, dep: str) -> bool:
        if dep in self._produced:
            return True
        prefix = dep.rstrip("/") + "/"
        parts = dep.split("/")
        return any("/".join(parts[:i]) in self._produced for i in range(1, len(parts))) or any(o.startswith(prefix) for o in self._produced)

    def dep_location(self, stage, dep: str) -> Location:
        """The pipeline file's line of the field naming ``dep`` (the stage's line when unknown)."""
        line, column = (getattr(stage, "dep_lines", None) or {}).get(dep) or (stage.line, None)
        return Location(file=self.pipeline.path, line=line, column=column, stage=stage.name)

    def _check_inside_built_output(self, stage, dep: str) -> None:
        """A missing path inside the output of a stage that is built and fresh (or done in this build)
        cannot appear any more: refuse it now, at its field's line, with the names that are there."""
        from ascendpipe.engine.path_hints import missing_inside

        for name, other in self.pipeline.stages.items():
            out = next((o for o in other.outs if dep.startswith(o.rstrip("/") + "/")), None)
            if out is None or name == stage.name or not os.path.isdir(self.ws.abs(out)) or not self._built(name):
                continue
            raise UserError(missing_inside(dep, out, name, self.ws.abs(out)), self.dep_location(stage, dep))

    def _locate_param_error(self, stage, exc: UserError) -> UserError:
        """An error a kind raised about one of its params' values, located only by the field
        (``aipp.input_format``: an inline AIPP block checked against the model), blamed on that value's
        file:line: the pipeline is read again with its marks (only now, on the error path)."""
        field = exc.location.field
        if exc.location.file or not field or not field.startswith("aipp."):
            return exc
        try:
            from ascendpipe.engine.plan import resolve

            marks = getattr(resolve(self.pipeline.path, [],
                                    self.pipeline.backend, use_cache=False), "marks", None)
        except UserError:
            marks = None
        if marks is None:
            return exc
        parts = tuple(field.split("."))
        candidates = ([("stages", stage.base, "matrix", stage.variant) + parts] if stage.variant else []) + [
            ("stages", stage.base, "params") + parts, ("params",) + parts]
        for path in candidates:
            probe = path
            while probe and probe not in marks.table:
                probe = probe[:-1]
            if len(probe) >= len(path) - 1:  # the value, or its block when the key was left out
                return UserError(exc.message, marks.location(path, stage=stage.name, field=field), hint=exc.hint)
        return exc

    def _locate_input_error(self, stage, exc: UserError) -> UserError:
        """An error a kind raised about one of the stage's input paths (``/abs/data/imgz: input path
        does not exist``), blamed on the pipeline field that named the path."""
        exc = self._locate_param_error(stage, exc)
        where = exc.location.file
        if not where or exc.location.line or not os.path.isabs(str(where)):
            return exc
        rel = os.path.relpath(str(where), self.ws.root).replace(os.sep, "/")
        dep = next((d for d in stage.deps if rel == d or rel.startswith(d.rstrip("/") + "/")), None)
        if dep is None:
            return exc
        return UserError(f"'{rel}': {exc.message}", self.dep_location(stage, dep), hint=exc.hint)

    def _built(self, name: str) -> bool:
        done = self.outcomes.get(name)
        if done is not None:
            return done.state in ("ran", "restored", "fresh")
        if name not in self._fresh_now:
            try:
                self.decide(self.pipeline.stages[name])
            except UserError:
                self._fresh_now[name] = False
        return self._fresh_now.get(name, False)

    # -- deciding ------------------------------------------------------------------------------
    def _kind(self, stage):
        from ascendpipe.stages.registry import get_kind

        return get_kind(stage.kind)

    def _facts(self, stage) -> dict:
        """The kind's version and flags (stages/registry.py ``kind_facts``), from the plan cache when
        it holds them, so a no-op build imports no kind module that only running needs."""
        from ascendpipe.stages.registry import kind_facts

        cached = (getattr(self.pipeline, "kind_facts", None) or {}).get(stage.kind)
        return kind_facts(stage.kind, cached)

    def tools(self, stage) -> dict:
        cache_key = (stage.kind, self.pipeline.backend)
        if cache_key not in self._tool_cache:
            if stage.kind == "run":
                self._tool_cache[cache_key] = {}
            else:
                from ascendpipe.backends.registry import DEFAULT
                from ascendpipe.stages.registry import tool_versions

                facts = self._facts(stage)
                backend = self.pipeline.backend if facts["uses_backend"] else DEFAULT
                self._tool_cache[cache_key] = tool_versions(stage.kind, backend, facts)
        return self._tool_cache[cache_key]

    def components(self, stage) -> dict:
        kind = self._facts(stage)
        deps = {}
        for dep in stage.deps:
            digest = self.hasher.hash_path(dep)
            if digest is None and not self._made_by_a_stage(dep):
                raise UserError(f"dep '{dep}' does not exist; create it or fix the path", self.dep_location(stage, dep))
            if digest is None:
                self._check_inside_built_output(stage, dep)
            deps[dep] = digest
        for fieldname, up in sorted(stage.upstream.items()):
            deps[stage.inputs[fieldname]] = self.hasher.hash_path(stage.inputs[fieldname])
        for model in [d for d, digest in deps.items() if model_deps.is_model_file(d, digest)]:
            # a model's weights files (ONNX external data) are part of what the stage reads
            deps.update(model_deps.external_deps(self.hasher, self.ws.root, model, self.dep_location(stage, model)))
        extra = {}
        if kind["uses_thresholds"] and self.pipeline.thresholds:
            extra["thresholds"] = self.pipeline.thresholds
        backend = self.pipeline.backend if stage.kind != "run" and kind["uses_backend"] else None
        return keymod.components(stage, kind["version"], deps, self.tools(stage), backend, extra)

    def current_outs(self, stage) -> dict:
        return {o: self.hasher.hash_path(o) for o in stage.outs}

    def decide(self, stage) -> tuple[keymod.Decision, dict]:
        comps = self.components(stage)
        if stage.name in self.forced:
            with self._lock:
                self.keys[stage.name] = keymod.key_of(comps)
            return keymod.Decision(True, ["forced"]), comps
        old = self.state.get(stage.name)
        key = keymod.key_of(comps)
        with self._lock:
            self.keys[stage.name] = key  # hashed once per decision; reused when recording
        decision = keymod.decide(
            old["components"] if old else None, old["outs"] if old else None, comps, self.current_outs(stage),
            stage.always_changed, old_key=old["key"] if old else None, new_key=key,
        )
        self._fresh_now[stage.name] = not decision.stale
        if decision.stale and old and any(r.endswith(" modified") and r.startswith(("out ", "dep ")) for r in decision.reasons):
            decision = keymod.Decision(True, [x for r in decision.reasons for x in self._named_files(r, old)])
        return decision, comps

    def _named_files(self, reason: str, old: dict) -> list[str]:
        """``out FOLDER modified`` / ``dep FOLDER modified`` as the files of the folder that differ
        from its record, when both manifests can be read (the old one from the cache); else as it was."""
        what = reason.split(" ", 1)[0]
        if what not in ("out", "dep") or not reason.endswith(" modified"):
            return [reason]
        path = reason[len(what) + 1:-len(" modified")]
        recorded = old["outs"] if what == "out" else ((old.get("components") or {}).get("deps") or {})
        digest = recorded.get(path)
        if not digest or not digest.endswith(DIR_SUFFIX) or not os.path.isdir(self.ws.abs(path)):
            return [reason]
        try:
            named = keymod.folder_reasons(path, self.objects.manifest(digest), self.hasher.dir_manifest(path)[1], what)
        except (OSError, ValueError):
            return [reason]
        return named or [reason]

    # -- doing ---------------------------------------------------------------------------------
    def log_path(self, stage) -> str:
        return os.path.join(self.pipeline.build_dir, f"{stage_folder(stage.name)}.log")

    def execute(self, name: str) -> Outcome:
        """Decide and do one stage. Whatever goes wrong (the stage, storing its outputs, recording it)
        ends as a ``failed`` outcome with a one-line reason, never as an exception doit would drop."""
        stage = self.pipeline.stages[name]
        started = time.monotonic()
        with self._lock:
            self.running.add(name)
            self._phase[name] = ("deciding", None)
        try:
            try:
                outcome = self._execute(stage, started)
            except StageFailed as exc:
                outcome = Outcome(name, "failed", error=exc.message, log=exc.log_path, duration=time.monotonic() - started)
                self._record_failure(stage, outcome)
            except UserError as exc:
                outcome = Outcome(name, "failed", error=str(exc), duration=time.monotonic() - started)
                self._record_failure(stage, outcome)
            except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM turned into one by the build
                self.interrupt_stage(name, getattr(exc, "signal_name", "SIGINT"), time.monotonic() - started)
                raise
            except Exception as exc:  # an OS error (full disk, read-only folder, E2BIG), sqlite, a bug
                from ascendpipe.store.failures import explain

                doing, path = self._phase.get(name, (None, None))
                outcome = Outcome(name, "failed", error=explain(exc, path, doing), duration=time.monotonic() - started,
                                  log=self.log_path(stage) if doing == "running" else None)
                self._record_failure(stage, outcome)
        finally:
            with self._lock:
                self.running.discard(name)
        with self._lock:
            if name in self._interrupted:  # the signal's record stands: its command was killed for it
                return self.outcomes[name]
            self.outcomes[name] = outcome
        return outcome

    def interrupt_stage(self, name: str, signal_name: str, duration: float = 0.0) -> None:
        """Record a stage a signal stopped as failed (its outputs were not stored: it reruns next time)."""
        stage = self.pipeline.stages[name]
        outcome = Outcome(name, "failed", error=f"interrupted by {signal_name}", duration=duration)
        with self._lock:
            if self.outcomes.get(name) is not None:
                return
            self.outcomes[name] = outcome
            self._interrupted.add(name)
        self._record_failure(stage, outcome)

    def _set_phase(self, stage, doing: str, path: str | None) -> None:
        with self._lock:
            self._phase[stage.name] = (doing, path)

    def _execute(self, stage, started: float) -> Outcome:
        decision, comps = self.decide(stage)
        key = self.keys[stage.name]
        if not decision.stale:
            old = self.state[stage.name]
            self._set_phase(stage, "recording", self.db.path)
            self._record(stage, "fresh", key, comps, old["outs"], old["metrics"], [], {}, [], 0.0, None, state_update=False, cache=False)
            return Outcome(stage.name, "fresh", outputs=old["outs"], metrics=old["metrics"])
        note = None
        if self.use_run_cache and stage.name not in self.forced and not stage.always_changed:
            self._set_phase(stage, "restoring from the cache", self.ws.abs(stage.outs[0]) if stage.outs else None)
            restored, note = self._try_restore(stage, key)
            if restored is not None:
                duration = time.monotonic() - started
                self._set_phase(stage, "recording", self.db.path)
                self._record(stage, "restored", key, comps, restored["outs"], restored["metrics"], restored["remedy"], restored["info"], decision.reasons, duration, None, state_update=True, cache=False)
                return Outcome(stage.name, "restored", decision.reasons, duration, restored["metrics"], restored["outs"], note=restored.get("note"))
        log = self.log_path(stage)
        if self.on_start is not None:
            self.on_start(stage.name, decision.reasons)
        self._set_phase(stage, "running", self.ws.abs(stage.outs[0]) if stage.outs else self.ws.abs(log))
        if self.runner is not None:  # another process or host runs it; outputs come back stored
            result, outputs = self.runner.run_and_store(self, stage, log)
        else:
            result = self._run(stage, log)
            for out in stage.outs:
                self.hasher.forget(out)
            self._set_phase(stage, "storing outputs", self.objects.root)
            outputs = self._store_outputs(stage)
        remedy = self._remedy_blobs(stage, result)
        duration = time.monotonic() - started
        self._set_phase(stage, "recording", self.db.path)
        # a cache object found corrupt or missing on the way is kept in the record, not only printed
        reasons = list(decision.reasons) + ([note] if note else [])
        self._record(stage, "ran", key, comps, outputs, result.metrics, remedy, result.info, reasons, duration, log, state_update=True, cache=True)
        return Outcome(stage.name, "ran", decision.reasons, duration, result.metrics, outputs, log=log, note=note)

    def _try_restore(self, stage, key: str):
        entry = self.db.cache_get(key)
        if entry is None and self.remote is not None:
            from ascendpipe.engine.remote_sync import restore_from_remote

            return restore_from_remote(self, stage, key)
        if entry is None or set(entry["outs"]) != set(stage.outs):
            return None, None
        try:
            for digest in entry["outs"].values():
                self.objects.verify(digest)
            for out, digest in entry["outs"].items():
                self.objects.restore(digest, self.ws.abs(out))
                self.hasher.forget(out)
        except FileNotFoundError:
            self._drop_entry(key)
            return None, "cache object missing, rebuilt"
        except CorruptObject as exc:
            self._drop_entry(key)
            return None, f"{exc}; rebuilt"
        return entry, None

    def _drop_entry(self, key: str) -> None:
        from ascendpipe.store.runcache import remove_entry

        remove_entry(self.ws.cache_root, key)
        self.db.cache_drop(key)

    def _run(self, stage, log: str):
        os.makedirs(os.path.dirname(self.ws.abs(log)), exist_ok=True)
        log_abs = self.ws.abs(log)
        with open(log_abs, "w") as f:
            f.write(f"# ascendpipe stage {stage.name} ({stage.kind}), run {self.run_id}\n")
        kind = self._kind(stage)
        if stage.kind == "run":
            try:
                return kind.execute(stage, self.ws.root, log_abs)
            except StageFailed as exc:
                raise StageFailed(stage.name, exc.message, log) from None
        return self._run_builtin(stage, kind, log, log_abs)

    def _run_listened(self, name: str, kind, ctx):
        """``kind.run(ctx)``, its ``ticker.report`` counts handed to ``on_progress`` (the console's status line)."""
        if self.on_progress is None:
            return kind.run(ctx)
        from ascendpipe import ticker

        on_progress = self.on_progress
        with ticker.listening(lambda done, total, unit: on_progress(name, done, total, unit)):
            return kind.run(ctx)

    def _run_builtin(self, stage, kind, log: str, log_abs: str):
        import shutil
        import tempfile

        from ascendpipe.stages.base import METRICS_FILE, StageContext, Upstream, write_metrics

        final = self.ws.abs(stage.outs[0])
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = tempfile.mkdtemp(dir=os.path.dirname(final), prefix=f".tmp-{os.path.basename(final)}-")
        try:
            with open(log_abs, "a") as logf:
                ctx = StageContext(
                    name=stage.name,
                    kind=stage.kind,
                    workspace=_P(self.ws.root),
                    out_dir=_P(tmp),
                    final_out_dir=_P(final),
                    params=dict(stage.params),
                    inputs={k: _P(self.ws.abs(v)) for k, v in stage.inputs.items()},
                    upstream={
                        k: Upstream(stage=up, kind=self.pipeline.stages[up].kind, out_dir=_P(self.ws.abs(stage.inputs[k])))
                        for k, up in stage.upstream.items()
                    },
                    backend=self.pipeline.backend,
                    log=logf,
                    thresholds=dict(self.pipeline.thresholds),
                    run_command=self.run_command,
                )
                try:
                    result = self._run_listened(stage.name, kind, ctx)
                except StageFailed as exc:  # the log's last lines say why, not only its header
                    logf.write(f"error: {exc.message}\n")
                    raise
                except UserError as exc:  # the log says why too, and a path error names its field's line
                    exc = self._locate_input_error(stage, exc)
                    logf.write(f"error: {exc}\n")
                    raise exc from None
                except Exception as exc:  # a kind's bug or the OS (a full disk): keep the traceback in the log
                    import traceback

                    from ascendpipe.store.failures import explain

                    logf.write(traceback.format_exc())
                    raise StageFailed(stage.name, explain(exc, tmp), log) from exc
            if result.metrics and getattr(kind, "metrics_in_outputs", True) and not os.path.exists(os.path.join(tmp, METRICS_FILE)):
                write_metrics(_P(tmp), result.metrics)
            # remedy paths are inside the temp folder: make them relative to the final one
            result.remedy_files = {n: os.path.relpath(str(p), tmp) if os.path.isabs(str(p)) else str(p) for n, p in result.remedy_files.items()}
            replace_path(tmp, final)
        except UserError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StageFailed(stage.name, str(exc), log) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return result

    def _store_outputs(self, stage) -> dict:
        outputs = {}
        for out in stage.outs:
            absolute = self.ws.abs(out)
            if os.path.isdir(absolute):
                digest, entries = self.hasher.dir_manifest(out)
                self.objects.put_dir(absolute, digest, entries, share=True)
            else:
                digest = self.hasher.hash_path(out)
                self.objects.put_file(absolute, digest, share=True)
            outputs[out] = digest
        self.hasher.flush()
        return outputs

    def _remedy_blobs(self, stage, result) -> list[dict]:
        blobs = []
        base = self.ws.abs(stage.outs[0]) if stage.kind != "run" else self.ws.root
        for name, rel in sorted(result.remedy_files.items()):
            path = os.path.join(base, str(rel))
            try:
                data = open(path, "rb").read(MAX_REMEDY_BYTES)
            except OSError:
                continue
            text = data.decode("utf-8", errors="replace")
            blobs.append({"name": name, "path": os.path.relpath(path, self.ws.root), "hash": hash_bytes(data), "content": text})
        return blobs

    # -- recording -----------------------------------------------------------------------------
    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _record(self, stage, state, key, comps, outputs, metrics, remedy, info, reasons, duration, log, *, state_update, cache):
        from ascendpipe.engine.stage_record import StageRecord

        rec = StageRecord(self._next_seq(), stage, state, key=key, components=comps, outputs=outputs, metrics=metrics,
                          remedy=remedy, info=info, reasons=reasons, duration=duration, log=log).row()
        if state == "fresh":
            self.db.record_fresh(self.run_id, [rec])
            return
        if cache:  # its copy in cache/ first: a lost database is rebuilt from these (store/runcache.py)
            from ascendpipe.store.runcache import entry_file, write_entry

            # a full cache/ is named as itself, not as the database (a write's OSError names no file)
            self._set_phase(stage, "recording", entry_file(self.ws.cache_root, key))
            write_entry(self.ws.cache_root, key, stage.name, outputs, metrics, remedy, info)
            self._set_phase(stage, "recording", self.db.path)
        self.db.record_stage(self.run_id, self.pipeline_key, rec, state_update=state_update, cache_key=key if cache else None)
        if state_update:
            with self._lock:
                self.state[stage.name] = {"key": key, "components": comps, "outs": outputs, "metrics": metrics, "run_id": self.run_id}

    def _record_failure(self, stage, outcome: Outcome) -> None:
        """Best effort: when the database cannot take it (a full disk), the failure still stands in
        memory, the build still fails, and ``record_errors`` says what could not be written."""
        from ascendpipe.engine.stage_record import StageRecord

        if stage.name in self._interrupted and not (outcome.error or "").startswith("interrupted by "):
            return  # a stage a signal stopped keeps that record, not its killed command's exit code

        rec = StageRecord.failure(self._next_seq(), stage, outcome).row()
        try:
            self.db.record_fresh(self.run_id, [rec])
        except Exception as exc:
            from ascendpipe.store.failures import explain

            with self._lock:
                self.record_errors.append(f"stage '{stage.name}' not recorded: {explain(exc, self.db.path, 'recording')}")

    def record_skipped(self, name: str, because: str) -> None:
        stage = self.pipeline.stages[name]
        outcome = Outcome(name, "skipped", error=f"upstream '{because}' failed")
        with self._lock:
            self.outcomes[name] = outcome
        self._record_failure(stage, outcome)


def _P(path: str):
    from pathlib import Path

    return Path(path)
