"""A build: resolve, lock, decide, then either record a no-op at once or let doit run what is stale."""

from __future__ import annotations

import os
import sys
import time

from ascendpipe.errors import UserError
from ascendpipe.graph.dag import edges, topo_order, upstream_closure
from ascendpipe.graph.key import key_of

VERSION = "0.1.0"


class BuildOptions:
    def __init__(self, targets=(), force=False, dry_run=False, jobs=None, overrides=(), backend=None, keep_going=False,
                 use_run_cache=True, wait_for_lock=True, quiet=False, argv=(), run_command=None,
                 executor="local", address=None, remote=None, use_remote=True, retries=2, restore_only=False,
                 memo_argv=None):
        self.targets = list(targets)
        self.force = force
        self.dry_run = dry_run
        self.jobs = jobs  # None: 1 on the local executor, as many as the cluster takes on Ray
        self.overrides = list(overrides)
        self.backend = backend
        self.keep_going = keep_going
        self.use_run_cache = use_run_cache
        self.wait_for_lock = wait_for_lock
        self.quiet = quiet
        self.argv = list(argv)
        self.run_command = run_command  # injected subprocess runner for the ascend backend (tests)
        # scale-out (docs/scale-out.md): where stages run, and the shared remote cache
        self.executor = executor  # "local" (doit threads here) | "ray"
        self.address = address  # Ray cluster address; None: the connected or a new local instance
        self.remote = remote  # remote cache URL overriding the workspace's and the pipeline's
        self.use_remote = use_remote
        self.retries = retries  # Ray: reruns of a stage whose worker or node died
        self.restore_only = restore_only  # `pull`: restore from the caches, run nothing
        # the command line (after `ascendpipe`) a no-op of this build may be remembered for, so that
        # running it again replays the answer (engine/noop_memo.py); None: never remembered
        self.memo_argv = memo_argv


def select(pipeline, graph, targets: list[str]) -> list[str]:
    """The stages a build covers, in topological order: the targets and everything upstream."""
    order = topo_order(pipeline, graph)
    if not targets:
        return order
    chosen = set()
    for t in targets:
        if t in pipeline.stages:
            chosen.add(t)
            continue
        variants = [n for n, s in pipeline.stages.items() if s.base == t]
        if not variants:
            import difflib

            bases = list(dict.fromkeys(s.base for s in pipeline.stages.values()))
            close = difflib.get_close_matches(t, [*bases, *pipeline.stages], n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UserError(f"unknown stage '{t}'{hint}; stages: {', '.join(bases)}")
        chosen.update(variants)
    closure = upstream_closure(graph, chosen)
    return [n for n in order if n in closure]


def open_stores(pipeline):
    from ascendpipe.engine.workspace import Workspace
    from ascendpipe.store.db import Database
    from ascendpipe.store.hashing import Hasher
    from ascendpipe.store.objects import ObjectStore

    ws = Workspace(pipeline.workspace)
    db = Database(ws.db_path, cache_root=ws.cache_root)
    hasher = Hasher(db, ws.root)
    objects = ObjectStore(ws.cache_root)
    return ws, db, hasher, objects


def build(path: str, options: BuildOptions, stream=None) -> dict:
    from ascendpipe.engine.executor import StageExecutor
    from ascendpipe.engine.plan import resolve
    from ascendpipe.engine.progress import Progress
    from ascendpipe.engine.workspace import BuildLock

    started = time.monotonic()
    stream = stream or sys.stdout
    recorder = None
    if options.memo_argv is not None and not (options.force or options.dry_run or options.restore_only):
        from ascendpipe.engine.noop_memo import Recorder

        recorder = Recorder(options.memo_argv, path)  # before anything is read: its stats vouch for what follows
    pipeline = resolve(path, options.overrides, options.backend)
    graph = edges(pipeline)
    order = select(pipeline, graph, options.targets)
    if pipeline.backend == "ascend":  # one clear error before anything runs, not one per tool call
        from ascendpipe.backends.ascend.tool_paths import check_workspace

        check_workspace(pipeline.workspace)
    if options.dry_run:
        from ascendpipe.engine.owners import check_pipeline

        check_pipeline(pipeline, options.overrides, options.backend)  # the build would be refused: say so
        return dry_run(pipeline, graph, order, options, stream)
    ws, db, hasher, objects = open_stores(pipeline)
    progress = Progress(stream, quiet=options.quiet, workspace=ws.root)
    if recorder is not None:
        hasher.observed, progress.transcript = {}, []
    remembered = None  # what a memo of this no-op needs from inside the lock
    doit_rc = 0
    state = "failed"
    with BuildLock(ws, wait=options.wait_for_lock, stream=sys.stderr), _Signals() as signals:
        crashed = db.mark_crashed()  # we hold the lock: a run still `running` lost its owner
        if crashed and not options.quiet:
            sys.stderr.write(f"note: run{'s' if len(crashed) > 1 else ''} {', '.join(map(str, crashed))} "
                             f"ended without finishing (killed or crashed); recorded as crashed\n")
        from ascendpipe.engine.owners import claim

        try:  # two pipelines never write one path (engine/owners.py): refused before a run is recorded
            notes = claim(pipeline, ws, db, options.overrides, options.backend)
            for note in notes:
                if not options.quiet:
                    sys.stderr.write(note + "\n")
        except BaseException:
            db.close()
            raise
        run_id = db.start_run(ws.rel_pipeline(pipeline.path), options.argv or sys.argv, pipeline.backend, VERSION)
        forced = set(order) if options.force else set()
        executor = StageExecutor(pipeline, ws, db, hasher, objects, run_id, forced=forced, use_run_cache=options.use_run_cache, run_command=options.run_command)
        scale_out = None
        try:
            scale_out = _scale_out(executor, pipeline, ws, order, options)  # None unless a remote or Ray is in play
            if not forced and not options.restore_only and _all_fresh(executor, order):
                records = _record_noop(executor, order)
                if recorder is not None and not crashed and not notes and not db.notes and scale_out is None:
                    remembered = recorder.facts(executor, order, records, VERSION)
                for name in order:
                    progress.finished(executor.outcomes[name])
            else:
                from ascendpipe.engine.doit_glue import run_stages

                executor.on_start = progress.started
                executor.on_progress = progress.tick
                progress.verb = "restoring" if options.restore_only else "running"

                def execute(name):
                    outcome = executor.execute(name)
                    progress.finished(outcome)
                    return outcome

                def on_skip(name, because):
                    executor.record_skipped(name, because)
                    progress.finished(executor.outcomes[name])

                def on_error(name, message):
                    _fail(executor, name, message)
                    progress.finished(executor.outcomes[name])

                # something is stale: only now reach the remote and start or join Ray (a no-op never does)
                jobs = scale_out.start(options.jobs, order) if scale_out is not None else (options.jobs or 1)
                doit_rc = run_stages(order, graph, execute, on_skip, jobs=jobs, keep_going=options.keep_going,
                                     dep_file=ws.doit_db, on_error=on_error)
            state = "done"
        except UserError:  # refused while deciding (a dep turned FIFO): its one line says it, not a list of skips
            state = "refused"
            raise
        except KeyboardInterrupt as exc:
            state = "interrupted"
            signals.ignore()  # a second ^C must not cut the recording short
            name = getattr(exc, "signal_name", "SIGINT")
            for running in sorted(executor.running):
                executor.interrupt_stage(running, name)
            _stop_descendants()  # stage commands (and what they started) must not run on unrecorded
            raise
        finally:
            _finish(executor, order, progress, state, doit_rc, hasher, db, run_id, scale_out)
    before = "".join(progress.transcript or ())
    progress.summary({n: executor.outcomes[n] for n in order if n in executor.outcomes}, time.monotonic() - started, run_id)
    from ascendpipe.records import run_record

    try:
        record = run_record(db, run_id)
    finally:
        db.close()
    _overlay(record, executor, order)
    summary_end = len(progress.transcript or ())
    if not options.quiet:
        from ascendpipe.engine.progress import headline

        infos = {n: st.get("info") for n, st in record["stages"].items()}
        progress.write(headline(pipeline, executor.outcomes, order, infos=infos))
    if remembered is not None and executor.final_state == "done" and not executor.record_errors:
        recorder.save(ws.state_dir, colour=progress.colour, observed=hasher.observed, **remembered, before=before,
                      after="".join(progress.transcript[summary_end:]))
    return record


def _fail(executor, name: str, message: str) -> None:
    """A stage doit saw fail outside the executor's own handling: failed, with its reason."""
    from ascendpipe.engine.executor import Outcome

    outcome = Outcome(name, "failed", error=message)
    with executor._lock:
        if executor.outcomes.get(name) is not None and executor.outcomes[name].state == "failed":
            return
        executor.outcomes[name] = outcome
    executor._record_failure(executor.pipeline.stages[name], outcome)


def _finish(executor, order, progress, state, doit_rc, hasher, db, run_id, scale_out) -> None:
    """Close a run whatever happened: stages never reached are `skipped` (and recorded), the run is
    `done`, `failed` or `interrupted`; what the database cannot take is said, not raised over the
    error that got us here."""
    from ascendpipe.engine.executor import Outcome
    from ascendpipe.engine.stage_record import StageRecord

    failed = any(o.state == "failed" for o in executor.outcomes.values())
    if state == "interrupted":
        why = "not run: the build was interrupted"
    elif state == "refused":
        why = "not run: the build was refused (its error says why)"
    elif doit_rc not in (0, None) and not failed:
        why = f"not run: the scheduler (doit) stopped with exit code {doit_rc}; its error is above"
    else:
        why = "not run: the build stopped at a failure (use --keep-going)"
    unreached = []
    for name in order:
        if name not in executor.outcomes:
            executor.outcomes[name] = Outcome(name, "skipped", error=why)
            unreached.append(name)
            if state not in ("interrupted", "refused"):
                progress.finished(executor.outcomes[name])
    failed = any(o.state == "failed" for o in executor.outcomes.values())
    if state == "done" and (failed or doit_rc not in (0, None)):
        state = "failed"
    if state == "done" and executor.record_errors or state == "refused":
        state = "failed"
    executor.final_state = state
    try:
        if unreached:
            recs = [StageRecord.failure(executor._next_seq(), executor.pipeline.stages[n], executor.outcomes[n]).row()
                    for n in unreached]
            db.record_fresh(run_id, recs)
        hasher.flush()
        db.finish_run(run_id, state)
    except Exception as exc:
        from ascendpipe.store.failures import explain

        executor.record_errors.append(f"run {run_id} not closed: {explain(exc, db.path, 'recording')}")
    finally:
        if scale_out is not None:
            scale_out.close()
    for line in executor.record_errors:
        progress.write(f"  warning: {line}\n")


def _overlay(record: dict, executor, order) -> None:
    """The returned record says what happened even where the database could not take it."""
    stages = record.setdefault("stages", {})
    for name in order:
        o = executor.outcomes.get(name)
        if o is not None and name not in stages and o.state in ("failed", "skipped"):
            stages[name] = {"kind": executor.pipeline.stages[name].kind, "state": o.state, "params": executor.pipeline.stages[name].params,
                            "outputs": {}, "metrics": {}, "error": o.error}
    state = getattr(executor, "final_state", None)
    if state and record.get("state") in (None, "running"):
        record["state"] = state


def _stop_descendants() -> None:
    """SIGTERM every process descended from this one (a stage's shell and what it started; with -j N
    the commands other threads are waiting on). Found through /proc, so never anything else in the
    process group (a `| tee`, the calling script); elsewhere only what subprocess itself kills."""
    import signal

    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return
    children: dict[int, list[int]] = {}
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces and parentheses
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    todo, found = [os.getpid()], []
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    for pid in found:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


class _Signals:
    """SIGTERM becomes a KeyboardInterrupt naming it (as SIGINT already is), so one path records an
    interrupted build; only in the main thread, and the handlers before are put back."""

    def __init__(self):
        self.saved = {}

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            before = signal.getsignal(sig)
            if sig == signal.SIGINT and before is not signal.default_int_handler:
                continue  # someone else handles ^C (a notebook, a test harness): leave it
            if sig == signal.SIGTERM and before not in (signal.SIG_DFL, None):
                continue
            self.saved[sig] = before
            signal.signal(sig, _raise_interrupt)
        return self

    def ignore(self) -> None:
        import signal

        for sig in self.saved:
            signal.signal(sig, signal.SIG_IGN)

    def __exit__(self, *exc):
        import signal

        for sig, before in self.saved.items():
            signal.signal(sig, before)
        return False


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum


def _raise_interrupt(signum, frame):
    raise Interrupted(signum)


def _scale_out(executor, pipeline, ws, order, options):
    """Attach the remote cache and the Ray runner to the executor (engine/scale_out.py)."""
    if options.executor == "local" and not options.restore_only:
        no_remote_named = not (options.remote or getattr(pipeline, "remote", None) or os.path.exists(os.path.join(ws.state_dir, "config.json")))
        if not options.use_remote or no_remote_named:
            return None  # a plain local build: nothing to attach, nothing more to import
    from ascendpipe.engine.scale_out import attach

    return attach(executor, pipeline, ws, order, options)


def _all_fresh(executor, order) -> bool:
    """Decide every stage in order; True when nothing needs to run (the no-op fast path)."""
    from ascendpipe.engine.executor import Outcome

    decided = {}
    for name in order:
        stage = executor.pipeline.stages[name]
        decision, comps = executor.decide(stage)
        if decision.stale:
            return False
        decided[name] = comps
    executor._noop = decided
    for name in order:
        old = executor.state[name]
        executor.outcomes[name] = Outcome(name, "fresh", outputs=old["outs"], metrics=old["metrics"])
    return True


def _record_noop(executor, order) -> list[dict]:
    from ascendpipe.engine.stage_record import StageRecord

    recs = [StageRecord.fresh(seq, executor.pipeline.stages[name], executor.keys[name], executor._noop[name],
                              executor.state[name]).row()
            for seq, name in enumerate(order, 1)]
    executor.db.record_fresh(executor.run_id, recs)
    return recs


def stage_status(path: str, overrides=(), backend=None, targets=()) -> dict:
    """``{"stages": {NAME: {"state": "fresh"|"stale", "reasons": [...]}}}`` without building."""
    from ascendpipe.engine.plan import resolve

    pipeline = resolve(path, overrides, backend)
    graph = edges(pipeline)
    order = select(pipeline, graph, list(targets))
    return {"stages": _decide_all(pipeline, graph, order)}


def check_paths(pipeline) -> None:
    """``validate``'s check of paths inside other stages' outputs: a missing one is an error at its
    field's line when the stage making that output is built and fresh (it will not appear)."""
    from ascendpipe.engine.executor import StageExecutor

    suspects = [(stage, dep) for stage in pipeline.stages.values() for dep in stage.deps
                if not os.path.lexists(os.path.join(pipeline.workspace, dep))
                and any(dep.startswith(o.rstrip("/") + "/") and os.path.isdir(os.path.join(pipeline.workspace, o))
                        for other in pipeline.stages.values() if other is not stage for o in other.outs)]
    if not suspects or not os.path.isdir(os.path.join(pipeline.workspace, ".ascendpipe")):
        return
    ws, db, hasher, objects = open_stores(pipeline)
    try:
        executor = StageExecutor(pipeline, ws, db, hasher, objects, run_id=0)
        for stage, dep in suspects:
            executor._check_inside_built_output(stage, dep)
    finally:
        db.close()


def _decide_all(pipeline, graph, order) -> dict:
    from ascendpipe.engine.executor import StageExecutor

    ws, db, hasher, objects = open_stores(pipeline)
    try:
        executor = StageExecutor(pipeline, ws, db, hasher, objects, run_id=0)
        result: dict[str, dict] = {}
        for name in order:
            stage = pipeline.stages[name]
            stale_ups = [u for u in graph.get(name, ()) if result.get(u, {}).get("state") == "stale"]
            comps = None
            try:
                decision, comps = executor.decide(stage)
                reasons = list(decision.reasons)
                stale = decision.stale
            except UserError as err:  # with its location: a path error names the pipeline's file:line
                stale, reasons = True, [str(err)]
            if stale_ups:
                # its inputs will change when the upstream rebuilds (unless byte-identical: early cutoff)
                reasons.append(f"upstream '{stale_ups[0]}' is stale")
                stale = True
            if stale:
                cached = db.cache_get(key_of(comps)) if comps is not None and not stale_ups else None
                entry = {"state": "stale", "reasons": reasons}
                if cached is not None:
                    entry["restorable"] = True
                result[name] = entry
            else:
                result[name] = {"state": "fresh", "reasons": []}
        try:
            hasher.flush()
        except UserError:
            pass  # the stat cache is only a cache: a full disk must not fail `status`
        return result
    finally:
        db.close()


def dry_run(pipeline, graph, order, options, stream) -> dict:
    decisions = _decide_all(pipeline, graph, order)
    would = [n for n in order if decisions[n]["state"] == "stale"]
    said: set = set()  # tool and backend changes are printed once, at the first stage they concern
    for name in order:
        d = decisions[name]
        if d["state"] == "fresh":
            stream.write(f"  fresh      {name}\n")
            continue
        verb = "restore" if d.get("restorable") else "run"
        shared = [r for r in d["reasons"] if r.startswith(("tool ", "backend "))]
        shown = [r for r in d["reasons"] if r not in shared or r not in said]
        if len(shown) < len(d["reasons"]):
            shown.append(f"{len(d['reasons']) - len(shown)} tool/backend change(s) as above")
        said.update(shared)
        stream.write(f"  would {verb:<8} {name}: {'; '.join(shown)}\n")
        argvs, problem = _commands(pipeline, pipeline.stages[name])
        for argv in argvs:
            import shlex

            note = getattr(argv, "note", None)  # in-process work (a golden ONNX on the host): no argv runs
            stream.write(f"      = {note}\n" if note else f"      $ {shlex.join(argv)}\n")
        if problem:  # the build would stop here too: say so now rather than show no command
            stream.write(f"      ! {problem}\n")
            d["problem"] = problem
    stream.write(f"{len(would)} of {len(order)} stages would run\n")
    return {"dry_run": True, "would_run": would, "stages": decisions}


def _commands(pipeline, stage) -> tuple[list[list[str]], str | None]:
    """External command lines a stage would run (for --dry-run; mostly the ascend backend), and the
    user error that keeps them from being built (e.g. atc without a soc_version), if any."""
    if stage.kind == "run":
        return [["/bin/sh", "-c", stage.cmd]], None
    from pathlib import Path

    from ascendpipe.stages.base import StageContext, Upstream
    from ascendpipe.stages.registry import get_kind

    kind = get_kind(stage.kind)
    root = Path(pipeline.workspace)
    # the upstream kinds, as the run gets them: what a model input is (an OM or a plain ONNX) depends on them
    upstream = {k: Upstream(stage=up, kind=pipeline.stages[up].kind, out_dir=root / stage.inputs[k],
                            params=dict(pipeline.stages[up].params)) for k, up in stage.upstream.items()}
    ctx = StageContext(
        name=stage.name, kind=stage.kind, workspace=root, out_dir=root / stage.outs[0], final_out_dir=root / stage.outs[0],
        params=dict(stage.params), inputs={k: root / v for k, v in stage.inputs.items()}, upstream=upstream,
        backend=pipeline.backend,
        log=open(os.devnull, "w"), thresholds=dict(pipeline.thresholds),
    )
    try:
        return kind.commands(ctx) or [], None
    except UserError as err:
        return [], str(err)
