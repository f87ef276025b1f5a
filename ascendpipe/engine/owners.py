"""Which pipeline file writes which path of a workspace, so two pipelines never share a folder.

A build records (table ``owners`` of the workspace database) every path its pipeline writes: each
stage's generated folder and log under ``build_dir`` and each explicit ``outs:`` path, for all the
pipeline's stages whatever the targets. ``validate`` and ``build`` of a pipeline that would write a
path another pipeline file holds (the same path, or one inside the other) are refused with one
located line naming the other file and what to do.

A claim stands while its pipeline file exists and, resolved again with the ``--set`` overrides and
backend it was built with, still writes that path. A file that is gone, or that no longer declares
the stage (renamed, removed, another ``build_dir``), releases it: the next build that needs the path
takes it over and says so. A file that exists but no longer resolves keeps its claims (it may be
half-edited, and its outputs are still there): the refusal says so; fix or delete that file.
"""

from __future__ import annotations

import os

from ascendpipe.contract import stage_folder
from ascendpipe.errors import Location, UserError


def claims_of(pipeline) -> dict[str, tuple[str, str]]:
    """``{path: (stage, what)}`` for every path the pipeline writes, in stage order; what: ``folder``
    or ``log`` (named by the engine under ``build_dir``) or ``out`` (an explicit ``outs:`` entry)."""
    claims: dict[str, tuple[str, str]] = {}
    for stage in pipeline.stages.values():
        for path in stage.outs:
            claims.setdefault(path, (stage.name, "out" if stage.kind == "run" else "folder"))
        claims.setdefault(f"{pipeline.build_dir}/{stage_folder(stage.name)}.log", (stage.name, "log"))
    return claims


class _Others:
    """The other pipelines' claims, each judged once: standing, stale (with why) or standing though
    its file no longer resolves (with the error)."""

    def __init__(self, ws):
        self.ws = ws
        self._judged: dict[tuple, tuple] = {}

    def judge(self, row: dict) -> tuple[bool, str | None]:
        """(whether the claim stands, why): why a stale claim is stale (``gone``, or the stage that
        moved), or the resolution error of a file that keeps its claims because it exists but does
        not resolve."""
        import json

        how = row["how"] or {}
        key = (row["pipeline"], json.dumps(how, sort_keys=True))
        if key not in self._judged:
            self._judged[key] = self._resolve(row["pipeline"], how)
        claims, gone, broken = self._judged[key]
        if broken is not None:
            return True, broken
        if gone is not None:
            return False, gone
        if row["path"] in claims and claims[row["path"]][0] == row["stage"]:
            return True, None
        return False, f"stage '{row['stage']}' renamed, removed or moved"

    def _resolve(self, rel: str, how: dict):
        """(its claims, why it has none, its resolution error)."""
        path = self.ws.abs(rel)
        root = os.path.realpath(self.ws.root)
        if not isinstance(how, dict) or not os.path.realpath(path).startswith(root + os.sep):
            # a record naming a file out of the workspace (an edited database, a link): never read
            return None, "gone", None
        if not os.path.isfile(path):
            return None, "gone", None
        try:  # its errors name it as the user would (relative to here when below here)
            shown = os.path.relpath(path)
            path = path if shown.startswith("..") else shown
        except ValueError:
            pass
        from ascendpipe.engine.plan import resolve

        overrides = list(how.get("overrides") or [])
        try:
            other = resolve(path, overrides, how.get("backend"))
        except UserError as err:
            if not overrides:
                return None, None, str(err)
            try:  # the --set it was built with no longer applies (a variant removed): as it reads now
                other = resolve(path, [], how.get("backend"))
            except UserError:
                return None, None, str(err)
        return claims_of(other), None, None


def _suggestion(pipeline, what: str) -> str:
    if what == "out":
        return "write another path here, or rename it in the other file"
    stem = os.path.splitext(os.path.basename(pipeline.path))[0]
    folder = f"build/{stem}" if pipeline.build_dir != f"build/{stem}" else f"build/{stem}_2"
    return f"set `build_dir: {folder}` in {pipeline.path} (or --set build_dir={folder}), or rename the stage"


def _located(pipeline, stage: str, path: str | None, overrides, backend) -> Location:
    """The stage's line, or the out's value, in the pipeline file (resolved again for its marks when
    the resolved pipeline came from the plan cache)."""
    locate = getattr(pipeline, "locate", None)
    if locate is None:
        from ascendpipe.engine.plan import resolve

        try:
            locate = getattr(resolve(pipeline.path, overrides, backend, use_cache=False), "locate", None)
        except UserError:
            locate = None
    if locate is not None:
        return locate(stage, path)
    return Location(file=pipeline.path, line=pipeline.stages[stage].line, stage=stage)


def _folders_above(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def check(pipeline, ws, rows: list[dict], overrides=(), backend=None) -> tuple[dict, list[dict]]:
    """Refuse (one located ``UserError``) a pipeline that would write a path another pipeline file
    in this workspace holds (``rows``: the database's claims). Returns (its claims, the other
    pipelines' stale claims it overlaps)."""
    me = ws.rel_pipeline(pipeline.path)
    mine = claims_of(pipeline)
    rows = [r for r in rows if r["pipeline"] != me]
    if not rows:
        return mine, []
    others = _Others(ws)
    stale: list[dict] = []
    by_path: dict[str, list[dict]] = {}
    under: dict[str, list[dict]] = {}  # a folder -> the claims inside it
    for row in rows:
        by_path.setdefault(row["path"], []).append(row)
        for folder in _folders_above(row["path"]):
            under.setdefault(folder, []).append(row)
    for path, (stage, what) in mine.items():
        near = [r for f in (path, *_folders_above(path)) for r in by_path.get(f, ())] + under.get(path, [])
        for row in near:
            stands, why = others.judge(row)
            if not stands:
                row = dict(row, why=why)
                if row not in stale:
                    stale.append(row)
                continue
            theirs = f" ({row['path']})" if row["path"] != path else ""
            broken = f"; {row['pipeline']} does not resolve now ({why}), so its claim stands until it is fixed or deleted" if why else ""
            raise UserError(
                f"{what} '{path}' is written by another pipeline in this workspace, {row['pipeline']} (stage '{row['stage']}'"
                f"{theirs}){broken}; two pipelines cannot share a path: {_suggestion(pipeline, what)}",
                _located(pipeline, stage, path if what == "out" else None, list(overrides or []), backend),
            )
    return mine, stale


def check_pipeline(pipeline, overrides=(), backend=None) -> None:
    """``validate``'s check: read-only, and nothing to check where nothing was built yet."""
    from ascendpipe.engine.workspace import Workspace

    ws = Workspace(pipeline.workspace)
    if not os.path.isfile(ws.db_path):
        return
    from ascendpipe.store.db import Database

    db = Database(ws.db_path, create=False, cache_root=ws.cache_root)
    try:
        check(pipeline, ws, db.owners(), overrides, backend)
    finally:
        db.close()


def claim(pipeline, ws, db, overrides=(), backend=None) -> list[str]:
    """``build``'s check, then the pipeline's claims recorded (under the build lock). Returns a note
    line per pipeline whose stale claims it took over."""
    rows = db.owners()
    mine, stale = check(pipeline, ws, rows, overrides, backend)
    me = ws.rel_pipeline(pipeline.path)
    how = {"overrides": list(overrides or []), "backend": backend}
    held = {r["path"]: (r["stage"], r["how"]) for r in rows if r["pipeline"] == me}
    wanted = {path: (stage, how) for path, (stage, _) in mine.items()}
    if held != wanted or stale:
        db.set_owners(me, [(path, stage) for path, (stage, _) in mine.items()], how, [r["path"] for r in stale])
    notes = []
    by_file: dict[tuple, list[str]] = {}
    for row in stale:
        by_file.setdefault((row["pipeline"], row["why"]), []).append(row["path"])
    for (other, why), paths in by_file.items():
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        which = "no longer exists" if why == "gone" else f"no longer writes {'it' if len(paths) == 1 else 'them'} ({why})"
        notes.append(f"note: {shown} belonged to {other}, which {which}; now {me}'s")
    return notes
