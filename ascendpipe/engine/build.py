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
                 executor="local", address=None, remote=None, use_remote=True, retries=2, restore_only=False):
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
            known = ", ".join(dict.fromkeys(s.base for s in pipeline.stages.values()))
            raise UserError(f"unknown stage '{t}'; stages: {known}")
        chosen.update(variants)
    closure = upstream_closure(graph, chosen)
    return [n for n in order if n in closure]


def open_stores(pipeline):
    from ascendpipe.engine.workspace import Workspace
    from ascendpipe.store.db import Database
    from ascendpipe.store.hashing import Hasher
    from ascendpipe.store.objects import ObjectStore

    ws = Workspace(pipeline.workspace)
    db = Database(ws.db_path)
    hasher = Hasher(db, ws.root)
    objects = ObjectStore(ws.cache_root)
    return ws, db, hasher, objects


def build(path: str, options: BuildOptions, stream=None) -> dict:
    from ascendpipe.engine.executor import Outcome, StageExecutor
    from ascendpipe.engine.plan import resolve
    from ascendpipe.engine.progress import Progress
    from ascendpipe.engine.workspace import BuildLock

    started = time.monotonic()
    stream = stream or sys.stdout
    pipeline = resolve(path, options.overrides, options.backend)
    graph = edges(pipeline)
    order = select(pipeline, graph, options.targets)
    if pipeline.backend == "ascend":  # one clear error before anything runs, not one per tool call
        from ascendpipe.backends.ascend.tool_paths import check_workspace

        check_workspace(pipeline.workspace)
    if options.dry_run:
        return dry_run(pipeline, graph, order, options, stream)
    ws, db, hasher, objects = open_stores(pipeline)
    progress = Progress(stream, quiet=options.quiet, workspace=ws.root)
    with BuildLock(ws, wait=options.wait_for_lock, stream=sys.stderr):
        run_id = db.start_run(ws.rel_pipeline(pipeline.path), options.argv or sys.argv, pipeline.backend, VERSION)
        forced = set(order) if options.force else set()
        executor = StageExecutor(pipeline, ws, db, hasher, objects, run_id, forced=forced, use_run_cache=options.use_run_cache, run_command=options.run_command)
        scale_out = _scale_out(executor, pipeline, ws, order, options)  # None unless a remote or Ray is in play
        try:
            if not forced and not options.restore_only and _all_fresh(executor, order):
                _record_noop(executor, order)
                for name in order:
                    progress.finished(executor.outcomes[name])
            else:
                from ascendpipe.engine.doit_glue import run_stages

                executor.on_start = progress.started

                def execute(name):
                    outcome = executor.execute(name)
                    progress.finished(outcome)
                    return outcome

                def on_skip(name, because):
                    executor.record_skipped(name, because)
                    progress.finished(executor.outcomes[name])

                # something is stale: only now reach the remote and start or join Ray (a no-op never does)
                jobs = scale_out.start(options.jobs, order) if scale_out is not None else (options.jobs or 1)
                run_stages(order, graph, execute, on_skip, jobs=jobs, keep_going=options.keep_going, dep_file=ws.doit_db)
                for name in order:
                    if name not in executor.outcomes:
                        executor.outcomes[name] = Outcome(name, "skipped", error="not run: the build stopped at a failure (use --keep-going)")
                        progress.finished(executor.outcomes[name])
        finally:
            hasher.flush()
            failed = any(o.state == "failed" for o in executor.outcomes.values())
            db.finish_run(run_id, "failed" if failed else "done")
            if scale_out is not None:
                scale_out.close()
    progress.summary({n: executor.outcomes[n] for n in order if n in executor.outcomes}, time.monotonic() - started, run_id)
    if not options.quiet:
        from ascendpipe.engine.progress import headline

        progress.write(headline(pipeline, executor.outcomes, order))
    from ascendpipe.records import run_record

    record = run_record(db, run_id)
    db.close()
    return record


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


def _record_noop(executor, order) -> None:
    from ascendpipe.engine.stage_record import StageRecord

    recs = [StageRecord.fresh(seq, executor.pipeline.stages[name], executor.keys[name], executor._noop[name],
                              executor.state[name]).row()
            for seq, name in enumerate(order, 1)]
    executor.db.record_fresh(executor.run_id, recs)


def stage_status(path: str, overrides=(), backend=None, targets=()) -> dict:
    """``{"stages": {NAME: {"state": "fresh"|"stale", "reasons": [...]}}}`` without building."""
    from ascendpipe.engine.plan import resolve

    pipeline = resolve(path, overrides, backend)
    graph = edges(pipeline)
    order = select(pipeline, graph, list(targets))
    return {"stages": _decide_all(pipeline, graph, order)}


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
            except UserError as err:
                stale, reasons = True, [err.message]
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
        hasher.flush()
        return result
    finally:
        db.close()


def dry_run(pipeline, graph, order, options, stream) -> dict:
    decisions = _decide_all(pipeline, graph, order)
    would = [n for n in order if decisions[n]["state"] == "stale"]
    for name in order:
        d = decisions[name]
        if d["state"] == "fresh":
            stream.write(f"  fresh      {name}\n")
            continue
        verb = "restore" if d.get("restorable") else "run"
        stream.write(f"  would {verb:<8} {name}: {'; '.join(d['reasons'])}\n")
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
