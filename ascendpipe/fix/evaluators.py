"""Evaluators for the remedy search: turn a remedy set into a judged ``Result``.

- ``StandaloneEvaluator``: in-process emulated conversion of one model, a dump of it, and a compare
  against the golden dump; the target is the cosine at the final outputs (``--min-cosine``).
- ``PipelineEvaluator``: each attempt is an engine build of the eval stage's closure (and the
  compare stage's) with ``--set`` overrides on the convert stage or matrix variant, so attempts are
  cached and recorded as runs; the target is the eval metric within a tolerance of the golden's.
Both backends work in pipeline mode (the engine runs ATC + inference on ``ascend``).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from ascendpipe.contract import stage_folder
from ascendpipe.errors import Location, UserError
from ascendpipe.compare.cube import kernel_blocked
from ascendpipe.fix.cause import cube_blocked
from ascendpipe.fix.search import FUSION, IMPL, KEEP, Result
from ascendpipe.precision import impl_remedy


def split_remedy(remedy, base_keep=(), base_fusion=None, order=()) -> tuple[list[str], dict[str, str]]:
    """(keep_dtype list, fusion_switch dict) of a remedy set on top of what the stage already had.

    Ops are listed in graph order (``order``), then by name: one set always gives the same lines, so
    applying the answer later hits the cache of the attempt that found it.
    """
    position = {name: i for i, name in enumerate(order)}
    ranked = sorted(remedy, key=lambda c: (position.get(c.name, len(position)), c.name))
    keep = list(dict.fromkeys([*base_keep, *(c.name for c in ranked if c.kind == KEEP)]))
    fusion = {**(base_fusion or {}), **{c.name: "off" for c in ranked if c.kind == FUSION}}
    return keep, fusion


def impl_types(remedy) -> list[str]:
    """The GE op types a remedy set gives high_precision (``op_precision_mode`` candidates), sorted."""
    return sorted(c.name for c in remedy if c.kind == IMPL)


def impl_text(remedy, base_modes: tuple[dict, dict]) -> str | None:
    """The ``--op_precision_mode`` file of a remedy set: the modes in force (``base_modes``: by type, by
    node name) with its types set to high_precision (``precision.impl_remedy.ini_text``); None without any."""
    types = impl_types(remedy)
    return impl_remedy.ini_text(base_modes[0], base_modes[1], types) if types else None


def base_impl_modes(settings) -> tuple[dict, dict]:
    """(by type, by node name): the modes a conversion's own settings give (its op_precision_mode file, or
    the ini its op_select_implmode reads): what an op_precision_mode remedy file must carry on."""
    modes = settings.impl_modes()
    return dict(modes.by_type), dict(modes.by_name)


def graph_order(result: Result) -> list[str]:
    """Op names in graph order as a result knows them (compare rows first, then its op list)."""
    names = [op for row in result.rows for op in (row.get("golden_ops") or [row.get("golden_op") or row["op_name"]])]
    return list(dict.fromkeys(names + list(result.ops)))


def keep_candidates(plan: dict | None, fused_map: dict | None) -> frozenset | None:
    """Original op names keep_dtype can change, from a convert's precision_plan.json and
    fused_map.json: float compute ops only (no Constant/Identity/integer ops); None when the plan
    does not say (a plan written before ``keepable``)."""
    nodes = (plan or {}).get("nodes") or {}
    if not nodes or any("keepable" not in entry for entry in nodes.values()):
        return None
    fused = (fused_map or {}).get("fused") or {}
    names = set()
    for name, entry in nodes.items():
        if entry["keepable"]:
            names.update(fused.get(name) or [name])
    return frozenset(names)


def _output_cosine(result: dict) -> float | None:
    value = result.get("summary", {}).get("output_cosine")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _outputs_overflow(rows: list[dict]) -> bool:
    return any(r.get("is_output") and r.get("overflow") == "target" for r in rows)


def _failure_note(failure: dict | None) -> str:
    if not failure:
        return ""
    return f"first failure {failure['op_name']} ({failure.get('mechanism') or failure.get('kind', '?')})"


def _growing_failure(result: dict) -> dict | None:
    """The failure the search grows from: the first one reaching the outputs (compare's
    ``first_reaching_failure``); compare's ``first_failure`` may be an own overflow upstream whose error
    is absorbed before them, which these outputs do not need kept. Older results: ``first_failure``."""
    return result.get("first_reaching_failure", result.get("first_failure"))


def _causes(result: dict) -> list[dict]:
    """The other ops compare names as breaking on their own (``also_failing`` of its first failure, and
    of the failure reaching the outputs where that differs): fix joins their advice in one grow step."""
    found: dict = {}
    for failure in (result.get("first_failure"), result.get("first_reaching_failure")):
        for item in (failure or {}).get("also_failing") or []:
            found.setdefault(item.get("index"), item)
    return list(found.values())


def graph_facts(model: Path | None) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(op -> op type, op -> the graph inputs it reads) of an ONNX model's main graph, its nodes named as
    dumps name them; ({}, {}) where it cannot be read (the cube rule then goes by the rows alone)."""
    if model is None or not str(model).endswith(".onnx") or not Path(model).is_file():
        return {}, {}
    from ascendpipe.onnxgraph import load_graph, name_nodes

    try:
        graph = load_graph(model).graph
    except Exception:  # noqa: BLE001 - the facts are a help; the model's own problems are reported elsewhere
        return {}, {}
    name_nodes(graph)
    inputs = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    return ({n.name: n.op_type for n in graph.node},
            {n.name: [x for x in n.input if x in inputs] for n in graph.node if any(x in inputs for x in n.input)})


class WeightPeaks:
    """``peaks(op)`` -> (weight name, its largest finite |value|) over the op's constant inputs (initializers,
    directly or through ops that only move values), read from the golden model once asked and kept; None
    where it has none or they cannot be read."""

    def __init__(self, model: Path | None):
        self.model, self._graph, self._cache = model, None, {}

    def _load(self):
        if self._graph is None:
            from ascendpipe.onnxgraph import load_graph, name_nodes

            graph = load_graph(self.model).graph
            name_nodes(graph)
            self._graph = (graph, {t.name: t for t in graph.initializer},
                           {out: n for n in graph.node for out in n.output}, {n.name: n for n in graph.node})
        return self._graph

    def __call__(self, op: str):
        if op in self._cache:
            return self._cache[op]
        found = None
        try:
            found = self._peak(op)
        except Exception:  # noqa: BLE001 - a weight that cannot be read leaves the rule to the rows
            found = None
        self._cache[op] = found
        return found

    def _peak(self, op: str):
        import numpy as np
        from onnx import numpy_helper

        from ascendpipe.compare.mechanism import is_move

        if self.model is None:
            return None
        graph, inits, producer, nodes = self._load()
        node = nodes.get(op)
        names, stack = [], list(node.input) if node is not None else []
        while stack:  # constant inputs, looking through Transpose/Reshape/Cast of a constant
            name = stack.pop()
            if name in inits:
                names.append(name)
            elif name in producer and is_move(producer[name].op_type):
                stack += list(producer[name].input)
        best = None
        for name in names:
            array = np.asarray(numpy_helper.to_array(inits[name], str(Path(self.model).parent)))
            if array.dtype.kind != "f" or not array.size:
                continue
            finite = np.abs(array[np.isfinite(array)])
            peak = float(finite.max()) if finite.size else 0.0
            if best is None or peak > best[1]:
                best = (name, peak)
        return best


def _feed_peaks(feeds: dict) -> dict[str, float]:
    """Each float feed's largest finite |value| (a cube op may read a graph input directly)."""
    import numpy as np

    peaks = {}
    for name, array in (feeds or {}).items():
        a = np.asarray(array)
        if a.dtype.kind == "f" and a.size:
            finite = a[np.isfinite(a)]
            peaks[name] = float(np.abs(finite).max()) if finite.size else 0.0
    return peaks


# --- standalone: one model, in process ------------------------------------------------------

class StandaloneEvaluator:
    """Convert ``golden`` with the emulation under ``params`` plus a remedy, dump, compare outputs."""

    def __init__(self, golden: Path, feeds: dict, *, params: dict, min_cosine: float, work_dir: Path,
                 limits: dict | None = None, allow_custom_ops: bool = False):
        from ascendpipe.compare import thresholds as thr
        from ascendpipe.compare.runner import graph_info
        from ascendpipe.backends.compare_sources import dump

        self.golden, self.feeds, self.params = Path(golden), feeds, dict(params)
        self.min_cosine, self.work_dir = float(min_cosine), Path(work_dir)
        self.allow_custom_ops = allow_custom_ops
        self.limits = limits or thr.resolve()
        self.graph = graph_info(self.golden)
        self.ops = list(self.graph.get("producers") or [])
        self.graph_types, self.input_readers = graph_facts(self.golden)
        self.weight_peak = WeightPeaks(self.golden)
        self.base_keep = list(self.params.pop("keep_dtype", None) or [])
        self.base_fusion = dict(self.params.pop("fusion_switch", None) or {})
        from ascendpipe.precision.settings import resolve

        self.soc_version = self.params.get("soc_version")
        self.base_modes = base_impl_modes(resolve(self.params))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.golden_dump = dump(self.golden, feeds, self.work_dir / "golden_dump", fusions=False)
        self.count = 0
        self.order = list(self.ops)

    def full_remedy(self, remedy) -> tuple[list[str], dict[str, str]]:
        return split_remedy(remedy, self.base_keep, self.base_fusion, self.order)

    def impl_file(self, remedy) -> str | None:
        return impl_text(remedy, self.base_modes)

    def evaluate(self, remedy: frozenset) -> Result:
        from ascendpipe.backends.onnxruntime.convert import convert_model
        from ascendpipe.compare.runner import compare_dumps
        from ascendpipe.backends.compare_sources import dump
        from ascendpipe.fsutil import write_text_atomic
        from ascendpipe.precision.settings import resolve

        keep, fusion = self.full_remedy(remedy)
        params = {**self.params, "keep_dtype": keep, "fusion_switch": fusion}
        text = self.impl_file(remedy)
        if text is not None:  # the stage's modes with the remedy's lines: ATC reads this file instead of its ini
            params["op_precision_mode"] = str(write_text_atomic(self.work_dir / impl_remedy.file_name(text), text))
        settings = resolve(params)
        self.count += 1
        attempt = self.work_dir / f"attempt-{self.count:03d}"
        shutil.rmtree(attempt, ignore_errors=True)
        try:
            converted = convert_model(self.golden, attempt / "model", settings, allow_custom_ops=self.allow_custom_ops)
            target_dump = dump(converted.model_path, self.feeds, attempt / "dump", fusions=True)
            fused_map = json.loads((attempt / "model" / "fused_map.json").read_text())
            plan = json.loads((attempt / "model" / "precision_plan.json").read_text())
            result = compare_dumps(self.golden_dump, target_dump, limits=self.limits, fused_map=fused_map,
                                   precision_plan=plan, graph=self.graph,
                                   target_settings={"soc_version": self.soc_version} if self.soc_version else None)
        finally:
            shutil.rmtree(attempt, ignore_errors=True)  # attempts are cheap to redo; disk is not free
        cosine = _output_cosine(result)
        rows = result["rows"]
        passed = cosine is not None and cosine >= self.min_cosine and not _outputs_overflow(rows)
        producers = self.graph.get("producers")
        failure = _growing_failure(result)
        return Result(passed, cosine, cosine, rows=rows, failure=failure, ops=self.ops,
                      note=_failure_note(failure), candidates=keep_candidates(plan, fused_map),
                      producers=producers, causes=_causes(result),
                      impl_remedies=impl_remedy.remedies(plan, self.soc_version, fused_map),
                      blocked=cube_blocked(rows, producers, self.params.get("soc_version"), _feed_peaks(self.feeds),
                                           input_readers=self.input_readers, graph_types=self.graph_types,
                                           weight_peak=self.weight_peak)
                      or kernel_blocked(rows, plan.get("nodes"), self.params.get("soc_version")))


# --- pipeline: every attempt an engine build ----------------------------------------------------

from ascendpipe.fix.target import (_STANDALONE_HINT, PipelineTarget, _closure, _pick_stage,  # noqa: E402,F401
                                   _set_prefix, resolve_target)


class PipelineEvaluator:
    """One engine build per attempt: the metric stage, the golden stage and the compare stage."""

    def __init__(self, pipeline_path: str, target: PipelineTarget, *, tolerance: float, overrides=(),
                 backend: str | None = None, base_keep=(), base_fusion=None, build_dir: Path,
                 soc_version: str | None = None, stages: dict | None = None, workspace: Path | None = None):
        self.path, self.target, self.tolerance = str(pipeline_path), target, float(tolerance)
        self.stages, self.workspace = stages or {}, workspace  # resolved stages: per-sample scores (fix.resolution)
        self.golden_samples = None
        self.producers = None  # the golden graph's op edges (neighbours, the cube rule): read once it is built
        self.graph_types: dict[str, str] = {}  # the golden graph's op types (the cube rule)
        self.weight_peak = None  # the golden model's cube weights, read when the cube rule asks (fix.cause)
        self.soc_version = soc_version  # the convert stage's: whether a kept cube op reads fp32
        self.overrides, self.backend = list(overrides), backend
        self.base_keep, self.base_fusion = list(base_keep), dict(base_fusion or {})
        self.build_dir = Path(build_dir)
        self.base_modes: tuple[dict, dict] = ({}, {})  # the stage's impl modes (fix_pipeline sets them)
        self.remedy_dir: Path = self.build_dir / "fix"  # where op_precision_mode files go (fix's output folder)
        self.golden_metric: float | None = None
        self.order: list[str] = []  # graph order, learnt from the first (baseline) attempt
        self.runs: list[int] = []

    def full_remedy(self, remedy) -> tuple[list[str], dict[str, str]]:
        return split_remedy(remedy, self.base_keep, self.base_fusion, self.order)

    def impl_file(self, remedy) -> str | None:
        return impl_text(remedy, self.base_modes)

    def impl_path(self, remedy) -> Path | None:
        """The remedy's op_precision_mode file in fix's output folder, written once (content-named: the
        convert param is a path, and the answer re-applied names the very file its attempt built with)."""
        from ascendpipe.fsutil import write_text_atomic

        text = self.impl_file(remedy)
        if text is None:
            return None
        path = self.remedy_dir / impl_remedy.file_name(text)
        if not path.is_file() or path.read_text() != text:
            write_text_atomic(path, text)
        return path.resolve()

    def set_lines(self, remedy) -> list[str]:
        """The ``--set`` overrides that apply a remedy (none for the empty one: the current conversion)."""
        if not remedy:
            return []
        from ascendpipe.fix.report import overrides

        keep, fusion = self.full_remedy(remedy)
        path = self.impl_path(remedy)
        return overrides(self.target.set_prefix, keep, fusion, str(path) if path else None)

    def restore_workspace(self) -> dict:
        """Leave the workspace as the pipeline file (not the last attempt) describes it: every
        setting was built before, so this only restores outputs from the cache. The run record."""
        return self._build([])

    def _build(self, set_lines: list[str]) -> dict:
        """Build the metric, golden and compare stages with these overrides; the run record."""
        import ascendpipe

        t = self.target
        wanted = [*(t.metric_stages or [t.metric_stage]), *([t.golden_stage] if t.golden_stage else []),
                  *([t.compare] if t.compare else [])]
        targets = list(dict.fromkeys(wanted))
        # argv marks the run as a fix attempt (the runs page and `runs` tell it from a user's build)
        argv = ["ascendpipe", "fix", self.path, *targets, *(f"--set={line}" for line in self.overrides + list(set_lines))]
        return ascendpipe.build(self.path, targets, set=self.overrides + list(set_lines), backend=self.backend,
                                quiet=True, argv=argv)

    def _attempt(self, remedy) -> tuple[dict, float]:
        """Build one attempt and record it: (run record, its metric); sets ``golden_metric``."""
        t = self.target
        run = self._build(self.set_lines(remedy))
        self.runs.append(run.get("id"))
        # the metric first: an unknown name is the metric's problem; over several cases (compare variants) the worst
        values = {name: self._metric(run, name) for name in (t.metric_stages or [t.metric_stage])}
        self._worst = min(values, key=lambda name: values[name] if values[name] == values[name] else float("-inf"))
        self.golden_metric = t.golden_value if t.on_compare else self._metric(run, t.golden_stage)
        self._last_run = run
        return run, values[self._worst]

    def journal_state(self) -> dict:
        """What fix.journal keeps beside an attempt's result: its run, the golden metric, and the stage keys
        it built (the baseline's decide whether a journal still holds for this pipeline)."""
        run = getattr(self, "_last_run", None) or {}
        stages = run.get("stages") or {}
        samples = self.golden_samples
        return {"run": run.get("id"), "golden_metric": self.golden_metric,
                "golden_samples": None if samples is None else [float(x) for x in samples],
                "check": {name: (stages.get(name) or {}).get("key") for name in sorted(stages)}}

    def resume(self, state: dict, result: Result) -> None:
        """Take up an attempt an earlier run of fix made (fix.journal): its run is listed like a new one."""
        import numpy as np

        self.runs.append(state.get("run"))
        if state.get("golden_metric") is not None:
            self.golden_metric = state["golden_metric"]
        if self.golden_samples is None and state.get("golden_samples") is not None:
            self.golden_samples = np.asarray(state["golden_samples"])
        if not self.order:
            self.order = graph_order(result)

    def evaluate(self, remedy: frozenset) -> Result:
        t = self.target
        run, metric = self._attempt(remedy)
        rows, failure, cosine, ops, causes = [], None, None, [], []
        evidence = self._worst if t.on_compare else t.compare  # a compare metric: its worst case's own rows
        if evidence:
            result = json.loads((self.build_dir / stage_folder(evidence) / "result.json").read_text())
            rows, failure, cosine = result.get("rows") or [], _growing_failure(result), _output_cosine(result)
            causes = _causes(result)
        plan_path = self.build_dir / stage_folder(t.convert) / "precision_plan.json"
        map_path = plan_path.with_name("fused_map.json")
        plan = json.loads(plan_path.read_text()) if plan_path.is_file() else None
        if plan:  # blind fallback order: the converted model's nodes
            ops = list(plan.get("nodes") or [])
        fused_map = json.loads(map_path.read_text()) if map_path.is_file() else None
        passed = metric >= self.golden_metric - self.tolerance
        if t.on_compare and _outputs_overflow(rows):  # an output holding inf fails whatever the cosine says
            passed = False
        if self.producers is None:
            self.producers = self._golden_producers()
        result = Result(passed, metric, cosine, rows=rows, failure=failure, ops=ops,
                        candidates=keep_candidates(plan, fused_map), causes=causes,
                        impl_remedies=impl_remedy.remedies(plan, self.soc_version, fused_map) if plan else None,
                        producers=self.producers,
                        blocked=(cube_blocked(rows, self.producers, self.soc_version, graph_types=self.graph_types,
                                              spell=self._spell, weight_peak=self.weight_peak)
                                 or kernel_blocked(rows, (plan or {}).get("nodes"), self.soc_version, self._spell))
                        if rows else None,
                        samples=self._samples(t.metric_stage))
        if self.golden_samples is None:
            self.golden_samples = self._samples(t.golden_stage)
        if not self.order:
            self.order = graph_order(result)
        note = f"run {run.get('id')}" + (f"; {_failure_note(failure)}" if failure and not passed else "")
        result.note = note
        return result

    def _golden_producers(self) -> dict | None:
        """op -> the ops it reads, from the compare stage's golden model (None where it is not a model)."""
        compare = self.stages.get(self.target.compare) if self.target.compare else None
        golden = (compare.inputs or {}).get("golden") if compare is not None else None
        if not golden or self.workspace is None:
            return None
        from ascendpipe.compare.runner import graph_info
        from ascendpipe.backends.compare_sources import resolve_side

        try:
            side = resolve_side(Path(self.workspace) / golden, "golden")
        except UserError:
            return None  # not built yet, or a dump: the search goes without the edges
        if not side.model:
            return None
        self.graph_types = graph_facts(side.model)[0]
        self.weight_peak = WeightPeaks(side.model)
        return graph_info(side.model).get("producers")

    def _spell(self, key: str, value: str) -> str:
        """A convert setting as the user sets it for every attempt (fix.cause's ways out)."""
        return f"--set {self.target.set_prefix}.{key}={value}"

    def _samples(self, stage: str):
        from ascendpipe.fix.resolution import sample_hits

        if stage not in self.stages or self.workspace is None:
            return None
        return sample_hits(self.stages[stage], self.workspace, self.target.metric, self.build_dir)

    def _metric(self, run: dict, stage: str) -> float:
        record = run["stages"].get(stage) or {}
        metrics = record.get("metrics") or {}
        if self.target.metric not in metrics or not isinstance(metrics[self.target.metric], (int, float)):
            known = ", ".join(sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))) or "none"
            if stage == self.target.golden_stage and stage != self.target.metric_stage:
                raise UserError(f"pipeline mode needs an eval stage of the golden model: the golden stage '{stage}' has no "
                                f"metric '{self.target.metric}' (it reports: {known}); name one with --golden-stage"
                                f"{_STANDALONE_HINT}", Location(stage=stage, field="--golden-stage"))
            import difflib

            close = difflib.get_close_matches(self.target.metric, known.split(", "), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UserError(f"has no metric '{self.target.metric}'{hint}; it reports: {known}",  # the stage is in the location
                            Location(stage=stage, field="--metric"))
        return float(metrics[self.target.metric])


def stage_impl_modes(stage, workspace: Path) -> tuple[dict, dict]:
    """The convert stage's own impl modes (``base_impl_modes``), its paths read from the workspace."""
    from ascendpipe.precision.settings import resolve

    keys = ("op_select_implmode", "optypelist_for_implmode", "op_precision_mode")
    settings = resolve({k: stage.params.get(k) for k in keys if stage.params.get(k) is not None},
                       lambda p: workspace / p, Location(stage=stage.name))
    return base_impl_modes(settings)


def base_remedies(stage, workspace: Path) -> tuple[list[str], dict[str, str]]:
    """The keep_dtype entries and fusion switches the convert stage already has (kept by every attempt)."""
    from ascendpipe.precision.settings import resolve

    settings = resolve({k: stage.params.get(k) for k in ("keep_dtype", "fusion_switch", "fusion_switch_file")
                        if stage.params.get(k) is not None}, lambda p: workspace / p, Location(stage=stage.name))
    return list(settings.keep_dtype), dict(settings.fusion_switch)
