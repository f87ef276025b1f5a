"""Which stages a pipeline-mode fix builds and reads, resolved from the CLI's names.

``--stage`` names the convert (or quantize) stage or variant; ``--metric STAGE.NAME`` the metric held:
- an eval metric (``eval.mAP``, ``eval_lm.next_token_agreement``): held against the same metric of the
  golden's eval stage (``--golden-stage``, default the eval's ``golden`` input), within ``--tolerance``;
- a compare metric (``compare_decode.output_cosine``): the output cosine of the compare stage, over every
  variant of it that depends on ``--stage`` (every case: a compare matrix over inputs), held against 1 (the
  golden compared with itself) within ``--tolerance`` (``--min-cosine X`` is ``--tolerance 1-X``); its
  own rows are the evidence the search grows from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascendpipe.errors import Location, UserError

# the compare metrics a fix can hold, with their golden value (the golden model compared with itself)
COMPARE_GOLDEN = {"output_cosine": 1.0, "min_cosine": 1.0}


@dataclass
class PipelineTarget:
    """Which stages the pipeline search builds and reads, resolved from the CLI's names."""

    convert: str  # 'convert@fp16'
    metric_stage: str  # 'eval@fp16'
    metric: str  # 'mAP'
    golden_stage: str | None  # 'eval_golden'; None for a compare metric (its golden value is known)
    compare: str | None  # 'compare@fp16', or None (then the search has no per-op evidence)
    set_prefix: str  # 'stages.convert.matrix.fp16' or 'stages.convert.params'
    metric_stages: list[str] = field(default_factory=list)  # every stage whose metric is held (compare: each case)
    golden_value: float | None = None  # a compare metric's golden (1.0 for a cosine); None: read from golden_stage

    @property
    def on_compare(self) -> bool:
        return self.golden_value is not None


def _closure(stages: dict, name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in stages:
            continue
        seen.add(current)
        todo += list(stages[current].upstream.values())
    return seen


def _pick_stage(stages: dict, given: str, kind: str, field: str) -> str:
    if given in stages:
        if stages[given].kind != kind:
            raise UserError(f"stage '{given}' is a {stages[given].kind} stage, not {kind}", Location(field=field))
        return given
    variants = [n for n, s in stages.items() if s.base == given]
    if not variants:
        known = ", ".join(n for n, s in stages.items() if s.kind == kind) or "none"
        raise UserError(f"no stage '{given}'; {kind} stages: {known}", Location(field=field))
    if len(variants) > 1:
        raise UserError(f"stage '{given}' has variants {', '.join(variants)}; name one, e.g. {field} {variants[-1]}",
                        Location(field=field))
    return variants[0]


def _set_prefix(raw_stages: dict, stage) -> str:
    raw = raw_stages.get(stage.base) or {}
    matrix = raw.get("matrix") or {}
    if stage.variant is not None and matrix:
        # a named variant's overlay, or a list-form matrix's variant: --set turns that matrix into the
        # named form with the same variants (config.overrides), so this one variant changes alone
        return f"stages.{stage.base}.matrix.{stage.variant}"
    return f"stages.{stage.base}.params"


_STANDALONE_HINT = ("; to fix on the output cosine alone, run standalone mode: "
                    "ascendpipe fix --golden MODEL.onnx --input X.npy --min-cosine 0.99")


def resolve_target(pipeline, raw_stages: dict, *, stage: str, metric: str, golden_stage: str | None,
                   compare_stage: str | None, kind: str = "convert") -> PipelineTarget:
    """Resolve ``--stage``, ``--metric STAGE.NAME``, ``--golden-stage`` and ``--compare-stage``.
    ``kind``: what ``--stage`` must be (``convert``, or ``quantize`` for ``fix --quantize``)."""
    stages = pipeline.stages
    convert = _pick_stage(stages, stage, kind, "--stage")
    metric_base, dot, metric_name = metric.partition(".")
    if not dot or not metric_name:
        raise UserError(f"--metric expects STAGE.METRIC (e.g. eval.mAP), got '{metric}'", Location(field="--metric"))
    downstream = [n for n, s in stages.items() if (n == metric_base or s.base == metric_base)
                  and convert in _closure(stages, n)]
    if not downstream:
        raise UserError(f"no stage '{metric_base}' depends on '{convert}'; --metric names the eval stage downstream "
                        f"of the {'quantized' if kind == 'quantize' else 'converted'} model"
                        + ("" if kind == "quantize" else _STANDALONE_HINT), Location(field="--metric"))
    metric_stage = downstream[0]
    if stages[metric_stage].kind == "compare":
        return _compare_target(stages, raw_stages, convert, downstream, metric_name, golden_stage, compare_stage)
    if golden_stage is None:
        golden_stage = stages[metric_stage].upstream.get("golden")
        if golden_stage is None:
            raise UserError(f"stage '{metric_stage}' has no golden input; name the golden metric's stage with "
                            "--golden-stage (e.g. eval_golden)", Location(stage=metric_stage, field="--golden-stage"))
    elif golden_stage not in stages:
        raise UserError(f"--golden-stage '{golden_stage}' is not a stage; stages: {', '.join(stages)}",
                        Location(field="--golden-stage"))
    if compare_stage is None:
        found = [n for n, s in stages.items() if s.kind == "compare" and s.upstream.get("target") == convert]
        compare_stage = found[0] if found else None
    elif compare_stage not in stages or stages[compare_stage].kind != "compare":
        raise UserError(f"--compare-stage '{compare_stage}' is not a compare stage", Location(field="--compare-stage"))
    return PipelineTarget(convert, metric_stage, metric_name, golden_stage, compare_stage,
                          _set_prefix(raw_stages, stages[convert]), metric_stages=[metric_stage])




def _compare_target(stages, raw_stages, convert: str, downstream: list[str], metric: str, golden_stage, compare_stage):
    """A compare metric held against its golden value, over every variant of that compare stage depending
    on ``convert``; the stage itself gives the evidence (``--compare-stage`` is not needed)."""
    metric_stage = downstream[0]
    if metric not in COMPARE_GOLDEN:
        raise UserError(f"a compare metric held by fix must be one whose golden value is known: "
                        f"{', '.join(sorted(COMPARE_GOLDEN))} (1 for the golden compared with itself), not '{metric}'",
                        Location(stage=metric_stage, field="--metric"))
    if golden_stage is not None:
        raise UserError(f"--golden-stage does not apply to a compare metric: '{metric_stage}.{metric}' is held against "
                        f"{COMPARE_GOLDEN[metric]:g} (the golden compared with itself) within --tolerance",
                        Location(field="--golden-stage"))
    compares = [n for n in downstream if stages[n].kind == "compare"]
    if compare_stage is not None and compare_stage not in compares:
        raise UserError(f"--compare-stage '{compare_stage}': with a compare metric, the evidence is the metric's own "
                        f"stage ({', '.join(compares)})", Location(field="--compare-stage"))
    return PipelineTarget(convert, metric_stage, metric, None, metric_stage, _set_prefix(raw_stages, stages[convert]),
                          metric_stages=compares, golden_value=COMPARE_GOLDEN[metric])
