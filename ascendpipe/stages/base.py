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
- ``run(ctx)``: do the work, writing only under ``ctx.out_dir``; return a ``StageResult``. The default
  hands the stage to the pipeline's backend (``ascendpipe.backends.registry``): a kind never names a
  backend, so a new backend needs no change here.
- ``tool_versions(backend)``: cheap (no heavy imports; ``ascendpipe.versions.package_version``); part
  of the key. The default asks the backend.
- ``commands(ctx)``: the external command lines ``run`` would execute (for ``--dry-run``); the
  default asks the backend.

``StageContext``, ``StageResult`` and the file names that cross areas live in the leaf module
``ascendpipe.contract`` (re-exported here for kinds).

Built-in kinds write to one output directory, ``build/<stage name>/``. The engine hands ``run`` a
fresh temporary directory as ``ctx.out_dir`` and moves it into place only when ``run`` returns, so
a killed stage never leaves a partial output marked as built. Heavy modules (onnx, onnxruntime,
torch) must be imported inside ``run``, never at module top level: a no-op build imports every
kind module and must stay fast.
"""

from __future__ import annotations

from ascendpipe.contract import (  # noqa: F401  (re-exported: the names a kind module needs)
    METRICS_FILE,
    StageContext,
    StageResult,
    Upstream,
    find_model_file,
    write_metrics,
)
from ascendpipe.versions import package_version  # noqa: F401

__all__ = ["StageKind", "lazy_class_attr", "StageContext", "StageResult", "Upstream", "METRICS_FILE", "find_model_file", "write_metrics",
           "package_version"]

TYPE_CHECKING = False  # (importing typing for its constant costs a no-op build ~3 ms)
if TYPE_CHECKING:
    from typing import ClassVar


class lazy_class_attr:
    """A class attribute computed on its first read, then stored on the class: a params schema or a
    doc text that needs a heavier module (precision's enums) costs a no-op build nothing."""

    def __init__(self, build):
        self.build = build
        self.__doc__ = build.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        value = self.build()
        setattr(owner if owner is not None else type(obj), self.name, value)
        return value


class StageKind:
    name: ClassVar[str]
    version: ClassVar[str] = "1"  # bump when outputs for the same inputs would change
    summary: ClassVar[str] = ""
    params_schema: ClassVar[dict] = {"type": "object", "properties": {}}
    input_fields: ClassVar[tuple[str, ...]] = ()
    required_inputs: ClassVar[tuple[str, ...]] = ()
    path_params: ClassVar[tuple[str, ...]] = ()
    # False for kinds whose outputs do not depend on the toolchain backend (export, eval, source):
    # switching `--backend` must not rebuild them
    uses_backend: ClassVar[bool] = True

    def required_inputs_for(self, params: dict) -> tuple:
        """The input fields a stage with these params must have (default ``required_inputs``; a kind whose
        tasks read different inputs, as eval's ``lm``, narrows it)."""
        return tuple(self.required_inputs)

    def check_params(self, params: dict) -> None:
        """What the schema cannot say of the params' values (a mode and a SoC that refuse each other, an
        empty value, a switch given twice), checked at ``validate`` and before every build: a ``UserError``
        whose ``location.field`` names the param, located by the engine at that param's YAML line. Pure:
        no file is read."""

    def tool_versions(self, backend: str) -> dict[str, str]:
        from ascendpipe.backends import registry

        return registry.get(backend).tool_versions(self.name)

    def commands(self, ctx: StageContext) -> list[list[str]]:
        """External command lines ``run`` would execute (``--dry-run``)."""
        from ascendpipe.backends import registry

        return registry.get(ctx.backend).commands(self.name, ctx)

    def run(self, ctx: StageContext) -> StageResult:
        """Hand the stage to the pipeline's backend."""
        from ascendpipe.backends import registry

        return registry.get(ctx.backend).run(self.name, ctx)
