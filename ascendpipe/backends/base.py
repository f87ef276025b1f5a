"""What a toolchain backend is to the rest of ascendpipe.

A backend runs the toolchain-dependent stage kinds (convert, tune, infer, dump, profile) and dumps a
converted model for compare. Stage kinds declare their params and inputs and hand the work to the
backend the pipeline names (``ascendpipe.backends.registry.get``); nothing under ``stages/`` names a
backend. A new backend (a board reached over SSH, a remote runner) is one class here plus one line in
the registry.

Every method takes the stage kind's name and the ``StageContext`` (``ascendpipe.contract``); output
layouts follow docs/contracts.md so downstream stages read either backend's outputs.
"""

from __future__ import annotations

from ascendpipe.errors import Location, UserError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from ascendpipe.contract import StageContext, StageResult


class Backend:
    """Base class and protocol. Subclasses set ``name`` and override what they support."""

    name: str = ""
    summary: str = ""
    # stage kinds this backend runs; ``run`` of any other kind is a located user error
    kinds: tuple[str, ...] = ()
    # suffixes of the converted models it runs natively (compare dumps such a target through it)
    device_models: tuple[str, ...] = ()

    def tool_versions(self, kind: str) -> dict[str, str]:
        """Versions of what ``kind`` runs on this backend: part of the stage key, so cheap (file
        stats and dist-info names only, never run a tool or import a heavy module)."""
        return {}

    def commands(self, kind: str, ctx: StageContext) -> list[list[str]]:
        """External command lines ``run(kind, ctx)`` would execute, without running them (--dry-run)."""
        return []

    def run(self, kind: str, ctx: StageContext) -> StageResult:
        """Do the stage's work, writing only under ``ctx.out_dir``."""
        raise self.unsupported(kind, ctx)

    def dump_model(self, model: Path, feeds: dict, out: Path, *, log=None, run_command=None,
                   stage: str = "compare") -> Path:
        """Dump every op output of a converted model dir for ``feeds`` into ``out`` (index.json +
        tensors/, docs/contracts.md); returns the dump folder."""
        raise UserError(f"backend '{self.name}' cannot dump the model {model}", Location(stage=stage))

    def compare_extras(self, ctx: StageContext, result: dict) -> dict:
        """Metrics a compare stage adds on this backend next to ascendpipe's own (e.g. a vendor
        compare tool run on the same model and feeds). Default: none."""
        return {}

    def unsupported(self, kind: str, ctx: StageContext) -> UserError:
        return UserError(f"backend '{self.name}' does not run stage kind '{kind}'"
                         + (f" (it runs: {', '.join(self.kinds)})" if self.kinds else ""),
                         Location(stage=ctx.name))

    def __repr__(self):
        return f"<backend {self.name}>"
