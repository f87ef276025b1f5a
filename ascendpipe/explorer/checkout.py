"""``ascendpipe checkout RUN [STAGE...]``: the params of a recorded run back in the pipeline's
overrides file, its outputs back from the cache, and its built state back in the workspace, so the
next ``ascendpipe build`` finds every checked-out stage fresh and reports the run's metrics.

The engine resolves settings from the pipeline file plus ``--set`` lines; the overrides file
(``reid.yaml`` -> ``reid.overrides``) is ``--set`` lines that every command applies first. Checkout
writes there the fewest lines that give each stage its recorded params: for each param that differs
between the pipeline as written now and the run, one line at the narrowest level that sets it (the
stage's named matrix variant, else the stage).

Nothing is restored unless every output the run recorded is still in the cache: a run whose objects
were garbage-collected is refused in one line (``--settings-only`` writes the overrides alone). Nor
into a folder another pipeline file has claimed since the run (engine/owners.py): refused in one
located line, as ``build`` refuses it, before anything is written.
"""

from __future__ import annotations

import json
import os

from ascendpipe.errors import UserError


# -- pure: params -> override lines ------------------------------------------------------------
def format_value(value) -> str:
    """A value as the ``--set`` grammar (YAML) reads it back unchanged."""
    if isinstance(value, str):
        import yaml

        try:
            plain = yaml.safe_load(value) == value and value == value.strip() and "\n" not in value and value != ""
        except yaml.YAMLError:
            plain = False
        return value if plain and not value.startswith(("#", "[", "{", "'", '"', "&", "*", "!", "|", ">", "%", "@", "`")) else json.dumps(value)
    return json.dumps(value, separators=(", ", ": "))


def _canon(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def override_lines(current: dict, recorded: dict, named_variants: dict[str, set],
                   run_stages: frozenset | set = frozenset()) -> tuple[list[str], list[str]]:
    """Override lines that turn the current params into the recorded ones, and what cannot be set back.

    ``current`` / ``recorded``: stage name -> params (``recorded`` only for the stages to check out);
    ``named_variants``: base -> variant names written as ``matrix: {NAME: {...}}`` (overridable one
    by one). A param the pipeline gained since the run cannot be removed by an override: reported.
    A param of a ``run`` stage (``run_stages``) the pipeline dropped since is set back with ``+``
    (``--set`` refuses a param a run stage does not have as a typo).
    """
    lines: dict[str, str] = {}
    problems: list[str] = []
    stage_level: dict[tuple[str, str], dict] = {}  # (base, param) -> {canon: (value, [stages])}
    gone: set[tuple[str, str]] = set()  # params the pipeline no longer has: `--set +` adds them back
    for name, want in recorded.items():
        have = current.get(name)
        if have is None:
            problems.append(f"stage {name} is no longer in the pipeline")
            continue
        base, _, variant = name.partition("@")
        for k in sorted(set(want) | set(have)):
            if k in want and k in have and _canon(want[k]) == _canon(have[k]):
                continue
            if k not in want:
                problems.append(f"stage {name}: param {k} was added to the pipeline after the run; remove it by hand for an exact checkout")
                continue
            if variant and variant in named_variants.get(base, set()):
                plus = "+" if k not in have and name in run_stages else ""
                lines[f"stages.{base}.matrix.{variant}.{k}"] = f"{plus}stages.{base}.matrix.{variant}.{k}={format_value(want[k])}"
            else:
                stage_level.setdefault((base, k), {}).setdefault(_canon(want[k]), (want[k], []))[1].append(name)
                if k not in have and name in run_stages:
                    gone.add((base, k))
    for (base, k), values in stage_level.items():
        if len(values) > 1:
            detail = "; ".join(f"{', '.join(names)}: {_canon(v)}" for v, names in values.values())
            problems.append(f"param {k} of {base}'s variants had different values ({detail}); one override cannot give each its own")
            continue
        (value, _), = values.values()
        plus = "+" if (base, k) in gone else ""
        lines[f"stages.{base}.params.{k}"] = f"{plus}stages.{base}.params.{k}={format_value(value)}"
    return list(lines.values()), problems


def owned(line: str, bases: set[str], names: set[str], everything: bool) -> bool:
    """Whether an existing override line concerns the stages being checked out (it is replaced)."""
    if everything:
        return True
    parts = line.partition("=")[0].strip().lstrip("+").split(".")
    if parts[0] != "stages" or len(parts) < 3:
        return False
    if parts[2] == "matrix" and len(parts) >= 4:
        return f"{parts[1]}@{parts[3]}" in names
    return parts[1] in bases


def file_text(lines: list[str], run: dict, argv: str) -> str:
    header = [
        f"# --set lines applied by every ascendpipe command on {os.path.basename(run['pipeline'])}, before the",
        "# command line's own --set. Delete this file to build the pipeline as written.",
        f"# Written by `{argv}` (run {run['id']}, started {run['started']}).",
    ]
    return "\n".join(header + lines) + "\n"


# -- I/O: the whole checkout ---------------------------------------------------------------------
def _named_variants(pipeline_path: str) -> dict[str, set]:
    import yaml

    with open(pipeline_path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    out = {}
    for base, raw in (data.get("stages") or {}).items():
        matrix = (raw or {}).get("matrix") if isinstance(raw, dict) else None
        if isinstance(matrix, dict) and matrix and all(isinstance(v, dict) for v in matrix.values()):
            out[base] = {str(k) for k in matrix}
    return out


def checkout(run_ref, stages=(), *, workspace: str, settings_only: bool = False, argv: str | None = None) -> dict:
    from ascendpipe.config.overrides import overrides_file, read_overrides_file
    from ascendpipe.engine.build import open_stores, select
    from ascendpipe.engine.plan import resolve
    from ascendpipe.engine.workspace import BuildLock, Workspace
    from ascendpipe.fsutil import write_text_atomic
    from ascendpipe.graph.dag import edges
    from ascendpipe.records import resolve_run_id, run_record
    from ascendpipe.store.db import Database

    ws = Workspace(workspace)
    db = Database(ws.db_path)
    try:
        run = run_record(db, resolve_run_id(db, str(run_ref)))
    finally:
        db.close()
    if run.get("state") == "running":
        raise UserError(f"run {run['id']} is still running (or was killed); check out a finished run")
    path = ws.abs(run["pipeline"])
    if not os.path.exists(path):
        raise UserError(f"run {run['id']} built {run['pipeline']}, which no longer exists in {ws.root}")
    recorded = run["stages"]

    # which stages: the ones named (base names mean every variant) and what they need, among the run's
    everything = not stages
    now = resolve(path, backend=run["backend"], use_cache=False)
    wanted = [n for n in select(now, edges(now), list(stages)) if n in recorded] if stages else [n for n in now.stages if n in recorded]
    if stages and not wanted:
        raise UserError(f"run {run['id']} has none of {', '.join(stages)}; its stages: {', '.join(recorded)}")
    names = set(wanted)
    bases = {n.partition("@")[0] for n in wanted}

    # overrides: lines kept from the file for other stages, then those that give these stages their params
    ofile = overrides_file(path)
    kept = [] if everything else [line for line in read_overrides_file(path) if not owned(line, bases, names, False)]
    base_pipeline = resolve(path, kept, run["backend"], use_cache=False, overrides_file=False)
    lines, problems = override_lines(
        {n: s.params for n, s in base_pipeline.stages.items()},
        {n: recorded[n].get("params") or {} for n in wanted},
        _named_variants(path),
        {n for n, s in base_pipeline.stages.items() if s.kind == "run"},
    )
    default_backend = resolve(path, kept, None, use_cache=False, overrides_file=False).backend
    if run["backend"] != default_backend and (everything or not any(line.startswith("backend=") for line in kept)):
        kept = [line for line in kept if not line.startswith("backend=")]
        lines.insert(0, f"backend={run['backend']}")
    all_lines = kept + lines
    target = resolve(path, all_lines, None, use_cache=False, overrides_file=False)
    for n in wanted:  # what the lines could not give back
        if n in target.stages and _canon(target.stages[n].params) != _canon(recorded[n].get("params") or {}):
            if not any(p.startswith(f"stage {n}") or f" {n}" in p for p in problems):
                problems.append(f"stage {n}: its params cannot be fully set back with overrides")

    built = [n for n in wanted if recorded[n].get("state") in ("ran", "restored", "fresh") and recorded[n].get("outputs")]
    not_built = [n for n in wanted if n not in built]
    ws_objects = None
    if not settings_only:
        from ascendpipe.store.objects import ObjectStore

        ws_objects = ObjectStore(ws.cache_root)
        gone = [f"{n} ({out})" for n in built for out, digest in recorded[n]["outputs"].items() if not _present(ws_objects, digest)]
        if gone:
            more = f" and {len(gone) - 1} more" if len(gone) > 1 else ""
            raise UserError(
                f"run {run['id']}'s outputs are no longer in the cache (garbage-collected): {gone[0]}{more}; "
                f"`ascendpipe checkout {run['id']} --settings-only` writes its settings back and the next build reruns them"
            )

    display_argv = argv or f"ascendpipe checkout {run['id']}" + "".join(f" {s}" for s in stages)
    result = {"run": run["id"], "pipeline": run["pipeline"], "overrides_file": os.path.relpath(ofile, ws.root) if all_lines else None,
              "overrides": all_lines, "restored": [], "in_place": [], "from_run_cache": [], "will_run": {}, "problems": problems}
    for n in not_built:
        result["will_run"][n] = [f"it {recorded[n].get('state')} in run {run['id']}"]
    with BuildLock(ws):  # no build reads the overrides or the outputs half-way through
        if not settings_only:  # build's check first: a folder another pipeline claimed since is not overwritten
            result["notes"] = _claim(target, ws)
        if all_lines:
            write_text_atomic(ofile, file_text(all_lines, run, display_argv))
        elif os.path.exists(ofile):
            os.unlink(ofile)  # the pipeline as written already gives the run's params
        if settings_only:
            for n in built:
                result["will_run"][n] = ["--settings-only: outputs not restored"]
            return result
        pipeline = resolve(path, (), None)  # as the next build will: the file just written applies
        _, db, hasher, objects = open_stores(pipeline)
        try:
            order = edges_order(pipeline)
            _restore(pipeline, ws, db, hasher, objects, run, [n for n in order if n in built], result)
            if everything:
                _complete(pipeline, ws, db, hasher, objects, run, [n for n in order if n not in recorded], result)
        finally:
            hasher.flush()
            db.close()
    return result


def _claim(pipeline, ws) -> list[str]:
    """The checked-out pipeline (as the overrides file being written resolves it) claims its paths as
    ``build`` does (engine/owners.py): a path another pipeline file has claimed since the run is refused
    in one located line before anything is written; a stale claim is taken over (the notes say so)."""
    from ascendpipe.engine.owners import claim
    from ascendpipe.store.db import Database

    db = Database(ws.db_path)
    try:
        return claim(pipeline, ws, db)
    finally:
        db.close()


def edges_order(pipeline) -> list[str]:
    from ascendpipe.graph.dag import edges, topo_order

    return topo_order(pipeline, edges(pipeline))


def _present(objects, digest: str) -> bool:
    from ascendpipe.store.hashing import DIR_SUFFIX

    if not objects.has(digest):
        return False
    if digest.endswith(DIR_SUFFIX):
        try:
            return all(objects.has(e["hash"]) for e in objects.manifest(digest))
        except (OSError, ValueError):
            return False
    return True


def _restore(pipeline, ws, db, hasher, objects, run: dict, order: list[str], result: dict) -> None:
    """Outputs back in topological order (a stage's key hashes its upstream's restored outputs), then
    each stage whose key comes out as the run's is recorded as built with the run's outputs."""
    from ascendpipe.engine.executor import StageExecutor
    from ascendpipe.graph import key as keymod
    from ascendpipe.store.objects import CorruptObject

    executor = StageExecutor(pipeline, ws, db, hasher, objects, run_id=run["id"])
    pipeline_key = ws.rel_pipeline(pipeline.path)
    for name in order:
        rec = run["stages"][name]
        stage = pipeline.stages.get(name)
        if stage is None:
            continue
        outs = rec["outputs"]
        if set(outs) != set(stage.outs):
            result["will_run"][name] = ["its declared outputs changed since the run"]
            continue
        for out, digest in outs.items():
            if hasher.hash_path(out) == digest:
                continue
            try:
                objects.restore(digest, ws.abs(out))
            except (FileNotFoundError, CorruptObject) as exc:
                raise UserError(f"run {run['id']}'s output {out} of stage {name} cannot be restored: {exc}") from None
            hasher.forget(out)
            if name not in result["restored"]:
                result["restored"].append(name)
        if name not in result["restored"]:
            result["in_place"].append(name)
        comps = executor.components(stage)
        key = keymod.key_of(comps)
        if key != rec.get("key"):
            old = {**comps, "params": rec.get("params") or {}, "deps": rec.get("deps") or {}, "tools": rec.get("tools") or {}}
            reasons = keymod.explain(old, comps) if keymod.key_of(old) != key else ["ascendpipe's code or the stage's command changed since the run"]
            result["will_run"][name] = reasons
            continue
        if stage.always_changed:
            result["will_run"][name] = ["always_changed"]
        db.set_stage_state(pipeline_key, name, key=key, components=comps, outs=dict(outs), metrics=rec.get("metrics") or {}, run_id=run["id"])


def _complete(pipeline, ws, db, hasher, objects, run: dict, order: list[str], result: dict) -> None:
    """The pipeline's stages the run did not build: a partial run (a fix attempt builds only the
    stages it measures) leaves them built for other settings, so the next build would rerun them
    (dump@fp16 after checking out a fix attempt). Each stale one comes back from the run-cache when
    its key is there; otherwise the result says the next build runs it."""
    from ascendpipe.engine.executor import StageExecutor
    from ascendpipe.store.objects import CorruptObject

    executor = StageExecutor(pipeline, ws, db, hasher, objects, run_id=run["id"])  # the state just restored
    pipeline_key = ws.rel_pipeline(pipeline.path)
    for name in order:
        stage = pipeline.stages[name]
        try:
            decision, comps = executor.decide(stage)
        except UserError as exc:  # e.g. a dep that no longer exists: the next build says the same
            result["will_run"][name] = [str(exc)]
            continue
        if not decision.stale:
            continue
        key = executor.keys[name]
        entry = None if stage.always_changed else db.cache_get(key)
        if entry is not None and set(entry["outs"]) == set(stage.outs):
            try:
                for digest in entry["outs"].values():
                    objects.verify(digest)
                for out, digest in entry["outs"].items():
                    objects.restore(digest, ws.abs(out))
                    hasher.forget(out)
            except (FileNotFoundError, CorruptObject):
                entry = None
        if entry is None:
            result["will_run"][name] = [f"not built in run {run['id']} (a partial run, such as a fix attempt)"] + decision.reasons[:1]
            continue
        executor.state[name] = {"components": comps, "outs": dict(entry["outs"]), "key": key}  # its dependents see it fresh
        db.set_stage_state(pipeline_key, name, key=key, components=comps, outs=dict(entry["outs"]),
                           metrics=entry.get("metrics") or {}, run_id=run["id"])
        result["from_run_cache"].append(name)
