"""The library API of ``fix``: wire an evaluator to the search and write the answer.

    from ascendpipe.fix.run import fix_pipeline, fix_standalone
    report = fix_pipeline("pipelines/reid.yaml", stage="convert@fp16", metric="eval.mAP", tolerance=0.01)
    report = fix_standalone("model.onnx", input_path="x.npy", precision_mode="force_fp16", min_cosine=0.99)

Both return ``FixReport``: the outcome, the full remedy (with what the stage already had), the
summary dict (``--json``'s object) and the files written.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ascendpipe.contract import stage_folder
from ascendpipe.errors import Location, UserError
from ascendpipe.fix import report
from ascendpipe.fix.journal import JournaledEvaluator
from ascendpipe.fix.progress import listening_to
from ascendpipe.fix.search import Outcome, search

DEFAULT_MAX_ATTEMPTS = 30


@dataclass
class FixReport:
    outcome: Outcome
    keep_dtype: list[str]
    fusion_switch: dict[str, str]
    summary: dict
    written: dict[str, Path]
    metric_name: str
    stage_prefix: str
    target_text: str
    restore_run: int | None = None  # pipeline mode: the last run fix records (the workspace put back)
    yaml_text: str | None = None  # the YAML to paste where yaml_lines' would not validate (a list-form matrix)
    precision_file: str | None = None  # the op_precision_mode ini the answer converts with (an impl-mode remedy)

    @property
    def op_precision_mode(self) -> dict[str, str]:
        return self.outcome.op_precision_mode if self.outcome.passed else {}

    def text(self) -> str:
        text = report.terminal_text(self.outcome, self.metric_name, self.keep_dtype, self.fusion_switch,
                                    self.stage_prefix, self.written, self.target_text, self.restore_run,
                                    self.yaml_text, self.precision_file)
        return (text + report.cases_text(self.summary) + "".join(line + "\n" for line in self.apply_lines())
                + report.journal_text(self.summary, self.outcome))

    def apply_lines(self) -> list[str]:
        """Standalone mode: the convert line that applies the remedy files written (or how to get them)."""
        from ascendpipe.cli.apply_line import REMEDY_OPTIONS, apply_lines

        if self.summary.get("mode") != "standalone" or not self.outcome.passed or not (
                self.keep_dtype or self.fusion_switch or self.op_precision_mode):
            return []
        files = {path.name: path for key, path in self.written.items() if path.name in REMEDY_OPTIONS}
        if not files:
            names = " and ".join(name for name, used in (("keep_dtype.cfg", self.keep_dtype),
                                                          ("fusion_switch.cfg", self.fusion_switch),
                                                          (report.IMPL_FILE, self.op_precision_mode)) if used)
            return ["", f"add --output DIR to have {names} written there, with the convert line that applies them"]
        mode = self.summary.get("precision_mode")
        options = [("precision_mode", mode)] if mode else []
        if self.summary.get("soc_version"):
            options.insert(0, ("soc_version", self.summary["soc_version"]))
        model = Path(self.summary["model"])
        return ["", *apply_lines(files, target=None, golden=model, new_output=next(iter(files.values())).parent / "converted",
                                 options=options)]


def _check_attempts(max_attempts: int) -> None:
    if max_attempts < 1:
        raise UserError(f"--max-attempts must be at least 1, got {max_attempts}", Location(field="--max-attempts"))


def fix_standalone(golden: str | Path, *, input_path: str | Path | None = None,
                   precision_mode: str | None = "force_fp16",
                   min_cosine: float = 0.99, max_attempts: int = DEFAULT_MAX_ATTEMPTS, output: str | Path | None = None,
                   seed: int = 0, params: dict | None = None, soc_version: str | None = None,
                   batch_axes: dict | None = None, cases=(), progress=None,
                   allow_custom_ops: bool = False) -> FixReport:
    """Search on one model: emulated conversion + compare of the final outputs (onnxruntime backend).
    ``soc_version``: the SoC converted for (which decides, e.g., whether a kept cube op reads fp32).
    ``cases``: more (model, input or None) pairs judged with the same keep set (a decoder's prefill and
    decode graphs, several past lengths); the target must hold on every one (``fix.cases``).
    ``params``: more convert settings (``precision_mode_v2``, ``keep_dtype`` and ``fusion_switch`` kept by
    every attempt, ``overflow_mode``, ``allow_hf32``, ``input_shape``...). ``progress``: a stream to print
    each attempt on as it ends (``fix.progress``). Each attempt is written as it ends into ``output``/attempts
    (else the user's cache, removed once the search ends): a rerun with the same arguments resumes."""
    from ascendpipe.backends.compare_sources import make_feeds, resolve_side
    from ascendpipe.fix.evaluators import StandaloneEvaluator
    from ascendpipe.precision.settings import resolve

    _check_attempts(max_attempts)
    if not 0.0 < min_cosine <= 1.0:
        raise UserError(f"--min-cosine must be in (0, 1], got {min_cosine}", Location(field="--min-cosine"))
    side = resolve_side(Path(golden), "golden")
    if side.model is None:
        raise UserError(f"--golden must be an fp32 .onnx model, not a dump dir: {golden}", Location(field="--golden"))
    base = {**(params or {})}
    if precision_mode and not base.get("precision_mode_v2"):
        base["precision_mode"] = precision_mode
    if soc_version:
        base["soc_version"] = soc_version
    settings = resolve(base)  # a bad mode or remedy is a user error now, not after the golden dump
    if base.get("fusion_switch_file"):  # kept by every attempt, as the file's switches
        base["fusion_switch"] = dict(settings.fusion_switch)
        del base["fusion_switch_file"]
    if cases and base.get("input_shape"):
        # one --input-shape names one graph's inputs; each case's own input file gives its shapes
        raise UserError("--input-shape pins the inputs of one graph; with --case, give each case its input "
                        "(--case MODEL:INPUT.npz) and leave --input-shape out", Location(field="--input-shape"))
    pairs = [(side.model, Path(input_path) if input_path else None)]
    for model, given in cases:
        more = resolve_side(Path(model), "golden")
        if more.model is None:
            raise UserError(f"--case must name an fp32 .onnx model, not a dump dir: {model}", Location(field="--case"))
        pairs.append((more.model, Path(given) if given else None))
    feeds = [make_feeds(model, given, seed, batch_axes=batch_axes,
                        specs=_pinned_specs(model, base.get("input_shape")))[0] for model, given in pairs]
    labels = [_case_label(m, g) for m, g in pairs]
    journal = _standalone_journal(output, pairs, feeds, base, min_cosine, labels, allow_custom_ops)
    metric_label = "output cosine"
    watch = _watch(progress, metric_label)
    with tempfile.TemporaryDirectory(prefix="ascendpipe-fix-") as scratch:
        evaluators = [StandaloneEvaluator(model, f, params=base, min_cosine=min_cosine, work_dir=Path(scratch) / str(k),
                                          allow_custom_ops=allow_custom_ops)
                      for k, ((model, _given), f) in enumerate(zip(pairs, feeds))]
        evaluator = evaluators[0]
        if len(pairs) > 1:
            from ascendpipe.fix.cases import CasesEvaluator

            evaluator = CasesEvaluator(evaluators, labels)
        journaled = JournaledEvaluator(evaluator, journal)
        with listening_to(watch):
            outcome = search(journaled, max_attempts=max_attempts, watch=watch)
    if output is None and not outcome.interrupted:
        journal.remove()  # the user's cache: nothing left to resume
    keep, fusion = evaluator.full_remedy(outcome.remedy)
    extra = {}
    if len(pairs) > 1:
        extra = _cases_summary(outcome, evaluator.labels, pairs)
    data = report.summary(outcome, keep, fusion, mode="standalone", model=str(side.model),
                          precision_mode=base.get("precision_mode"), precision_mode_v2=base.get("precision_mode_v2"),
                          min_cosine=min_cosine, soc_version=base.get("soc_version"),
                          journal=str(journal.folder) if (output is not None or outcome.interrupted) else None,
                          resumed=sum(1 for a in outcome.attempts if a.result.resumed), **extra)
    precision_text = evaluator.impl_file(outcome.remedy) if outcome.passed else None
    written = report.write_remedy_files(Path(output), keep, fusion, data, precision_text) if output else {}
    target = f"cosine at the final outputs >= {min_cosine}" + (f", on each of {len(pairs)} cases" if len(pairs) > 1 else "")
    precision_file = str(written["op_precision_mode"]) if "op_precision_mode" in written else (
        report.IMPL_FILE if precision_text else None)
    return FixReport(outcome, keep, fusion, data, written, "output cosine", "stages.convert.params", target,
                     precision_file=precision_file)


def _case_label(model: Path, given: Path | None) -> str:
    from ascendpipe.fix.cases import case_label

    return case_label(model, given)


def _watch(progress, metric_label: str):
    if progress is None:
        return None
    from ascendpipe.fix.progress import AttemptLines

    return AttemptLines(progress, metric_label)


def _standalone_journal(output, pairs, feeds, params: dict, min_cosine: float, labels, allow_custom_ops: bool):
    """The journal of this search: ``output``/attempts, else the user's cache (``fix.journal``); keyed by
    what decides every result (the models' and inputs' contents, the convert settings, the target)."""
    from ascendpipe.fix.journal import Journal, cache_folder, code_digest, digest, feeds_digest, model_digest
    from ascendpipe.versions import package_version

    arguments = {"mode": "standalone", "code": code_digest(), "onnxruntime": package_version("onnxruntime"),
                 "cases": [{"label": label, "model": model_digest(model), "input": feeds_digest(f)}
                           for label, (model, _given), f in zip(labels, pairs, feeds)],
                 "params": params, "min_cosine": min_cosine, "allow_custom_ops": allow_custom_ops}
    folder = Path(output) / "attempts" if output is not None else cache_folder(digest(arguments))
    return Journal(folder, arguments)


def _cases_summary(outcome: Outcome, labels: list[str], pairs: list) -> dict:
    """fix.json's ``cases`` (each case's model, input and verdict under the answer) and ``needed_for``
    (each remedy -> the cases that fail without it; None where the search did not measure it)."""
    from ascendpipe.fix.cases import needed_for

    final = {c.label: c for c in getattr(outcome.final, "cases", None) or []}
    cases = [{"label": label, "model": str(model), "input": str(given) if given else None,
              "passed": final[label].passed if label in final else None,
              "output_cosine": final[label].metric if label in final else None}
             for label, (model, given) in zip(labels, pairs)]
    return {"cases": cases, "needed_for": needed_for(outcome, labels) if outcome.passed else {}}


def _pinned_specs(model: Path, input_shape: str | None) -> list | None:
    """The model's input specs with the dims ``input_shape`` (ATC's grammar) fixes, so the random or
    given input takes the shape the conversion pins (an empty KV cache: 0); None without one."""
    if not input_shape:
        return None
    from dataclasses import replace

    from ascendpipe.onnxgraph import read_input_specs
    from ascendpipe.precision.input_shape import parse_input_shape

    shapes = parse_input_shape(input_shape, Location(field="--input-shape"))
    specs = read_input_specs(model)
    unknown = sorted(set(shapes) - {s.name for s in specs})
    if unknown:
        raise UserError(f"--input-shape names '{unknown[0]}', which is not a model input; inputs: "
                        f"{', '.join(s.name for s in specs)}", Location(field="--input-shape"))
    return [replace(s, shape=tuple(d if isinstance(d, int) and d >= 0 else old
                                   for d, old in zip(shapes[s.name], s.shape)))
            if len(shapes.get(s.name, ())) == len(s.shape) and s.name in shapes else s
            for s in specs]


def fix_pipeline(pipeline: str | Path, *, stage: str = "convert", metric: str, tolerance: float | None = 0.01,
                 golden_stage: str | None = None, compare_stage: str | None = None, overrides=(),
                 backend: str | None = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 output: str | Path | None = None, progress=None, convert_params: dict | None = None,
                 min_cosine: float | None = None) -> FixReport:
    """Search through the engine: each attempt builds the convert stage's dependents with overrides.
    ``convert_params``: convert settings for every attempt (``--precision-mode-v2``, ``--soc-version``...),
    set on the stage (or its variant) as ``--set`` would.
    Each attempt is written as it ends (``fix.journal``, in ``output``/attempts, default
    BUILD_DIR/fix/STAGE/attempts): a rerun with the same arguments resumes, once the baseline's stage
    keys show the pipeline is the one the journal was written for."""
    import yaml

    import ascendpipe
    from ascendpipe.fix.evaluators import PipelineEvaluator, base_remedies, resolve_target, stage_impl_modes

    _check_attempts(max_attempts)
    if tolerance is not None and tolerance < 0:
        raise UserError(f"--tolerance must be >= 0, got {tolerance}", Location(field="--tolerance"))
    resolved = ascendpipe.load(str(pipeline), set=list(overrides), backend=backend)
    raw = yaml.safe_load(Path(pipeline).read_text()) or {}
    target = resolve_target(resolved, raw.get("stages") or {}, stage=stage, metric=metric,
                            golden_stage=golden_stage, compare_stage=compare_stage)
    tolerance = _pipeline_tolerance(target, tolerance, min_cosine)
    if convert_params:  # the settings every attempt converts with, where --set would put them
        import json

        overrides = list(overrides) + [f"{target.set_prefix}.{k}={json.dumps(v)}" for k, v in convert_params.items()]
        resolved = ascendpipe.load(str(pipeline), set=overrides, backend=backend)
    workspace = Path(resolved.workspace)
    build_dir = workspace / resolved.build_dir
    keep0, fusion0 = base_remedies(resolved.stages[target.convert], workspace)
    evaluator = PipelineEvaluator(str(pipeline), target, tolerance=tolerance, overrides=overrides, backend=backend,
                                  base_keep=keep0, base_fusion=fusion0, build_dir=build_dir,
                                  soc_version=resolved.stages[target.convert].params.get("soc_version"),
                                  stages=resolved.stages, workspace=workspace)
    out_dir = Path(output) if output else build_dir / "fix" / stage_folder(target.convert)
    evaluator.remedy_dir = out_dir  # an op_precision_mode remedy's ini: a path param, kept beside fix.json
    evaluator.base_modes = stage_impl_modes(resolved.stages[target.convert], workspace)
    journal = _pipeline_journal(out_dir, pipeline, target, tolerance, overrides, backend)
    watch = _watch(progress, f"{target.metric_stage}.{target.metric}")
    with listening_to(watch):
        outcome = search(JournaledEvaluator(evaluator, journal, check_first=True), max_attempts=max_attempts,
                         watch=watch)
    try:
        restore_run = (evaluator.restore_workspace() or {}).get("id")
    except KeyboardInterrupt:  # a second ^C: the workspace keeps the last attempt's outputs; a build puts them back
        restore_run = None
    keep, fusion = evaluator.full_remedy(outcome.remedy)
    golden = evaluator.golden_metric
    noise = _resolution(outcome, evaluator, resolved.stages[target.metric_stage], workspace, tolerance)
    data = report.summary(outcome, keep, fusion, mode="pipeline", stage=target.convert,
                          metric_stage=target.metric_stage, metric_name=target.metric, golden_stage=target.golden_stage,
                          golden_metric=golden, tolerance=tolerance, runs=evaluator.runs, restore_run=restore_run,
                          set=evaluator.set_lines(outcome.remedy) if outcome.passed else [], resolution=noise,
                          restored=bool(outcome.passed and outcome.remedy and not noise.get("inside_noise")),
                          journal=str(journal.folder), resumed=sum(1 for a in outcome.attempts if a.result.resumed),
                          **({"metric_stages": target.metric_stages} if target.on_compare else {}))
    base, _, variant = target.convert.partition("@")
    matrix = ((raw.get("stages") or {}).get(base) or {}).get("matrix")
    impl_path = evaluator.impl_path(outcome.remedy) if outcome.passed else None
    precision_file = str(impl_path) if impl_path else None
    yaml_text = (report.named_matrix_yaml(base, matrix, variant, keep, fusion, precision_file)
                 if variant and report.is_list_matrix(matrix) else None)
    if yaml_text:
        data["yaml"] = yaml_text
    written = report.write_remedy_files(out_dir, keep, fusion, data, evaluator.impl_file(outcome.remedy)
                                        if impl_path else None)
    label = "output cosine" if target.on_compare and target.metric == "output_cosine" else target.metric
    return FixReport(outcome, keep, fusion, data, written, label, target.set_prefix,
                     _target_text(target, tolerance, golden), restore_run, yaml_text, precision_file)


def _pipeline_tolerance(target, tolerance: float | None, min_cosine: float | None) -> float:
    """``--tolerance`` (default 0.01), or for a compare metric ``--min-cosine X`` as ``1 - X``."""
    if min_cosine is None:
        return 0.01 if tolerance is None else tolerance
    if not target.on_compare:
        raise UserError(f"--min-cosine holds an output cosine: in pipeline mode it applies to a compare metric "
                        f"(--metric COMPARE.output_cosine), not '{target.metric_stage}.{target.metric}': give "
                        "--tolerance", Location(field="--min-cosine"))
    if tolerance is not None:
        raise UserError("give --min-cosine or --tolerance, not both (--min-cosine X is --tolerance 1-X)",
                        Location(field="--min-cosine"))
    if not 0.0 < min_cosine <= 1.0:
        raise UserError(f"--min-cosine must be in (0, 1], got {min_cosine}", Location(field="--min-cosine"))
    return round(target.golden_value - min_cosine, 12)


def _target_text(target, tolerance: float, golden: float | None) -> str:
    if target.on_compare:
        cases = target.metric_stages
        over = f" on each of {len(cases)} cases ({', '.join(cases)})" if len(cases) > 1 else ""
        return (f"{target.metric_stage.partition('@')[0]}.{target.metric} >= {target.golden_value:g} - {tolerance} = "
                f"{target.golden_value - tolerance:.6g}{over}, and no output overflows")
    return (f"{target.metric_stage}.{target.metric} >= {target.golden_stage}.{target.metric} - {tolerance}"
            + (f" = {golden - tolerance:.6g}" if golden is not None else ""))


def _pipeline_journal(out_dir: Path, pipeline, target, tolerance: float, overrides, backend):
    """The journal of a pipeline search: keyed by the arguments (and, checked at the baseline, the stage keys)."""
    from ascendpipe.fix.journal import Journal, code_digest

    arguments = {"mode": "pipeline", "code": code_digest(), "pipeline": str(Path(pipeline).resolve()),
                 "stage": target.convert, "metric": f"{target.metric_stage}.{target.metric}",
                 "golden_stage": target.golden_stage, "compare": target.compare, "tolerance": tolerance,
                 "overrides": list(overrides), "backend": backend}
    return Journal(out_dir / "attempts", arguments)


def _resolution(outcome: Outcome, evaluator, metric_stage, workspace: Path, tolerance: float) -> dict:
    """fix.json's ``resolution`` (``fix.resolution.judge``); where the answer's change is inside the
    noise, or the tolerance below what the set can show, the outcome's message says so."""
    from ascendpipe.fix.resolution import judge, sample_count

    first = outcome.attempts[0].result if outcome.attempts else None
    final = outcome.final if outcome.remedy else None
    noise = judge(sample_count(metric_stage, workspace), tolerance, first.metric if first and final else None,
                  final.metric if final else None, hits_baseline=first.samples if first and final else None,
                  hits_final=final.samples if final else None, hits_golden=evaluator.golden_samples)
    if noise.get("inside_noise") and outcome.passed:
        outcome.message = ("target met, but not restored: " + noise["note"]
                           + "; the remedy is listed for what it is worth")
    elif noise.get("note"):
        outcome.message += "; " + noise["note"]
    return noise


@dataclass
class QuantizeFixReport:
    outcome: Outcome
    skip_layers: list[str]
    summary: dict
    written: dict[str, Path]
    metric_name: str
    stage_prefix: str
    target_text: str
    restore_run: int | None = None  # the last run fix records (the workspace put back)

    def text(self) -> str:
        from ascendpipe.fix.quantize import terminal_text

        return terminal_text(self.outcome, self.metric_name, self.skip_layers, self.stage_prefix, self.target_text,
                             self.written, self.restore_run)


def fix_quantize(pipeline: str | Path, *, stage: str = "quantize", metric: str | None = None,
                 tolerance: float | None = None, golden_stage: str | None = None, compare_stage: str | None = None,
                 overrides=(), backend: str | None = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 output: str | Path | None = None) -> QuantizeFixReport:
    """Accuracy-based automatic quantization: the fewest layers of the quantize stage kept in float so
    that ``metric`` stays within ``tolerance`` of the golden; each attempt an engine build. ``metric``
    and ``tolerance`` default to the stage's ``auto`` param."""
    import json

    import yaml

    import ascendpipe
    from ascendpipe.fix.evaluators import _pick_stage, resolve_target
    from ascendpipe.fix.quantize import QuantizePipelineEvaluator, auto_target, quantize_search

    _check_attempts(max_attempts)
    resolved = ascendpipe.load(str(pipeline), set=list(overrides), backend=backend)
    name = _pick_stage(resolved.stages, stage, "quantize", "--stage")
    auto = auto_target(resolved, name)
    metric = metric or auto.get("metric")
    if not metric:
        raise UserError(f"give --metric STAGE.METRIC (e.g. eval_int8.top1), or params.auto.metric on stage '{name}'",
                        Location(stage=name, field="--metric"))
    tolerance = float(tolerance if tolerance is not None else auto.get("tolerance", 0.01))
    if tolerance < 0:
        raise UserError(f"--tolerance must be >= 0, got {tolerance}", Location(field="--tolerance"))
    raw = yaml.safe_load(Path(pipeline).read_text()) or {}
    target = resolve_target(resolved, raw.get("stages") or {}, stage=name, metric=metric, golden_stage=golden_stage,
                            compare_stage=compare_stage, kind="quantize")
    workspace = Path(resolved.workspace)
    build_dir = workspace / resolved.build_dir
    base_skip = list(resolved.stages[name].params.get("skip_layers") or [])
    evaluator = QuantizePipelineEvaluator(str(pipeline), target, tolerance=tolerance, overrides=overrides,
                                          backend=backend, build_dir=build_dir, base_skip=base_skip)
    outcome = quantize_search(evaluator, max_attempts=max_attempts)
    restore_run = (evaluator.restore_workspace() or {}).get("id")
    skip = evaluator.skip_layers(outcome.remedy)
    golden = evaluator.golden_metric
    data = {"skip_layers": skip, "metric": outcome.final.metric if outcome.final else None,
            "attempts": len(outcome.attempts), "passed": outcome.passed, "minimal": outcome.minimal,
            "message": outcome.message, "mode": "quantize", "stage": name, "metric_stage": target.metric_stage,
            "metric_name": target.metric, "golden_stage": target.golden_stage, "golden_metric": golden,
            "tolerance": tolerance, "runs": evaluator.runs, "restore_run": restore_run,
            "set": evaluator.set_lines(outcome.remedy) if outcome.passed else [],
            "table": report.attempt_rows(outcome)}
    out_dir = Path(output) if output else build_dir / "fix" / stage_folder(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    from ascendpipe.fsutil import write_text_atomic

    written = {"summary": write_text_atomic(out_dir / report.SUMMARY_FILE, json.dumps(data, indent=2, default=str) + "\n")}
    target_text = (f"{target.metric_stage}.{target.metric} >= {target.golden_stage}.{target.metric} - {tolerance}"
                   + (f" = {golden - tolerance:.6g}" if golden is not None else ""))
    return QuantizeFixReport(outcome, skip, data, written, target.metric, target.set_prefix, target_text, restore_run)
