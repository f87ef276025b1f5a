"""The contract between the engine and a stage kind.

A stage kind is one module under ``ascendpipe/stages/`` holding a subclass of ``StageKind`` and
registered in ``ascendpipe/stages/registry.py``. The engine owns everything generic: templating,
params overlay, matrix expansion, the DAG, stage keys, staleness, the cache, records, atomic
outputs. A kind owns only:

- ``params_schema``: JSON Schema (a dict) of the params it accepts. The engine validates the stage's
  resolved params against it and reports errors at the YAML location. Top-level params whose names
  the kind does not declare are ignored for that kind (they are neither validated nor keyed).
- ``input_fields``: stage-level fields (not params) that name an input: a workspace path or the
  name of another stage. A stage name creates an edge; the kind receives the upstream stage's
  output directory. ``required_inputs`` must be present.
- ``path_params``: params whose value is a file the stage reads (``keep_dtype`` given as a file,
  ``insert_op_conf``...). They are hashed as deps; a missing one is a located error.
- ``run(ctx)``: do the work, writing only under ``ctx.out_dir``; return a ``StageResult``.
- ``tool_versions(backend)``: cheap (no heavy imports; use ``importlib.metadata``); part of the key.
- ``commands(ctx)``: optional, the external command lines ``run`` would execute (for ``--dry-run``).

Built-in kinds write to one output directory, ``build/<stage name>/``. The engine hands ``run`` a
fresh temporary directory as ``ctx.out_dir`` and moves it into place only when ``run`` returns, so
a killed stage never leaves a partial output marked as built. Heavy modules (onnx, onnxruntime,
torch) must be imported inside ``run``, never at module top level: a no-op build imports every
kind module and must stay fast.
"""

from __future__ import annotations

import json
from ascendpipe.errors import UserError

TYPE_CHECKING = False  # (importing typing for its constant costs a no-op build ~3 ms)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Callable, ClassVar, TextIO

METRICS_FILE = "metrics.json"  # a built-in stage's metrics, also read by downstream stages

# Plain classes rather than dataclasses: every kind module imports this one, and a no-op build
# imports every kind module (dataclasses and pathlib cost it ~20 ms of imports).


class Upstream:
    """What a kind knows about a stage that feeds one of its input fields."""

    def __init__(self, stage: str, kind: str, out_dir: Path):
        self.stage = stage  # full stage name, e.g. 'convert@force_fp16'
        self.kind = kind
        self.out_dir = out_dir

    def metrics(self) -> dict:
        path = self.out_dir / METRICS_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def __repr__(self):
        return f"Upstream(stage={self.stage!r}, kind={self.kind!r}, out_dir={str(self.out_dir)!r})"


class StageContext:
    def __init__(
        self,
        name: str,
        kind: str,
        workspace: Path,
        out_dir: Path,
        final_out_dir: Path,
        params: dict[str, Any],
        inputs: dict[str, Path],
        upstream: dict[str, Upstream],
        backend: str,
        log: TextIO,
        thresholds: dict[str, float] | None = None,
        run_command: Callable[..., Any] | None = None,
    ):
        self.name = name  # full stage name ('convert@force_fp16')
        self.kind = kind
        self.workspace = workspace  # all relative paths are relative to this
        self.out_dir = out_dir  # write outputs here only (a temp dir, moved into place on success)
        self.final_out_dir = final_out_dir  # where the outputs live after success (for messages)
        self.params = params  # resolved and validated params of this kind
        self.inputs = inputs  # input field -> absolute path (a file, or an upstream's out dir)
        self.upstream = upstream  # input field -> upstream stage, for fields that name a stage
        self.backend = backend  # 'onnxruntime' | 'ascend'
        self.log = log  # the stage's log file: progress and tool output go here
        self.thresholds = dict(thresholds or {})  # pipeline-level compare thresholds
        self.run_command = run_command  # injected subprocess runner (see backends)

    def path(self, rel) -> Path:
        from pathlib import Path

        p = Path(rel)
        return p if p.is_absolute() else Path(self.workspace) / p

    def say(self, text: str) -> None:
        self.log.write(text.rstrip("\n") + "\n")
        self.log.flush()


class StageResult:
    def __init__(self, metrics: dict | None = None, remedy_files: dict | None = None, info: dict | None = None):
        self.metrics = dict(metrics or {})  # numbers shown by runs/show/diff
        # Remedy files (keep_dtype list, fusion switch JSON, aipp config, mixlist): name -> path
        # inside out_dir. Their content goes into the record.
        self.remedy_files = dict(remedy_files or {})
        # Anything else worth recording (e.g. the ATC command line, the precision plan summary).
        self.info = dict(info or {})

    def __repr__(self):
        return f"StageResult(metrics={self.metrics!r}, remedy_files={self.remedy_files!r}, info={self.info!r})"


class StageKind:
    name: ClassVar[str]
    version: ClassVar[str] = "1"  # bump when outputs for the same inputs would change
    summary: ClassVar[str] = ""
    params_schema: ClassVar[dict] = {"type": "object", "properties": {}}
    input_fields: ClassVar[tuple[str, ...]] = ()
    required_inputs: ClassVar[tuple[str, ...]] = ()
    path_params: ClassVar[tuple[str, ...]] = ()
    backends: ClassVar[tuple[str, ...]] = ("onnxruntime", "ascend")
    # False for kinds whose outputs do not depend on the toolchain backend (export, eval, source):
    # switching `--backend` must not rebuild them
    uses_backend: ClassVar[bool] = True

    # distributions whose versions key the stage on the onnxruntime backend
    runtime_tools: ClassVar[tuple[str, ...]] = ()

    def tool_versions(self, backend: str) -> dict[str, str]:
        if backend == "ascend":
            return ascend_tool_versions(self.name)
        return {dist: package_version(dist) for dist in self.runtime_tools}

    def commands(self, ctx: StageContext) -> list[list[str]]:
        """External command lines ``run`` would execute (``--dry-run``); the ascend backend's argv."""
        if ctx.backend == "ascend":
            from ascendpipe.backends.ascend import stages as ascend_stages

            return ascend_stages.commands(self.name, ctx)
        return []

    def run(self, ctx: StageContext) -> StageResult:  # pragma: no cover - abstract
        from ascendpipe.errors import StageFailed

        raise StageFailed(ctx.name, f"stage kind '{self.name}' defines no run() (a bug in the kind)")


def package_version(dist: str) -> str:
    """A distribution's version without importing it (cheap enough for every no-op build).

    ``importlib.metadata`` costs ~60 ms to import; the version is in the ``.dist-info`` folder name,
    so look for that on ``sys.path`` first and fall back to metadata only when it is not found.
    """
    if dist in _version_cache:
        return _version_cache[dist]
    import os
    import sys

    wanted = dist.lower().replace("-", "_")
    version = None
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                stem = name[: -len(".dist-info")]
                pkg, _, ver = stem.rpartition("-")
                if pkg.lower().replace("-", "_").replace(".", "_") == wanted.replace(".", "_"):
                    version = ver
                    break
        if version:
            break
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "not installed"
    _version_cache[dist] = version
    return version


_version_cache: dict[str, str] = {}


def run_on_backend(ctx: StageContext, kind: str, onnxruntime_module: str) -> StageResult:
    """Hand the stage to ``ascendpipe.backends.ascend.stages.<kind>`` or the onnxruntime module's."""
    import importlib

    module = "ascendpipe.backends.ascend.stages" if ctx.backend == "ascend" else onnxruntime_module
    return getattr(importlib.import_module(module), kind)(ctx)


def ascend_tool_versions(kind: str) -> dict[str, str]:
    """CANN version and the kind's tools' versions (file stats only: cheap enough for a no-op)."""
    from ascendpipe.backends.ascend import stages as ascend_stages

    return ascend_stages.tool_versions(kind)


def find_model_file(path: Path, *, suffixes: tuple[str, ...] = (".onnx",), what: str = "model") -> Path:
    """A model file from a path that is a file, or a stage output dir holding exactly one such file."""
    if path.is_file():
        return path
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix in suffixes and p.is_file())
        if len(found) == 1:
            return found[0]
        names = ", ".join(p.name for p in found) or "none"
        raise UserError(f"expected exactly one {'/'.join(suffixes)} {what} in {path}, found {names}")
    raise UserError(f"{what} {path} does not exist")


def write_metrics(out_dir: Path, metrics: dict) -> None:
    (out_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
