"""The emulation's int8 calibration: ``onnxruntime.quantization`` static QDQ, set up as AMCT quantizes.

What is mirrored from AMCT (docs/quantize.md): only the cube layers (Conv, ConvTranspose, Gemm,
MatMul) are quantized; their activation input and weights go to int8 (weights symmetric, per
channel when ``channel_wise``; activations with an offset when ``activation_offset``), the bias to
int32, and their output is dequantized to float (AscendDequant) rather than requantized: no QDQ on
layer outputs. ``channel_wise`` is applied layer by layer with AMCT's precedence (an axis override
on each per-channel weight). Calibration reads ``batch_num`` batches. What differs: onnxruntime's
calibrator (MinMax by default, ``calibrate_method``) stands in for AMCT's IFMR search.

The QDQ model is both outputs here: onnxruntime runs QDQ as int8 kernels, so the fake-quant model
is also the deployable one on this backend.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ascendpipe import onnxexternal
from ascendpipe.errors import Location, UserError
from ascendpipe.quantize.config import QUANTIZABLE_TYPES, QuantSettings, per_channel_weights


WORK_DIR = ".quantize-input"  # the copy of the model the quantizer is given, inside the output, removed after
# onnxruntime's quantizer holds the model in memory several times over: its ModelProto, the shape-inferred
# copy it loads back, the calibration session's weights and the quantized model. Measured (onnxruntime
# 1.32, external-data MatMul stacks): peak RSS above the process before it 3.00x the weights at 302 MB,
# 2.93x at 604 MB (docs/benchmarks.md, "Issues 48 and 49")
MEMORY_FACTOR = 3.0


def quantize_model(model: Path, batches: list[dict], out_path: Path, settings: QuantSettings) -> dict:
    """Write the QDQ int8 model of ``model`` calibrated on ``batches`` to ``out_path``; returns what was used.

    The quantizer is given a copy of the model inside ``out_path``'s folder (``WORK_DIR``), never the
    user's file: onnxruntime writes ``<model>-inferred.onnx`` beside the model it is given and deletes it
    after (a user's own file of that name would go, a read-only folder would fail). The model's external
    data is checked by the strict reader first, and a model the quantizer could not hold in memory is
    refused with the numbers before anything is written."""
    import shutil

    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class _Reader(CalibrationDataReader):
        def __init__(self, feeds):
            self._feeds = iter(feeds)

        def get_next(self):
            return next(self._feeds, None)

    refs = onnxexternal.check_model(model)
    weight_bytes = _weight_bytes(model, refs)
    onnxexternal.check_memory(weight_bytes, f"quantizing this model ({onnxexternal.size_text(weight_bytes)} of "
                              f"weights; onnxruntime's quantizer holds them about {MEMORY_FACTOR:.0f} times)", model,
                              MEMORY_FACTOR)
    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    types = [t for t in QUANTIZABLE_TYPES if t not in settings.skip_layer_types]
    extra = {"ActivationSymmetric": not settings.activation_offset, "WeightSymmetric": True,
             "OpTypesToExcludeOutputQuantization": list(QUANTIZABLE_TYPES)}
    per_channel = per_channel_weights(_weights(model, types), settings)
    # per-channel scales layer by layer (AMCT's channel_wise precedence): per-tensor by default, and an
    # axis override on each weight that is per channel
    extra["TensorQuantOverrides"] = {w: [{"axis": axis}] for w, axis in per_channel.items()}
    work = Path(out_path).parent / WORK_DIR
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # onnxruntime logs a pre-processing suggestion on the root logger
    try:
        given = _work_copy(model, refs, work)
        quantize_static(str(given), str(out_path), _Reader([dict(b) for b in batches]),
                        quant_format=QuantFormat.QDQ, op_types_to_quantize=types,
                        per_channel=False, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, nodes_to_exclude=list(settings.skip_layers),
                        calibrate_method=methods[settings.calibrate_method],
                        calibration_providers=["CPUExecutionProvider"], extra_options=extra,
                        use_external_data_format=bool(refs) or weight_bytes >= EXTERNAL_FROM)
    finally:
        quiet.setLevel(level)
        shutil.rmtree(work, ignore_errors=True)
    adopt_weights(Path(out_path))
    return {"calibration_method": {"minmax": "MinMax", "entropy": "Entropy",
                                   "percentile": "Percentile"}[settings.calibrate_method],
            "activation_type": "int8", "weight_type": "int8", "per_channel_weights": sorted(per_channel),
            "activation_symmetric": not settings.activation_offset, "op_types": types}


OWN_DATA = "model.qdq.data"  # a quantized model's own weights file (onnxruntime names it <model>.onnx.data)


def adopt_weights(model_path: Path) -> None:
    """A quantized model onnxruntime wrote with external data: its weights file renamed to the
    model's own name (``OWN_DATA``, never a name the source uses) and the references with it; then
    checked: every reference resolves (the strict reader) and the model loads in onnxruntime."""
    import os

    import onnx

    from ascendpipe.quantize.artifacts import save_atomic

    model_path = Path(model_path)
    refs = onnxexternal.check_model(model_path)
    if not refs:
        return
    model = onnx.load(str(model_path), load_external_data=False)
    renamed = {}
    for tensor in onnxexternal.external_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value != OWN_DATA:
                renamed.setdefault(entry.value, OWN_DATA)
                entry.value = OWN_DATA
    if len(renamed) > 1:
        raise UserError(f"the quantized model's weights lie in {len(renamed)} files, not one: {sorted(renamed)}",
                        Location(file=str(model_path)))
    for old in renamed:
        os.replace(model_path.parent / old, model_path.parent / OWN_DATA)
    save_atomic(model, model_path)
    onnxexternal.check_model(model_path)
    from ascendpipe.backends.onnxruntime.convert import check_loads

    check_loads(str(model_path))  # never a model that does not load


EXTERNAL_FROM = 1 << 30  # weights past this are written as external data (protobuf holds at most 2 GiB)


def _weight_bytes(model: Path, refs) -> int:
    """The model's weights: its file (inline weights) and its external data."""
    import os

    return os.path.getsize(model) + sum(ref.length for ref in refs)


def _work_copy(model: Path, refs, work: Path) -> Path:
    """A copy of ``model`` in ``work`` for the quantizer: the .onnx file, and each external weights
    file under the name the model gives it (a reflink where the file system shares blocks, else a
    copy: onnx, which the quantizer loads it with, refuses a hard-linked or symbolic-linked weights
    file). A copy past the free space says so, with the numbers, before a byte is written."""
    import os
    import shutil

    files = {ref.location: ref.path for ref in refs}
    need = os.path.getsize(model) + sum(os.path.getsize(p) for p in set(files.values()))
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    if need > free:
        raise UserError(f"quantize works on a copy of the model in its output folder: {onnxexternal.size_text(need)} "
                        f"of disk, and {onnxexternal.size_text(free)} is free there: free space or write the output "
                        "to another disk", Location(file=str(model)))
    target = work / "model.onnx"
    onnxexternal.place_file(Path(model), target)
    for location, path in files.items():
        onnxexternal.place_file(Path(path), work / location)
    return target


def _weights(model: Path, types) -> list[tuple[str, str, str | None, bool]]:
    """(layer, op_type, weight initializer or None, transB) of the layers of ``types``."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    out = []
    for n in graph.node:
        if n.op_type in types:
            weight = n.input[1] if len(n.input) > 1 and n.input[1] in inits else None
            trans_b = any(a.name == "transB" and a.i for a in n.attribute)
            out.append((n.name, n.op_type, weight, trans_b))
    return out


def quantize(ctx):
    """The stage: calibration batches, QDQ model, then the common output layout and record."""
    from ascendpipe.quantize import artifacts
    from ascendpipe.quantize.config import format_simple_config, resolve
    from ascendpipe.onnxgraph import read_input_specs as input_specs
    from ascendpipe.contract import StageResult, find_model_file, write_metrics

    where = Location(stage=ctx.name)
    try:
        settings = resolve(ctx.params, lambda p: ctx.path(p).read_text(), where)
        model = find_model_file(Path(ctx.inputs["model"]), what="input model")
        onnxexternal.check_model(model)  # as convert checks it, before anything is read or written
        layers = artifacts.quantizable_layers(model, QUANTIZABLE_TYPES)
        artifacts.check_skip_layers(settings, layers, where)
        batches, calibration = artifacts.calibration_batches(ctx.inputs["calibration"], input_specs(model),
                                                             settings, where)
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    out = Path(ctx.out_dir)
    qdq = out / artifacts.MODEL
    try:
        used = quantize_model(model, batches, qdq, settings)
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    settings.batch_size = calibration["batch_size"]
    config_text = format_simple_config(settings.amct_config(), header="AMCT simple config (calibration_config_onnx.proto) of this calibration")
    metrics, record = artifacts.write_outputs(
        out, fake_quant=qdq, deploy=qdq, original=model, settings=settings, config_text=config_text,
        calibration=calibration, layers=layers,
        record={"backend": "onnxruntime", "stage": ctx.name, "model": str(model), **used})
    write_metrics(out, metrics)
    ctx.say(f"int8 ({used['calibration_method']}, {calibration['samples']} samples, sha256 {calibration['sha256'][:12]}): "
            f"{metrics['quantized_layers']} layers quantized, skipped: {', '.join(record['skipped_layers']) or 'none'}")
    return StageResult(metrics=metrics, remedy_files={artifacts.CONFIG: artifacts.CONFIG},
                       info={"calibration_sha256": calibration["sha256"], "calibration_method": used["calibration_method"],
                             "quantized_layers": record["quantized_layers"], "skipped_layers": record["skipped_layers"],
                             "scales_file": artifacts.SCALES})

