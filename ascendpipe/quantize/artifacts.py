"""What both quantize backends share: the calibration batches (and their hash), and the stage's outputs.

A quantize stage's output directory (docs/contracts.md):

    model.onnx          the fake-quant (QDQ) model: run by infer, dump, compare and eval like a converted model
    deploy/model.onnx   the deployable model (`convert`'s input; on ascend AMCT's deploy model for atc)
    quant.cfg           the AMCT simple config the calibration used
    scales.json         per quantized tensor: scale, zero point (offset), dtype, axis
    quantize.json       the record: settings, calibration data hash, quantized and skipped layers, argv

Heavy modules (numpy, onnx) are imported by the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ascendpipe.contract import ONNX_MODEL_FILE as MODEL
from ascendpipe.contract import QUANT_DEPLOY_DIR as DEPLOY_DIR
from ascendpipe.contract import QUANT_SCALES as SCALES
from ascendpipe.contract import QUANT_SCALES_FORMAT as SCALES_FORMAT
from ascendpipe.contract import QUANTIZE_FORMAT as RECORD_FORMAT
from ascendpipe.contract import QUANTIZE_RECORD as RECORD
from ascendpipe.errors import Location, UserError

CONFIG = "quant.cfg"
EMULATION_KEY = "ascendpipe.emulation"  # the dump reads internal tensors and producers from it


def calibration_batches(path: Path, specs, settings, where: Location) -> tuple[list[dict], dict]:
    """``batch_num`` batches of ``batch_size`` samples from a .npy/.npz/folder (or an upstream
    stage's arrays), and a description with the sha256 of exactly the data used."""
    import numpy as np

    from ascendpipe.backends.onnxruntime.infer import resolve_inputs_path
    from ascendpipe.inputs import load_inputs

    path = resolve_inputs_path(Path(path))
    static = {s.static_batch for s in specs} - {None}
    fixed = static.pop() if len(static) == 1 else None
    if fixed is not None and settings.batch_size not in (None, fixed):
        raise UserError(f"batch_size {settings.batch_size} given, but the model's batch dim is fixed at {fixed}",
                        Location(**{**where.parts(), "field": "batch_size"}), hint="drop batch_size or give the model's")
    size = settings.batch_size or fixed
    from ascendpipe.quantize.config import DEFAULT_BATCH_SIZE

    size = size or DEFAULT_BATCH_SIZE
    try:
        batches = load_inputs(path, specs, batch_size=None if fixed else size)
    except UserError as err:
        raise err.with_location(**{**where.parts(), "field": "calibration"}) from None
    full = [b for b in batches if b.valid == size and b.rows == size]  # no padded batch (a 0-d input has no rows)
    if len(full) < settings.batch_num:
        have = sum(b.valid for b in batches)
        raise UserError(f"calibration data {path} holds {have} samples; batch_num {settings.batch_num} x batch_size "
                        f"{size} needs {settings.batch_num * size}",
                        Location(**{**where.parts(), "field": "calibration"}),
                        hint="lower batch_num or batch_size, or give more calibration samples")
    used = [{k: np.require(v, requirements="C") for k, v in b.items()} for b in full[: settings.batch_num]]  # 0-d kept
    digest = hashlib.sha256()
    for batch in used:
        for name in sorted(batch):
            a = batch[name]
            digest.update(f"{name}|{a.dtype.str}|{list(a.shape)}\n".encode())
            digest.update(a.tobytes())
    return used, {"source": str(path), "sha256": digest.hexdigest(), "batches": len(used), "batch_size": size,
                  "samples": len(used) * size}


def annotate_for_dump(model_path: Path, original_model: Path) -> dict:
    """Mark a fake-quant model's Q/DQ tensors as internal and name their original ops (metadata the
    dump reads), so compare pairs it with the fp32 golden op by op; returns the QDQ map."""
    import onnx

    from ascendpipe.compare.mapping import qdq_map

    original = onnx.load(str(original_model), load_external_data=False)
    originals = {out for n in original.graph.node for out in n.output if out}
    model = onnx.load(str(model_path), load_external_data=False)  # metadata only: its weights stay in their file
    mapping = qdq_map(model.graph.node, originals)
    info = {"format": 1, "internal_tensors": mapping["internal_tensors"], "tensor_producer": mapping["tensor_producer"],
            "source": "quantize"}
    props = [p for p in model.metadata_props if p.key != EMULATION_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    entry = model.metadata_props.add()
    entry.key, entry.value = EMULATION_KEY, json.dumps(info, sort_keys=True)
    save_atomic(model, model_path)
    return mapping


def copy_model(model: Path, target: Path) -> None:
    """``model`` (a file of ours) and its external weights files copied to ``target``'s folder: each
    weights file shares the bytes (a reflink, else a hard link), the .onnx file copied."""
    import shutil

    from ascendpipe import onnxexternal

    for ref in onnxexternal.check_model(model):
        onnxexternal.place_file(Path(ref.path), target.parent / ref.location, link=True)
    shutil.copyfile(model, target)


def save_atomic(model, path: Path) -> None:
    import os

    import onnx

    tmp = Path(path).with_name(Path(path).name + ".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)


def quantizable_layers(model_path: Path, types) -> list[tuple[str, str]]:
    """(name, op_type) of the layers of a quantizable type, in graph order."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    return [(n.name, n.op_type) for n in graph.node if n.op_type in types]


def check_skip_layers(settings, layers: list[tuple[str, str]], where: Location) -> None:
    names = [n for n, _ in layers]
    unknown = [s for s in settings.skip_layers if s not in names]
    if unknown:
        raise UserError(f"skip_layers names {', '.join(unknown)}, not a quantizable layer of the model; "
                        f"quantizable layers: {', '.join(names) or 'none'}",
                        Location(**{**where.parts(), "field": "skip_layers"}))


def scales(model_path: Path) -> dict:
    """scales.json from a fake-quant model: QuantizeLinear/DequantizeLinear scale and zero-point
    initializers, or AMCT's AscendQuant/AscendDequant attributes (scale, offset, deq_scale)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from ascendpipe import onnxexternal

    graph = onnx.load(str(model_path), load_external_data=False).graph
    tensors_by_name = {n.output[0]: a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute
                       if a.name == "value"}
    tensors_by_name.update({i.name: i for i in graph.initializer})

    class _Values(dict):  # a scale or zero point read when asked for (external data through the strict reader)
        def get(self, name, default=None):
            tensor = tensors_by_name.get(name)
            if tensor is None:
                return default
            if onnxexternal.is_external(tensor):
                onnxexternal.inline(tensor, Path(model_path).parent)
            return numpy_helper.to_array(tensor)

    values = _Values()
    tensors: dict = {}
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) >= 2:
            key = node.input[0] if node.op_type == "QuantizeLinear" else node.output[0]
            if key in tensors:
                continue
            scale = values.get(node.input[1])
            zero = values.get(node.input[2]) if len(node.input) > 2 else None
            if scale is None:
                continue
            axis = next((a.i for a in node.attribute if a.name == "axis"), None)
            tensors[key] = {"node": node.name, "scale": np.asarray(scale, dtype=np.float64).ravel().tolist(),
                            "zero_point": [] if zero is None else np.asarray(zero).astype(np.int64).ravel().tolist(),
                            "dtype": str(zero.dtype) if zero is not None else "int8",
                            "axis": axis if np.asarray(scale).size > 1 else None}
        elif node.op_type.startswith("Ascend") and "Quant" in node.op_type:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            tensors[node.input[0] if node.input else node.name] = {
                "node": node.name, "op_type": node.op_type,
                **{k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()
                   if k in ("scale", "offset", "deq_scale", "dst_type", "sqrt_mode")}}
    return {"format": SCALES_FORMAT, "tensors": tensors}


def write_outputs(out: Path, *, fake_quant: Path, deploy: Path, original: Path, settings, config_text: str,
                  calibration: dict, layers: list[tuple[str, str]], record: dict) -> tuple[dict, dict]:
    """Lay out the stage's output directory from the two models; returns (metrics, record)."""
    import shutil

    from ascendpipe.fsutil import write_json_atomic

    out = Path(out)
    model = out / MODEL
    if Path(fake_quant).resolve() != model.resolve():
        shutil.copyfile(fake_quant, model)
    (out / DEPLOY_DIR).mkdir(exist_ok=True)
    copy_model(Path(deploy), out / DEPLOY_DIR / MODEL)
    mapping = annotate_for_dump(model, original)
    quantized = set(mapping["quantized_layers"])
    quantized_layers = [n for n, _ in layers if n in quantized]
    skipped = [n for n, _ in layers if n not in quantized]
    reasons = {}
    for name, op_type in layers:
        if name in quantized:
            continue
        if name in settings.skip_layers:
            reasons[name] = "skip_layers"
        elif op_type in settings.skip_layer_types:
            reasons[name] = f"skip_layer_types ({op_type})"
        else:
            reasons[name] = "not quantized by the tool"
    (out / CONFIG).write_text(config_text)
    write_json_atomic(out / SCALES, scales(model))
    full = {"format": RECORD_FORMAT, **record, "settings": settings.record(), "calibration": calibration,
            "layers": [n for n, _ in layers], "quantized_layers": quantized_layers, "skipped_layers": skipped,
            "skip_reasons": reasons,
            "qdq_nodes": mapping["qdq_nodes"], "fake_quant_model": MODEL, "deploy_model": f"{DEPLOY_DIR}/{MODEL}",
            "scales_file": SCALES, "config_file": CONFIG}
    write_json_atomic(out / RECORD, full)
    metrics = {"quantized_layers": len(quantized_layers), "skipped_layers": len(skipped),
               "calibration_samples": calibration["samples"]}
    return metrics, full
