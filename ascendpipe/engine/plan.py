"""The resolved-pipeline cache that keeps a no-op build cheap.

Resolving a pipeline (YAML, templates, JSON Schema, matrix, graph checks) costs more than the rest
of a no-op build, and its result depends only on the file's bytes, the overrides, the backend flag,
the allow-listed environment variables and ascendpipe's own code. We store the resolved pipeline
under ``.ascendpipe/plans/<fingerprint>.json`` and reuse it while all of those are unchanged.
"""

from __future__ import annotations

import json
import os

from ascendpipe.config.model import Pipeline, find_workspace
from ascendpipe.digest import sha256
from ascendpipe.errors import Location, UserError

PLAN_FORMAT = 1
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Every module that shapes a resolved pipeline: the loader and resolver, the graph checks, the stage
# kinds (params schemas, input fields) and what their schemas import (precision's enums), the backend
# table (the schema's backend enum), this cache. tests/engine/test_plan_fingerprint.py checks from the
# import graph that nothing they import is missing here. Folders end in '/'.
FINGERPRINTED = ("config/", "graph/", "stages/", "engine/", "precision/", "backends/registry.py", "errors.py",
                 "contract.py", "versions.py", "fsutil.py", "digest.py")


def code_stamp(package: str = _PACKAGE) -> str:
    """Changes whenever a module that shapes a resolved pipeline changes (dev installs too)."""
    parts = []
    for item in FINGERPRINTED:
        path = os.path.join(package, item)
        if item.endswith("/"):
            try:
                names = sorted(os.listdir(path))
            except OSError:
                continue
            files = [(item + name, os.path.join(path, name)) for name in names if name.endswith(".py")]
        else:
            files = [(item, path)]
        for rel, full in files:
            try:
                st = os.stat(full)
            except OSError:
                continue
            parts.append(f"{rel}:{st.st_mtime_ns}:{st.st_size}")
    return sha256("|".join(parts).encode()).hexdigest()


def fingerprint(text: bytes, overrides, backend) -> str:
    h = sha256()
    h.update(f"plan{PLAN_FORMAT}\0".encode())
    h.update(text)
    from ascendpipe.backends.registry import BACKENDS

    # backends registered at run time (a plugin, a test double) change the schema's backend enum
    h.update(json.dumps([list(overrides or []), backend, BACKENDS]).encode())
    h.update(code_stamp().encode())
    return h.hexdigest()


def kind_facts_of(pipeline) -> dict:
    """Per kind the pipeline uses, what deciding its stages needs (``stages.registry.kind_facts``):
    constants of the kinds' code, which the plan's fingerprint covers (``FINGERPRINTED``: stages/)."""
    from ascendpipe.stages.registry import kind_facts

    return {kind: kind_facts(kind) for kind in sorted({s.kind for s in pipeline.stages.values()})}


def resolve(path: str, overrides=(), backend: str | None = None, environ: dict | None = None, use_cache: bool = True,
            overrides_file: bool = True) -> Pipeline:
    """The resolved pipeline. The pipeline's overrides file (``reid.yaml`` -> ``reid.overrides``,
    written by ``ascendpipe checkout``) applies before ``overrides`` unless ``overrides_file`` is False."""
    from ascendpipe.config.overrides import read_overrides_file

    environ = dict(os.environ) if environ is None else environ
    file_lines = read_overrides_file(path) if overrides_file else []
    overrides = file_lines + list(overrides or [])
    from ascendpipe.config.paths import refuse_special_pipeline_file

    refuse_special_pipeline_file(str(path))
    try:
        text = open(path, "rb").read()
    except FileNotFoundError:
        raise UserError(f"pipeline file {path} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a folder; give the pipeline's YAML file") from None
    workspace = find_workspace(path)
    state = os.path.join(str(workspace), ".ascendpipe")
    fp = fingerprint(text + b"\0" + os.path.abspath(path).encode(), overrides, backend)
    plan_file = os.path.join(state, "plans", fp + ".json")
    if use_cache:
        from ascendpipe.store.statefiles import read_state_file

        # never read nor written through a link out of the workspace (a planted plan is never trusted)
        raw = read_state_file(state, plan_file, "the plan cache's folder")
        try:
            data = json.loads(raw) if raw is not None else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            data = None
        if data and data.get("format") == PLAN_FORMAT:
            if all(environ.get(k) == v for k, v in (data.get("env_values") or {}).items()):
                pipeline = Pipeline.from_json(data["pipeline"])
                pipeline.path = str(path)  # messages name the file as the user gave it
                pipeline.kind_facts = data.get("kinds")  # the kinds' versions and flags (stages/registry.py)
                return pipeline
    from ascendpipe.config.pipeline import load_pipeline

    try:
        pipeline = load_pipeline(path, overrides, backend, environ)
    except UserError as err:
        if err.location.file == "--set" and any(err.message.startswith(f"--set {line}:") for line in file_lines):
            from ascendpipe.config.overrides import overrides_file as file_of

            raise UserError(f"{err.message}; fix or delete this file", Location(file=file_of(path)), hint=err.hint) from None
        raise
    if use_cache:
        payload = {
            "format": PLAN_FORMAT,
            "path": str(path),
            "env_values": {k: environ.get(k) for k in pipeline.env_names},
            "pipeline": pipeline.to_json(),
            "kinds": kind_facts_of(pipeline),
        }
        from ascendpipe.store.statefiles import write_state_file

        try:
            write_state_file(state, plan_file, json.dumps(payload).encode(), "the plan cache's folder")
        except OSError:
            pass  # a read-only workspace still builds; it only pays for resolution again
    return pipeline
