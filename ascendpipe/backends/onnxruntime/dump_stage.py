"""The dump stage and the standalone dump's feed: which samples a dump runs, and the stage that
takes its dump from the shared dump cache or makes it (``dump.dump_model``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ascendpipe.backends.onnxruntime import dump as _dump
from ascendpipe.errors import UserError
from ascendpipe.fsutil import write_json_atomic

def is_converted(model_file: Path) -> bool:
    """A convert stage's model: its directory has convert.json, or the model carries emulation metadata."""
    if (model_file.parent / "convert.json").exists():
        return True
    from ascendpipe.errors import Location

    try:  # the graph without its weights (see dump._model_bytes): a full parse copied them all
        model = _dump._load(Path(model_file), Location(file=str(model_file)))[0]
    except (UserError, OSError):
        return False  # dump_model reports the unreadable file
    return any(p.key == _dump.EMULATION_KEY for p in model.metadata_props)


def first_samples(batches: list, max_batch: int, static: bool) -> dict[str, np.ndarray]:
    """The feed of a dump: the first batch of a static-batch model, else the first ``max_batch`` rows."""
    first = dict(batches[0])
    axes = getattr(batches[0], "axes", {})
    counts = {a.shape[axes[n]] for n, a in first.items() if axes.get(n) is not None and a.ndim > axes[n]}
    if static or len(counts) > 1:  # fixed by the model, or inputs whose first axes are dims, not a batch
        return first
    if hasattr(batches[0], "head"):  # each input sliced on its own batch axis (a scalar whole)
        return dict(batches[0].head(max_batch))
    return {name: array[:max_batch] for name, array in first.items()}


def run_stage(ctx):
    """The dump stage: the dump of this model for these feeds comes from the shared dump cache when
    another stage (a dump of the same model, a compare's golden) made it; else it is made and shared."""
    from ascendpipe.backends.onnxruntime.infer import stage_batches
    from ascendpipe.contract import StageResult, find_model_file, write_metrics
    from ascendpipe.inputs import with_batch_axes
    from ascendpipe.store.dump_cache import DumpCache

    params = ctx.params
    try:
        model = find_model_file(ctx.inputs["model"])
        fusions = params.get("fusions", "auto")
        upstream = ctx.upstream.get("model")
        if fusions == "auto":
            fusions = (upstream is not None and upstream.kind == "convert") or is_converted(model)
        max_batch = params.get("max_batch", 8)
        # the inputs from the graph: a session made only to list them cost as much as the dump's own
        # (ResNet-18: ~0.1 s, the weights parsed and copied), and the dump makes its own
        specs = with_batch_axes(_dump.model_input_specs(model), params.get("batch_axes"))
        static = any(s.static_batch is not None for s in specs)
        batches, source = stage_batches(ctx, specs, batch_size=None if static else max_batch,
                                        seed=params.get("seed", 0), cap=True)
        feeds = first_samples(batches, max_batch, static)
        budget = params.get("memory_budget_mb")
        ctx.say(f"dump {model} with fusions {'as converted' if fusions else 'off'}, inputs {source}")
        stats: dict = {}

        def make(folder):
            _dump.dump_model(model, feeds, folder, fusions=bool(fusions), log=ctx.log, stats=stats,
                       memory_budget_bytes=int(budget * (1 << 20)) if budget else _dump.AUTO)

        cache = DumpCache.for_workspace(ctx.workspace)
        shared, made = cache.get_or_make(_dump.cache_key(model, feeds, fusions=bool(fusions)), make)
        shared.copy_to(ctx.out_dir)
        if upstream is not None:  # the stage that made the model: a compare of this dump advises on it
            write_json_atomic(ctx.out_dir / "source.json", {  # backends.compare_sources.DUMP_SOURCE
                "stage": upstream.stage, "kind": upstream.kind,
                "model_dir": os.path.relpath(model.parent, ctx.final_out_dir)})
        ctx.say(f"dump: {'made' if made else 'taken from the shared dump cache'} (key {shared.key[:12]}, "
                f"{shared.bytes} bytes)" + (f", {stats['chunks']} segment(s), {stats['seconds']:.2f} s" if made else ""))
    except UserError as err:
        raise err.with_location(stage=ctx.name)
    index = json.loads((ctx.out_dir / _dump.INDEX_FILE).read_text())
    tensors = index["tensors"]
    metrics = {"tensors": len(tensors), "tensors_with_nan": sum(1 for t in tensors if t["nan"]),
               "tensors_with_inf": sum(1 for t in tensors if t["inf"])}
    write_metrics(ctx.out_dir, metrics)
    first = first_nonfinite(tensors)
    if first:  # named by its op, as compare names the failure
        ctx.say(f"dump: {sum(1 for t in tensors if t['nan'] or t['inf'])} tensors hold NaN or Inf; first: {first_text(first)}")
    info = {"model": str(model), "inputs": source, "fusions": bool(fusions), "shared_dump": shared.key,
            "made": made, "first_nan_or_inf": first}
    if made:
        info["chunks"] = stats["chunks"]
    return StageResult(metrics=metrics, info=info)


def first_nonfinite(tensors: list[dict]) -> dict | None:
    """The first tensor (graph order) holding NaN or Inf, named by its op as compare names a row: a fused
    kernel's output carries the kernel's name (``sum``), not the member op that wrote the tensor."""
    for t in tensors:
        if t.get("nan") or t.get("inf"):
            return {"op_name": t.get("op_name"), "op_type": t.get("op_type"), "tensor": t["name"]}
    return None


def first_text(first: dict | None) -> str:
    """``op 'sum' (ReduceSum), tensor 'norm'``: the op first, as compare's first failure names it."""
    if not first:
        return ""
    if not first.get("op_name") or first["op_name"] == first["tensor"]:
        return f"tensor '{first['tensor']}'"
    kind = f" ({first['op_type']})" if first.get("op_type") else ""
    return f"op '{first['op_name']}'{kind}, tensor '{first['tensor']}'"
