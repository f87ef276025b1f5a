"""Accuracy-based automatic quantization: the fewest layers kept in float so that the metric holds.

The same search as the fp16 remedy (``fix.search``): a remedy is a set of quantized layers kept in
float (``skip_layers``); growing follows the compare of the fake-quant model against the golden
(``compare.quant_advice.skip_layers_advice``: the layers whose own loss of cosine is largest), shrinking
makes the set 1-minimal. Two evaluators:

- ``QuantizePipelineEvaluator``: each attempt an engine build of the eval stage downstream of the
  quantize stage (and its compare stage) with ``--set ...skip_layers=[...]``, cached and recorded;
  the target is ``metric >= golden metric - tolerance``. ``ascendpipe fix PIPELINE --quantize``.
- ``StandaloneQuantizeEvaluator``: in process, for a model, calibration batches, evaluation feeds and
  labels (Top-1); used by ``bench/quantize.py`` and tests.

``one_layer_at_a_time`` is the yardstick: keep one layer in float at a time, in graph order, until
the target holds (AMCT's accuracy-based mode rolls layers back one by one in the same spirit).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ascendpipe.contract import stage_folder
from ascendpipe.errors import Location, UserError
from ascendpipe.fix.evaluators import PipelineEvaluator, _output_cosine
from ascendpipe.fix.search import KEEP, Candidate, Outcome, Result, search


def ordered_layers(remedy, base=(), order=()) -> list[str]:
    """skip_layers for a remedy set on top of the stage's, in graph order (one set, one list: cache hits)."""
    position = {name: i for i, name in enumerate(order)}
    names = sorted((c.name for c in remedy), key=lambda n: (position.get(n, len(position)), n))
    return list(dict.fromkeys([*base, *names]))


def _evidence(result: dict | None) -> tuple[dict | None, float | None]:
    """The failure object the search reads (its advice: layers to keep in float) and the output cosine."""
    if not result:
        return None, None
    advice = (result.get("quantization") or {}).get("advice")
    return ({"op_name": advice["added"][0], "kind": "quantization", "advice": [advice]} if advice else None,
            _output_cosine(result))


class QuantizePipelineEvaluator(PipelineEvaluator):
    """One engine build per attempt, with the quantize stage's skip_layers set to the remedy."""

    def __init__(self, *args, base_skip=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.base_skip = list(base_skip)
        self.layers: list[str] = []  # the quantized layers of the baseline, in graph order

    def skip_layers(self, remedy) -> list[str]:
        return ordered_layers(remedy, self.base_skip, self.layers)

    def set_lines(self, remedy) -> list[str]:
        if not remedy:
            return []
        return [f"{self.target.set_prefix}.skip_layers={json.dumps(self.skip_layers(remedy))}"]

    def evaluate(self, remedy: frozenset) -> Result:
        t = self.target
        run, metric = self._attempt(remedy)
        record_path = self.build_dir / stage_folder(t.convert) / "quantize.json"
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
        if not self.layers:
            self.layers = list(record.get("layers") or [])
        compared = None
        if t.compare and (self.build_dir / stage_folder(t.compare) / "result.json").is_file():
            compared = json.loads((self.build_dir / stage_folder(t.compare) / "result.json").read_text())
        failure, cosine = _evidence(compared)
        passed = metric >= self.golden_metric - self.tolerance
        note = f"run {run.get('id')}" + (f"; loses most: {failure['op_name']}" if failure and not passed else "")
        return Result(passed, metric, cosine, failure=failure, ops=list(record.get("quantized_layers") or []), note=note)


class StandaloneQuantizeEvaluator:
    """In process: quantize with a remedy's skip_layers, Top-1 on ``eval_feeds`` against ``labels``,
    and the per-layer compare on ``probe`` for the next layer to keep in float."""

    def __init__(self, model: Path, calibration: list[dict], eval_feeds: dict, labels, *, tolerance: float,
                 work_dir: Path, probe: dict | None = None, params: dict | None = None, output: str | None = None):
        import numpy as np

        from ascendpipe.backends.onnxruntime.session import make_session
        from ascendpipe.compare.runner import graph_info
        from ascendpipe.backends.compare_sources import dump
        from ascendpipe.quantize.artifacts import quantizable_layers
        from ascendpipe.quantize.config import QUANTIZABLE_TYPES

        self.model, self.calibration, self.eval_feeds = Path(model), calibration, eval_feeds
        self.labels, self.tolerance, self.work_dir = np.asarray(labels), float(tolerance), Path(work_dir)
        self.params, self.output = dict(params or {}), output
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.probe = probe or {k: v[:8] for k, v in eval_feeds.items()}
        self.graph = graph_info(self.model)
        self.layers = [n for n, _ in quantizable_layers(self.model, QUANTIZABLE_TYPES)]
        self.golden_dump = dump(self.model, self.probe, self.work_dir / "golden_dump", fusions=False)
        self.golden_metric = self._top1(make_session(self.model))
        self.count = 0

    def _top1(self, session) -> float:
        import numpy as np

        outputs = session.run([self.output] if self.output else None, self.eval_feeds)
        return float(np.mean(np.argmax(outputs[0], axis=1) == self.labels))

    def evaluate(self, remedy: frozenset) -> Result:
        from ascendpipe.backends.onnxruntime.quantize import quantize_model
        from ascendpipe.backends.onnxruntime.session import make_session
        from ascendpipe.compare.quant_advice import quantization_losses, skip_layers_advice
        from ascendpipe.compare.runner import compare_dumps
        from ascendpipe.backends.compare_sources import dump
        from ascendpipe.quantize.artifacts import annotate_for_dump
        from ascendpipe.quantize.config import resolve

        skip = ordered_layers(remedy, self.params.get("skip_layers") or (), self.layers)
        settings = resolve({**self.params, "skip_layers": skip})
        self.count += 1
        attempt = self.work_dir / f"attempt-{self.count:03d}"
        shutil.rmtree(attempt, ignore_errors=True)
        attempt.mkdir(parents=True)
        try:
            path = attempt / "model.onnx"
            quantize_model(self.model, self.calibration, path, settings)
            mapping = annotate_for_dump(path, self.model)
            metric = self._top1(make_session(path))
            target = dump(path, self.probe, attempt / "dump", fusions=True)
            compared = compare_dumps(self.golden_dump, target, graph=self.graph)
        finally:
            shutil.rmtree(attempt, ignore_errors=True)
        ranked = quantization_losses(compared["rows"], mapping["quantized_layers"], self.graph.get("producers"))
        advice = skip_layers_advice(ranked, "quantize", skip)
        compared["quantization"] = {"advice": advice}
        failure, cosine = _evidence(compared)
        passed = metric >= self.golden_metric - self.tolerance
        return Result(passed, metric, cosine, failure=failure, ops=list(mapping["quantized_layers"]),
                      note=f"loses most: {failure['op_name']}" if failure and not passed else "")


def one_layer_at_a_time(evaluator, layers: list[str]) -> tuple[list[str] | None, int]:
    """The yardstick: the baseline, then each layer alone kept in float, in graph order, until the target
    holds. Returns (the answer or None, evaluations used)."""
    count = 1
    if evaluator.evaluate(frozenset()).passed:
        return [], count
    for layer in layers:
        count += 1
        if evaluator.evaluate(frozenset({Candidate(KEEP, layer)})).passed:
            return [layer], count
    return None, count


def quantize_search(evaluator, *, max_attempts: int = 30, start=()) -> Outcome:
    return search(evaluator, max_attempts=max_attempts, start=[Candidate(KEEP, s) for s in start])


def auto_target(pipeline, stage_name: str) -> dict:
    """The quantize stage's ``auto: {metric, tolerance}`` param (the default target of ``fix --quantize``)."""
    stage = pipeline.stages.get(stage_name)
    if stage is None:
        return {}
    auto = stage.params.get("auto") or {}
    if auto and not isinstance(auto, dict):
        raise UserError("params.auto must be a mapping {metric, tolerance}", Location(stage=stage_name, field="auto"))
    return dict(auto)


def yaml_lines(stage_prefix: str, skip: list[str]) -> str:
    parts = stage_prefix.split(".")
    lines = [f"{'  ' * i}{part}:" for i, part in enumerate(parts)]
    return "\n".join(lines + [f"{'  ' * len(parts)}skip_layers: [{', '.join(json.dumps(s) for s in skip)}]"]) + "\n"


def terminal_text(outcome: Outcome, metric_name: str, skip: list[str], stage_prefix: str, target_text: str,
                  written: dict, restore_run: int | None = None) -> str:
    from ascendpipe.fix.report import attempt_table

    out = [f"target: {target_text}", "", attempt_table(outcome, metric_name, restore_run), outcome.message]
    if outcome.passed:
        kept = ", ".join(skip) if skip else "none: every layer stays int8"
        out += ["", f"layers kept in float: {kept}"]
        if skip:
            out += ["apply it with these YAML lines:", yaml_lines(stage_prefix, skip).rstrip(), "",
                    "or on the command line:", f"--set '{stage_prefix}.skip_layers={json.dumps(skip)}'"]
    if written:
        out += ["", "written: " + ", ".join(str(p) for p in written.values())]
    return "\n".join(out) + "\n"
