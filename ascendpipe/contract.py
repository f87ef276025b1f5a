"""The contract every area shares: what a stage gets and returns, and the file names and format ids
that cross areas (a convert dir read by infer/dump/compare, a dump read by compare, ...).

A leaf module: it imports nothing from ascendpipe but ``errors``, so the engine, the stage kinds,
the backends and compare can all depend on it without depending on each other. docs/contracts.md
describes the files these names point at.

Plain classes rather than dataclasses: a no-op build imports this module (dataclasses and pathlib
cost it ~20 ms of imports).
"""

from __future__ import annotations

import json

from ascendpipe.errors import UserError

CACHE_DIR = "cache"  # a workspace's cache folder (git-ignored): objects/, runs/, dumps/

TYPE_CHECKING = False  # (importing typing for its constant costs a no-op build ~3 ms)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Callable, TextIO

# ---- file names and format ids that cross areas --------------------------------------------------

# The metric a pipeline is judged by, per eval task (``params.task``): the build summary, the
# explorer's tables and its chart lead with it. Fractions in [0, 1]; mAP50_95 is COCO's mAP@[.5:.95].
KEY_METRIC = {"detection": "mAP50_95", "classification": "top1", "reid": "mAP"}


def key_metric(kind: str | None, params: dict | None) -> str | None:
    """The key metric of an eval stage (None for other kinds, or a task without one)."""
    return KEY_METRIC.get((params or {}).get("task")) if kind == "eval" else None


# A stage's folder under the build root: ``convert@fp16`` -> ``convert__fp16``. The CANN tools
# accept only [A-Za-z0-9./_-] in a path (ATC's CheckInputPathValid, ais_bench's and msit's
# PATH_WHITE_LIST_REGEX, msaccucmp's safe_path_string), so ``@`` never reaches a folder name. Base
# stage names may not contain ``__`` (config/pipeline.py), which keeps the mapping collision-free.
VARIANT_FOLDER_SEPARATOR = "__"


def stage_folder(stage_name: str) -> str:
    """The folder (and log file stem) of a stage under the build root; docs/contracts.md."""
    return stage_name.replace("@", VARIANT_FOLDER_SEPARATOR)


METRICS_FILE = "metrics.json"  # a built-in stage's metrics, also read by downstream stages

# a converted-model folder (either backend's convert or tune stage)
MODEL_STEM = "model"  # model.onnx (emulated), model.om + model.json (ascend)
ONNX_MODEL_FILE = "model.onnx"
OM_MODEL_FILE = "model.om"
OM_JSON_FILE = "model.json"
CONVERT_INFO = "convert.json"  # ascend: how the OM was made and the ONNX's input specs
FUSED_MAP = "fused_map.json"
FUSED_MAP_FORMAT = "ascendpipe-fused-map/1"
PRECISION_PLAN = "precision_plan.json"
PRECISION_PLAN_FORMAT = "ascendpipe-precision-plan/1"

# an infer stage's folder
OUTPUTS_DIR = "outputs"
SUMMARY_FILE = "summary.json"

# a dump folder
DUMP_INDEX = "index.json"
DUMP_TENSORS_DIR = "tensors"
DUMP_FORMAT = "ascendpipe-dump/1"

# a compare stage's folder
COMPARE_RESULT = "result.json"
COMPARE_CSV = "result.csv"
COMPARE_FORMAT = "ascendpipe-compare/1"

# a quantize stage's folder (model.onnx is the fake-quant model; docs/quantize.md)
QUANTIZE_RECORD = "quantize.json"
QUANTIZE_FORMAT = "ascendpipe-quantize/1"
QUANT_SCALES = "scales.json"
QUANT_SCALES_FORMAT = "ascendpipe-quant-scales/1"
QUANT_DEPLOY_DIR = "deploy"  # deploy/model.onnx: the deployable model, a convert stage's input


# ---- the engine <-> stage kind <-> backend contract ----------------------------------------------

class Upstream:
    """What a kind knows about a stage that feeds one of its input fields."""

    def __init__(self, stage: str, kind: str, out_dir: Path, params: dict | None = None):
        self.stage = stage  # full stage name, e.g. 'convert@force_fp16'
        self.kind = kind
        self.out_dir = out_dir
        self.params = params  # its resolved params where known (a dry run: what it will write is not built yet)

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
        self.backend = backend  # a name in ascendpipe.backends.registry
        self.log = log  # the stage's log file: progress and tool output go here
        self.thresholds = dict(thresholds or {})  # pipeline-level compare thresholds
        self.run_command = run_command  # injected subprocess runner (see backends)

    def derive(self, **changes) -> StageContext:
        """A context for work done on this stage's behalf (compare dumping its target): same log,
        runner and workspace, the given fields replaced."""
        fields = dict(vars(self))
        fields.update(changes)
        return StageContext(**fields)

    def path(self, rel) -> Path:
        from pathlib import Path

        p = Path(rel)
        return p if p.is_absolute() else Path(self.workspace) / p

    def say(self, text: str) -> None:
        if self.log is None:
            return
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
