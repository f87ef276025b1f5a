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

from ascendpipe.errors import Location, UserError
from ascendpipe.quantize.config import QUANTIZABLE_TYPES, QuantSettings, per_channel_weights


def quantize_model(model: Path, batches: list[dict], out_path: Path, settings: QuantSettings) -> dict:
    """Write the QDQ int8 model of ``model`` calibrated on ``batches`` to ``out_path``; returns what was used."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class _Reader(CalibrationDataReader):
        def __init__(self, feeds):
            self._feeds = iter(feeds)

        def get_next(self):
            return next(self._feeds, None)

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    types = [t for t in QUANTIZABLE_TYPES if t not in settings.skip_layer_types]
    extra = {"ActivationSymmetric": not settings.activation_offset, "WeightSymmetric": True,
             "OpTypesToExcludeOutputQuantization": list(QUANTIZABLE_TYPES)}
    per_channel = per_channel_weights(_weights(model, types), settings)
    # per-channel scales layer by layer (AMCT's channel_wise precedence): per-tensor by default, and an
    # axis override on each weight that is per channel
    extra["TensorQuantOverrides"] = {w: [{"axis": axis}] for w, axis in per_channel.items()}
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # onnxruntime logs a pre-processing suggestion on the root logger
    try:
        quantize_static(str(model), str(out_path), _Reader([dict(b) for b in batches]),
                        quant_format=QuantFormat.QDQ, op_types_to_quantize=types,
                        per_channel=False, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, nodes_to_exclude=list(settings.skip_layers),
                        calibrate_method=methods[settings.calibrate_method],
                        calibration_providers=["CPUExecutionProvider"], extra_options=extra)
    finally:
        quiet.setLevel(level)
    return {"calibration_method": {"minmax": "MinMax", "entropy": "Entropy",
                                   "percentile": "Percentile"}[settings.calibrate_method],
            "activation_type": "int8", "weight_type": "int8", "per_channel_weights": sorted(per_channel),
            "activation_symmetric": not settings.activation_offset, "op_types": types}


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
        layers = artifacts.quantizable_layers(model, QUANTIZABLE_TYPES)
        artifacts.check_skip_layers(settings, layers, where)
        batches, calibration = artifacts.calibration_batches(ctx.inputs["calibration"], input_specs(model),
                                                             settings, where)
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    out = Path(ctx.out_dir)
    qdq = out / artifacts.MODEL
    used = quantize_model(model, batches, qdq, settings)
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

