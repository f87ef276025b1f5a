"""``export``: PyTorch -> ONNX with ``torch.onnx.export`` (the TorchScript exporter), then checked.

Pipeline shape::

    export:
      kind: export
      model: models/reid_net.py          # the Python file (hashed as a dep)
      checkpoint: data/model.pt          # optional: a state_dict (or a dict holding one)
      params:
        factory: build                   # function in that file returning the nn.Module
        factory_args: {num_ids: 10}      # keyword arguments for the factory
        input_names: [image]
        input_shapes: {image: [1, 1, 32, 32]}
        dynamic_axes: {image: {0: batch}}
        opset: 17
        extra_args: [true]               # non-tensor args after the dummy input: (dummy, True)

The factory is split into a file (an input field, so its content is part of the stage key) and a
function name (a param), rather than one ``file.py:fn`` string, because input fields are paths.
Modules that file imports are not hashed; list them with a ``run`` stage's deps if they change.

After exporting: ``onnx.checker`` (full check), then onnxruntime and torch run on the same seeded
dummy input (uniform [0, 1) for float inputs, zeros for integer ones); cosine and max absolute
error go into ``export.json`` and the metrics ``export_cosine`` / ``export_max_abs_error``. The
stage fails when the cosine is below ``min_cosine``. torch is an optional extra; without it the
stage fails with one line saying how to install it.
"""

from __future__ import annotations

import math
from pathlib import Path

from ascendpipe.errors import Location, StageFailed, UserError
from ascendpipe.fsutil import write_json_atomic
from ascendpipe.stages.base import StageContext, StageKind, StageResult, package_version, write_metrics

TORCH_MISSING = "the export stage needs PyTorch; install it with: pip install torch (the quickstart pins torch==2.13.0)"


def cosine_and_max_error(reference, candidate) -> tuple[float, float]:
    """Cosine similarity (float64, 1.0 for two zero tensors) and max absolute difference."""
    import numpy as np

    a = np.asarray(reference, np.float64).ravel()
    b = np.asarray(candidate, np.float64).ravel()
    if a.shape != b.shape:
        return 0.0, float("inf")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0, float("inf")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        cosine = 1.0
    elif na == 0 or nb == 0:
        cosine = 0.0
    else:
        cosine = float(a @ b / (na * nb))
    return cosine, float(np.abs(a - b).max()) if a.size else 0.0


MAX_DUMMY_BYTES = 4 << 30  # the example inputs torch.onnx.export traces with


def dummy_inputs(names: list[str], shapes: dict, dtypes: dict, seed: int) -> dict:
    """Seeded example inputs, one per name, in the given order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for name in names:
        if name not in shapes:
            raise UserError(f"params.input_shapes has no shape for input '{name}'", Location(field="input_shapes"))
        dtype = np.dtype(dtypes.get(name, "float32"))
        shape = tuple(int(d) for d in shapes[name])
        nbytes = math.prod(shape) * max(dtype.itemsize, 8)  # rng.random makes float64 first
        if nbytes > MAX_DUMMY_BYTES:
            raise UserError(f"params.input_shapes: the example input '{name}' {list(shape)} would take "
                            f"{nbytes / (1 << 30):.1f} GiB, more than {MAX_DUMMY_BYTES >> 30} GiB; give the shape of one "
                            f"small batch (dynamic_axes makes a dim free)", Location(field="input_shapes"))
        out[name] = rng.random(shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype)
    return out


def _normalise_dynamic_axes(axes: dict | None) -> dict | None:
    if not axes:
        return None
    # YAML keys may arrive as strings ("0"); torch wants ints
    return {name: ({int(k): v for k, v in spec.items()} if isinstance(spec, dict) else [int(a) for a in spec])
            for name, spec in axes.items()}


class ExportKind(StageKind):
    name = "export"
    uses_backend = False
    version = "1"
    summary = "PyTorch -> ONNX with torch.onnx.export, checked against torch with onnxruntime"
    input_fields = ("model", "checkpoint")
    required_inputs = ("model",)
    params_schema = {
        "type": "object",
        "properties": {
            "factory": {"type": "string", "default": "build", "minLength": 1},
            "factory_args": {"type": "object", "default": {}},
            "input_names": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "input_shapes": {"type": "object", "additionalProperties": {
                "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}}},
            "input_dtypes": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
            "output_names": {"type": "array", "items": {"type": "string"}},
            "dynamic_axes": {"type": "object"},
            "opset": {"type": "integer", "minimum": 7, "maximum": 23, "default": 17},
            "extra_args": {"type": "array", "default": []},
            "checkpoint_key": {"type": "string"},
            "seed": {"type": "integer", "default": 0},
            "min_cosine": {"type": "number", "default": 0.999},
        },
        "required": ["input_names", "input_shapes"],
    }

    def tool_versions(self, backend: str) -> dict[str, str]:
        return {"torch": package_version("torch"), "onnx": package_version("onnx"),
                "onnxruntime": package_version("onnxruntime")}

    def run(self, ctx: StageContext) -> StageResult:
        try:
            import torch
        except ImportError:
            raise UserError(TORCH_MISSING, Location(stage=ctx.name)) from None
        from ascendpipe.metrics.postprocess import load_user_function

        p = ctx.params
        where = Location(stage=ctx.name, field="model")
        factory = load_user_function(f"{ctx.inputs['model']}:{p['factory']}", ctx.workspace, where)
        model = factory(**p.get("factory_args", {}))
        if not isinstance(model, torch.nn.Module):
            raise UserError(f"factory '{p['factory']}' returned {type(model).__name__}, not a torch.nn.Module", where)
        if ctx.inputs.get("checkpoint"):
            _load_checkpoint(model, ctx.inputs["checkpoint"], p.get("checkpoint_key"), ctx.name)
        model.eval()
        feeds = dummy_inputs(p["input_names"], p["input_shapes"], p.get("input_dtypes", {}), p.get("seed", 0))
        args = tuple(torch.from_numpy(v) for v in feeds.values()) + tuple(p.get("extra_args", []))
        onnx_path = ctx.out_dir / "model.onnx"
        ctx.say(f"exporting {ctx.inputs['model']}:{p['factory']} with opset {p['opset']}")
        with torch.no_grad():
            expected = model(*args)
            _torch_export(torch, model, args, onnx_path, p, ctx)
        expected = [t.detach().numpy() for t in (expected if isinstance(expected, (tuple, list)) else [expected])]
        report = _check(onnx_path, feeds, expected, ctx)
        report.update({"model": str(ctx.inputs["model"]), "factory": p["factory"], "opset": p["opset"],
                       "extra_args": p.get("extra_args", []), "input_shapes": p["input_shapes"],
                       "versions": {"torch": torch.__version__, "onnx": package_version("onnx"),
                                    "onnxruntime": package_version("onnxruntime")}})
        write_json_atomic(ctx.out_dir / "export.json", report, sort_keys=True)
        metrics = {"export_cosine": report["cosine"], "export_max_abs_error": report["max_abs_error"]}
        write_metrics(ctx.out_dir, metrics)
        if report["cosine"] < p.get("min_cosine", 0.999):
            raise StageFailed(ctx.name, f"onnxruntime disagrees with torch on the exported model: cosine "
                                        f"{report['cosine']:.6f} < min_cosine {p['min_cosine']}")
        return StageResult(metrics=metrics, info={"checker": report["checker"], "outputs": report["outputs"]})


def _load_checkpoint(model, path: Path, key: str | None, stage: str) -> None:
    import torch

    where = Location(stage=stage, field="checkpoint")
    path = Path(path)
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix in (".pt", ".pth", ".ckpt"))
        if len(found) != 1:
            raise UserError(f"expected one .pt/.pth/.ckpt checkpoint in {path}, found {len(found)}", where)
        path = found[0]
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UserError(f"cannot read checkpoint {path}: {type(exc).__name__}: {str(exc).splitlines()[0]}", where) from None
    if key:
        if not isinstance(state, dict) or key not in state:
            raise UserError(f"checkpoint {path} has no key '{key}' (params.checkpoint_key)", where)
        state = state[key]
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()
        raise UserError(f"checkpoint {path} does not fit the model: {' '.join(first[:2])[:300]}", where) from None


def legacy_exporter_kwargs(export) -> dict:
    """``{"dynamo": False}`` where ``torch.onnx.export`` takes it: recent torch (2.13 here) defaults to
    the dynamo exporter, which needs ``onnxscript``; older torch has no such argument and refuses it."""
    import inspect

    try:
        params = inspect.signature(export).parameters
    except (TypeError, ValueError):
        return {}
    return {"dynamo": False} if "dynamo" in params else {}


def _torch_export(torch, model, args, onnx_path: Path, p: dict, ctx: StageContext) -> None:
    import warnings

    try:
        # the exporter's warnings (legacy exporter, constant Python branches: intended here) go to the log
        with warnings.catch_warnings(record=True) as caught, mha_fastpath_off(torch):
            warnings.simplefilter("always")
            torch.onnx.export(model, args, str(onnx_path), input_names=p["input_names"],
                              output_names=p.get("output_names"), opset_version=p["opset"],
                              dynamic_axes=_normalise_dynamic_axes(p.get("dynamic_axes")),
                              do_constant_folding=True, **legacy_exporter_kwargs(torch.onnx.export))
        for w in caught:
            ctx.say(f"torch.onnx.export: {w.category.__name__}: {str(w.message).splitlines()[0]}")
    except Exception as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StageFailed(ctx.name, f"torch.onnx.export failed: {message[:300]}" + export_hint(message)) from exc


# ops of PyTorch's fused attention fast path (nn.TransformerEncoder(Layer) and nn.MultiheadAttention in
# eval mode under no_grad), which have no ONNX form
FASTPATH_OPS = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention", "_nested_tensor_from_mask")


class mha_fastpath_off:
    """Export with PyTorch's multi-head-attention fast path off: the same math, as the ops ONNX has (the
    fast path's fused kernels have no ONNX form: the export fails and torch prints its IR graph).
    No-op on a torch without ``torch.backends.mha``."""

    def __init__(self, torch):
        self.mha = getattr(getattr(torch, "backends", None), "mha", None)

    def __enter__(self):
        self.before = None
        if self.mha is not None and hasattr(self.mha, "set_fastpath_enabled"):
            self.before = self.mha.get_fastpath_enabled()
            self.mha.set_fastpath_enabled(False)
        return self

    def __exit__(self, *exc):
        if self.before is not None:
            self.mha.set_fastpath_enabled(self.before)
        return False


def export_hint(message: str) -> str:
    """One line saying what to do about a known export failure ('' when none is known)."""
    if any(op in message for op in FASTPATH_OPS):
        return ("; this is PyTorch's attention fast path (nn.TransformerEncoder / MultiheadAttention in eval mode): "
                "call torch.backends.mha.set_fastpath_enabled(False) before exporting (torch >= 2.1 does it here), "
                "or export with the module in train() mode and dropout 0")
    return ""


def _check(onnx_path: Path, feeds: dict, expected: list, ctx: StageContext) -> dict:
    import onnx
    import onnxruntime as ort

    try:
        onnx.checker.check_model(str(onnx_path), full_check=True)
        checker = "ok"
    except Exception as exc:  # a checker failure is recorded and fails the stage below
        raise StageFailed(ctx.name, f"onnx.checker rejected the exported model: {str(exc).splitlines()[0]}") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)
    outputs = {}
    for meta, ref, val in zip(session.get_outputs(), expected, got):
        cosine, max_err = cosine_and_max_error(ref, val)
        outputs[meta.name] = {"shape": list(val.shape), "cosine": cosine, "max_abs_error": max_err}
        ctx.say(f"output {meta.name}: cosine {cosine:.8f}, max abs error {max_err:.3e}")
    return {"checker": checker, "outputs": outputs,
            "cosine": min(o["cosine"] for o in outputs.values()),
            "max_abs_error": max(o["max_abs_error"] for o in outputs.values())}

