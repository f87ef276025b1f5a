"""The one reader of an ONNX graph's input specs (name, shape, dtype), without a session.

Shared by both backends, compare and the source stage. onnx is imported by the caller that loaded
the model, or here only when a path is given.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from ascendpipe.inputs import InputSpec


def dim_of(dim):
    """A static dim as an int (0 included: an empty KV cache pinned by ``--input-shape``); a dynamic
    one as its name, or None when it has none."""
    if dim.HasField("dim_value") and dim.dim_value >= 0:
        return dim.dim_value
    return dim.dim_param or None


def dtype_name(elem_type: int) -> str:
    """numpy dtype name of an ONNX element type; float32 for an unset or unknown one."""
    import numpy as np
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return "float32"


def value_type_text(value_type) -> str:
    """An ONNX type as onnxruntime spells it: tensor(float), seq(tensor(float)), optional(...), map(...)."""
    from onnx import helper

    kind = value_type.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({helper.tensor_dtype_to_string(value_type.tensor_type.elem_type).split('.')[-1].lower()})"
    if kind == "sequence_type":
        return f"seq({value_type_text(value_type.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({value_type_text(value_type.optional_type.elem_type)})"
    if kind == "map_type":
        key = helper.tensor_dtype_to_string(value_type.map_type.key_type).split(".")[-1].lower()
        return f"map({key},{value_type_text(value_type.map_type.value_type)})"
    return kind or "unknown"


def graph_cycle(graph) -> list[str] | None:
    """Node names of a cycle in ``graph`` (its top level; a node's inputs made by nodes that in turn need
    its outputs), or None when it is acyclic: Kahn's sort, then a walk among the nodes left."""
    producer = {}
    for index, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producer[out] = index
    needs = [{producer[i] for i in node.input if i in producer} for node in graph.node]
    users: dict[int, list[int]] = {}
    for index, deps in enumerate(needs):
        for dep in deps:
            users.setdefault(dep, []).append(index)
    waiting = [len(deps) for deps in needs]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    while ready:
        index = ready.pop()
        for user in users.get(index, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    left = {i for i, n in enumerate(waiting) if n > 0}
    if not left:
        return None
    path, seen, current = [], {}, min(left)
    while current not in seen:  # every node left needs another node left: walking back must close a loop
        seen[current] = len(path)
        path.append(current)
        current = min(d for d in needs[current] if d in left)
    loop = path[seen[current]:][::-1]
    name = lambda i: graph.node[i].name or f"{graph.node[i].op_type}#{i}"
    return [name(i) for i in loop + loop[:1]]


def graph_input_specs(graph) -> list[InputSpec]:
    """The graph's real inputs (initializers listed as inputs, as older exporters do, are not)."""
    from ascendpipe.inputs import InputSpec

    initializers = {i.name for i in graph.initializer}
    specs = []
    for value in graph.input:
        if value.name in initializers:
            continue
        if value.type.WhichOneof("value") not in ("tensor_type", None):
            # a sequence, optional or map input: its type as onnxruntime spells it, which
            # inputs.spec_dtype refuses in one line (it was fed a random tensor and onnxruntime's error)
            specs.append(InputSpec(value.name, (), value_type_text(value.type)))
            continue
        tensor = value.type.tensor_type
        specs.append(InputSpec(value.name, tuple(dim_of(d) for d in tensor.shape.dim), dtype_name(tensor.elem_type)))
    return specs


def load_model(path, *, external: bool = False, label: str | None = None):
    """The ONNX ModelProto of the file ``path``; a file protobuf cannot parse as a model (not ONNX,
    cut short) is one UserError line naming it (``label``, default the path), not a DecodeError."""
    import onnx

    from ascendpipe.errors import Location, UserError

    where = Location(file=label or str(path))
    try:
        return onnx.load(str(path), load_external_data=external)
    except IsADirectoryError:
        raise UserError("is a folder, not an ONNX model file", where) from None
    except OSError as exc:
        raise UserError(f"cannot read the model: {exc.strerror or exc}", where) from None
    except Exception as exc:  # google.protobuf.message.DecodeError (protobuf is not imported here)
        if type(exc).__name__ != "DecodeError":
            raise
        raise UserError("not an ONNX model (protobuf cannot parse it as a ModelProto); give the .onnx file "
                        "the framework exported", where) from None


def load_graph(path, *, label: str | None = None):
    """The ModelProto of the file ``path`` with each weight left in the file (an ONNX external-data
    reference, never read): what reading the graph's nodes, inputs and outputs needs. A 430-node
    detector's 11 MB: 46 ms of parsing weights, against a few ms. A file whose weights are external
    already, or not protobuf as ONNX writes it, is loaded as ``load_model`` loads it (and judged by it)."""
    import mmap

    from ascendpipe.onnxwire import weights_by_reference

    light = None
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            light = weights_by_reference(view, os.path.basename(str(path)))
    except (OSError, ValueError):  # a folder, an empty file, a file system that cannot map it
        light = None
    if light is None:
        return load_model(path, label=label)
    import onnx

    return onnx.load_model_from_string(light)


def read_input_specs(model: Path) -> list[InputSpec]:
    """Input specs of the ONNX file ``model`` (no weight is read)."""
    return graph_input_specs(load_graph(model).graph)


def subgraphs(node):
    """(attribute name, body) of an If/Loop/Scan node."""
    for attr in node.attribute:
        if attr.g.node or attr.g.output:
            yield attr.name, attr.g
        for index, sub in enumerate(attr.graphs):
            yield f"{attr.name}{index}", sub


def name_nodes(graph, prefix: str = "", seen: set[str] | None = None) -> None:
    """Name every node, unique across the main graph and every body: an unnamed node becomes
    ``<OpType>_<index>`` (a body's prefixed with its node and attribute), a duplicate gets a ``_N``
    suffix. convert names its models so (plans, keep_dtype, dumps and the rounding's internal names
    key on them), and a dump of the unconverted model names its ops the same way, so both sides of
    a compare, and the golden's op graph, use one name per op."""
    seen = set() if seen is None else seen
    for index, node in enumerate(graph.node):
        if not node.name:
            node.name = f"{prefix}{node.op_type}_{index}"
        if node.name in seen:
            suffix = 1
            while f"{node.name}_{suffix}" in seen:
                suffix += 1
            node.name = f"{node.name}_{suffix}"
        seen.add(node.name)
        for attr_name, sub in subgraphs(node):
            name_nodes(sub, f"{node.name}/{attr_name}/", seen)


def graph_summary(graph) -> dict:
    """Graph outputs and op edges: {"outputs", "output_ops", "producers" (op -> the ops it reads),
    "output_index" (tensor -> its position among its op's outputs)}.

    Stored in a dump's index so a dump read without its model still knows which rows are outputs
    and which ops feed which (compare's ordering and advice)."""
    producer_of = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            producer_of[out] = node.name or f"node_{i}"
    producers = {}
    for i, node in enumerate(graph.node):
        producers[node.name or f"node_{i}"] = sorted({producer_of[x] for x in node.input if x in producer_of})
    outputs = [o.name for o in graph.output]
    # each tensor's position among its op's outputs (msaccucmp's TensorIndex is op:output:<it>)
    output_index = {out: k for node in graph.node for k, out in enumerate(node.output) if out}
    return {"outputs": outputs, "output_ops": [producer_of[o] for o in outputs if o in producer_of],
            "producers": producers, "output_index": output_index}
