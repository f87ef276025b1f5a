"""Ops outside ONNX's published schemas (onnxruntime's contrib ops: a transformer optimizer's Attention,
SkipLayerNormalization, FastGelu, EmbedLayerNormalization; its own ops it saves in the default domain,
SimplifiedLayerNormalization; an ONNX op the model's opset predates; any custom op).

ATC cannot convert them (``atc.unconvertible_ops``), so convert refuses them unless told to emulate
them anyway (``allow_custom_ops``): then what onnxruntime runs is run, and an op onnxruntime has no
schema for either is refused (``not_run``: nothing here runs it). Emulated, an fp16 op's outputs are
rounded only where they are
float32 tensors: onnx's shape inference knows no contrib op, so their output types come from
onnxruntime's own op schemas (EmbedLayerNormalization's ``mask_index`` is int32: a Cast pair on it
would make it float and the model would no longer load). An op with no schema here, or an output
whose type the schema leaves open and its inputs do not fix, is left unrounded and listed so.
"""

from __future__ import annotations

from ascendpipe.backends.ascend.atc import ONNX_DOMAINS, published_since
from ascendpipe.onnxgraph import subgraphs

FLOAT = "tensor(float)"
_SCHEMAS: dict | None = None
_FIRST: dict = {}  # (domain, op type) -> the first opset onnxruntime's schemas define it at


def _schemas() -> dict:
    """(domain, op type) -> onnxruntime's latest schema of it (its contrib ops; empty where this
    onnxruntime does not expose them)."""
    global _SCHEMAS
    if _SCHEMAS is None:
        _SCHEMAS = {}
        try:
            from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

            for schema in get_all_operator_schema():
                key = ("" if schema.domain == "ai.onnx" else schema.domain, schema.name)
                if key not in _SCHEMAS or schema.since_version > _SCHEMAS[key].since_version:
                    _SCHEMAS[key] = schema
                _FIRST[key] = min(_FIRST.get(key, schema.since_version), schema.since_version)
        except (ImportError, AttributeError, RuntimeError):
            pass
    return _SCHEMAS


def runs(op_type: str, domain: str, opset: int | None = None) -> bool:
    """Whether this onnxruntime has a schema for the op (at the model's opset of its domain, if given)."""
    key = ("" if domain in ONNX_DOMAINS else domain, op_type)
    if key not in _schemas():
        return False
    return opset is None or _FIRST.get(key, 0) <= opset


def not_run(ops: list[dict], opsets: dict[str, int] | None = None) -> list[dict]:
    """The ops (``atc.unconvertible_ops``' entries) this onnxruntime has no schema for either."""
    return [op for op in ops
            if not runs(op["op_type"], op["domain"], (opsets or {}).get("" if op["domain"] in ONNX_DOMAINS
                                                                        else op["domain"]))]


def not_run_error(ops: list[dict]):
    """One line naming each op neither ONNX's schemas nor onnxruntime's define."""
    from ascendpipe.errors import Location, UserError
    from ascendpipe.versions import package_version

    groups: dict[str, list[str]] = {}
    for op in ops:
        groups.setdefault(f"{op['domain'] + '.' if op['domain'] else ''}{op['op_type']}", []).append(op["op_name"])
    parts = [f"{kind} at {', '.join(repr(n) for n in names[:3])}"
             + (f" and {len(names) - 3} more" if len(names) > 3 else "") for kind, names in groups.items()]
    return UserError(f"{len(ops)} op(s) are in neither ONNX's published schemas nor onnxruntime's "
                     f"(onnxruntime {package_version('onnxruntime')}): {'; '.join(parts)}: nothing here can run "
                     "them, emulated or not; export them as standard ONNX ops (or register their kernels with "
                     "onnxruntime)", Location(op=ops[0]["op_name"], field="model"))


def output_floats(node, is_float) -> list[bool | None]:
    """For each output of ``node``: True a float32 tensor, False not, None unknown (no schema, or a
    type the schema leaves open and no input binds). ``is_float(tensor)``: True/False/None."""
    schema = _schemas().get(("" if node.domain in ONNX_DOMAINS else node.domain, node.op_type))
    if schema is None or not schema.outputs:
        return [None] * len(node.output)
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    bound: dict[str, bool] = {}
    for index, tensor in enumerate(node.input):
        if tensor and schema.inputs:
            formal = schema.inputs[min(index, len(schema.inputs) - 1)].typeStr
            known = is_float(tensor)
            if known is not None:
                bound.setdefault(formal, known)
    found = []
    for index, _ in enumerate(node.output):
        formal = schema.outputs[min(index, len(schema.outputs) - 1)].typeStr
        types = allowed.get(formal, {formal})
        if FLOAT not in types:
            found.append(False)
        elif types == {FLOAT}:
            found.append(True)
        else:
            found.append(bound.get(formal))
    return found


def typed_floats(model, floats: set[str]) -> tuple[set[str], dict[str, dict]]:
    """``floats`` (the emulation's float32 tensors, which guess a custom op's outputs from its inputs)
    with each custom op's outputs typed by its schema: (the corrected set, tensor -> {"op_name",
    "op_type", "domain"} of the outputs left unrounded because their type is unknown)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # noqa: BLE001 - inference is a help here: the guesses below stand without it
        inferred = model.graph
    typed = {}
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        if vi.type.tensor_type.elem_type:
            typed[vi.name] = vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    floats, unknown = set(floats), {}
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}

    def is_float(tensor: str):
        return typed[tensor] if tensor in typed else (tensor in floats)

    def published(node) -> bool:  # an ONNX op at the model's opset: onnx's shape inference types it
        if node.domain not in ONNX_DOMAINS:
            return False
        since = published_since(node.op_type)
        return since is not None and since <= opsets.get("", since)

    def walk(graph) -> None:
        for node in graph.node:
            for _, sub in subgraphs(node):
                walk(sub)
            if published(node):
                continue
            for tensor, made_float in zip(node.output, output_floats(node, is_float)):
                if not tensor:
                    continue
                typed[tensor] = bool(made_float)
                if made_float:
                    floats.add(tensor)
                else:
                    floats.discard(tensor)
                    if made_float is None:
                        unknown[tensor] = {"op_name": node.name, "op_type": node.op_type, "domain": node.domain}

    walk(model.graph)
    return floats, unknown
