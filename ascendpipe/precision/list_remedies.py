"""keep_dtype, modify_mixlist and customize_dtypes applied to a model's nodes, on top of the SoC's lists.

Pure: the caller gives each node's name, ONNX op type and the two GE types ATC gives it
(``ge_types.parse_type`` / ``ge_type``); the result is the policy's ``Lists``, the customized nodes and the
lines to warn. What each remedy names, as ATC matches it (hicann/ge at ffdcbc9f):

- ``keep_dtype``: op names (also a fused op's original names) and ``OpType::T`` with T the GE type at
  *parse* time (``compiler/api/aclgrph/attr_options/keep_dtype_option.cc`` L96-110: ReduceMean, not
  ReduceMeanD). A line that matches nothing is a warning (``KeepDtypeReportError`` L31-66, ``GELOGW``)
  unless it is an ``OpType::`` not in PascalCase (L49-55: E10003, atc stops).
- ``modify_mixlist``: GE *kernel* types (``op_dtype_selection_strategy_allow_mix_precision_base.cc``
  L82-91); GE's semantics in ``lists.apply_mixlist``.
- ``customize_dtypes``: op names, else the GE kernel type (``op_format_dtype_judge.cc`` L617-618: the name
  first); an op that a graph fusion removed keeps no setting (``--customize_dtypes.md`` L30).

An ONNX-only name (Softmax, Div, Conv, MatMul's ONNX spelling is a GE type too...) in ``OpType::`` or a
mixlist stands for the GE type ATC gives it, and the files written for atc carry the GE name
(``translated`` says which): the same file then means the same thing on both backends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ascendpipe.errors import Location, UserError, few
from ascendpipe.precision import ge_types, remedy
from ascendpipe.precision.lists import SocLists, apply_mixlist
from ascendpipe.precision.policy import Lists

_PASCAL = re.compile(r"^[A-Z][a-zA-Z0-9]*$")  # keep_dtype_option.cc L24
FLOAT_DTYPES = {"float16": "float16", "float": "float32", "float32": "float32", "bfloat16": "bfloat16"}


@dataclass(frozen=True)
class NodeTypes:
    name: str
    op_type: str  # ONNX
    parse_type: str  # GE type at parse time
    kernel_type: str  # GE kernel type
    fused_into: str = ""  # the node of the emulated graph a fold merged it into ("" = itself)


@dataclass
class Resolved:
    lists: Lists
    custom: dict[str, tuple[str | None, str | None, str]] = field(default_factory=dict)  # node -> (in, out, why)
    warnings: list[str] = field(default_factory=list)
    translated: dict[str, str] = field(default_factory=dict)  # name as given -> GE name written for atc
    mixlist_written: dict | None = None
    keep_written: list[str] = field(default_factory=list)
    custom_written: list = field(default_factory=list)


def _ge_name(name: str, lists: SocLists, kernel: bool) -> str:
    """The GE type a remedy's type name stands for: itself when it is a GE type, else the GE type ATC gives
    the ONNX op of that name (Softmax -> SoftmaxV2)."""
    if lists.is_ge_type(name):
        return name
    return ge_types.ge_type(name) if kernel else ge_types.parse_type(name)


def resolve(soc_lists: SocLists, nodes: list[NodeTypes], keep: list[str], mixlist: dict | None,
            custom: list, *, cube_fp32_input: bool = False, bf16: bool | None = None,
            parsed: list[NodeTypes] | None = None) -> Resolved:
    """``nodes``: every node a remedy may name (the emulated graph's and the originals a fold merged);
    ``parsed``: the graph as ATC's parser gives it, before any fusion (keep_dtype's ``OpType::`` is matched
    there; a node a graph fusion made, such as a fused LayerNorm, is no parse-time node). Default: nodes."""
    parsed = nodes if parsed is None else parsed
    warnings: list[str] = []
    translated: dict[str, str] = {}

    def mix_name(name: str) -> str:
        ge = _ge_name(name, soc_lists, kernel=True)
        if ge != name:
            translated[name] = ge
        return ge

    white, black, where = apply_mixlist(soc_lists, mixlist, mix_name)
    kernels = {n.kernel_type for n in nodes}
    for name in sorted({n for edits in (mixlist or {}).values() for names in edits.values() for n in names}):
        ge = mix_name(name)
        if ge not in kernels:
            ran_as = sorted({n.kernel_type for n in nodes if n.op_type == name or n.parse_type == ge})
            hint = f": ATC runs this model's {name} nodes as {', '.join(ran_as)}" if ran_as else ""
            warnings.append(f"warning: modify_mixlist names '{name}', which is no kernel type of this model{hint}")
    mixlist_written = None
    if mixlist:
        mixlist_written = {key: {action: [translated.get(n, n) for n in names] for action, names in edits.items()}
                           for key, edits in mixlist.items()}

    keep_names, keep_types = remedy.split_keep_entries(keep)
    by_name = {n.name: n for n in nodes}
    missing = [name for name in keep_names if name not in by_name]
    if missing:
        raise UserError(not_in_model("keep_dtype", missing, set(by_name)), Location(field="keep_dtype"))
    onnx_keep: set[str] = set()
    keep_written = [e for e in keep if not e.startswith(remedy.KEEP_TYPE_PREFIX)]
    for entry in keep_types:
        ge = _ge_name(entry, soc_lists, kernel=False)
        if ge != entry:
            translated[f"OpType::{entry}"] = f"OpType::{ge}"
        keep_written.append(f"OpType::{ge}")
        matched = {n.op_type for n in parsed if n.parse_type == ge}
        if matched:
            onnx_keep |= matched
            continue
        if not _PASCAL.match(ge):
            raise UserError(f"keep_dtype 'OpType::{entry}' matches no op and is not in PascalCase: atc stops here "
                            "(E10003, keep_dtype_option.cc L49-55)", Location(field="keep_dtype"))
        as_kernel = sorted({n.parse_type for n in parsed if n.kernel_type == ge})
        hint = (f" (keep_dtype is matched before ATC's graph fusions: write OpType::{as_kernel[0]})" if as_kernel
                else f"; op types here: {few(sorted({n.parse_type for n in parsed}), 12)}")
        warnings.append(f"warning: keep_dtype 'OpType::{entry}' matches no op of this model, as atc warns: it keeps "
                        f"nothing{hint}")
    lists = Lists(frozenset(white), frozenset(black), frozenset(keep_names), frozenset(onnx_keep),
                  {ge: str(at) for ge, at in where.items()})
    resolved = Resolved(lists, warnings=warnings, translated=translated, mixlist_written=mixlist_written,
                        keep_written=keep_written)
    _customize(resolved, soc_lists, nodes, custom, cube_fp32_input, bf16)
    lists.custom = resolved.custom
    return resolved


def _customize(resolved: Resolved, soc_lists: SocLists, nodes: list[NodeTypes], custom: list,
               cube_fp32_input: bool, bf16: bool | None) -> None:
    by_name = {n.name: n for n in nodes}
    named, typed = {}, {}
    for entry in custom:
        table = typed if entry.is_type else named
        if entry.target in table:  # GE keeps the first line (op_cust_dtypes_config_parser.cc L238-257)
            resolved.warnings.append(f"warning: customize_dtypes line {entry.line} repeats '{entry.target}': atc keeps "
                                     f"line {table[entry.target].line}")
            continue
        table[entry.target] = entry
    written = []
    for entry in custom:
        if entry.is_type:
            ge = _ge_name(entry.target, soc_lists, kernel=True)
            if ge != entry.target:
                resolved.translated[f"OpType::{entry.target}"] = f"OpType::{ge}"
            written.append(remedy.CustomDtype(ge, True, entry.inputs, entry.outputs, entry.line))
        else:
            written.append(entry)
    resolved.custom_written = written
    missing = [e.target for e in named.values() if e.target not in by_name]
    if missing:
        raise UserError(not_in_model("customize_dtypes", missing, set(by_name)), Location(field="customize_dtypes"))
    typed_ge = {_ge_name(t, soc_lists, kernel=True): e for t, e in typed.items()}
    for ge, entry in typed_ge.items():
        if not any(n.kernel_type == ge for n in nodes):
            resolved.warnings.append(f"warning: customize_dtypes 'OpType::{entry.target}' matches no kernel of this "
                                     "model: it changes nothing")
    for node in nodes:
        entry = named.get(node.name) or typed_ge.get(node.kernel_type)
        if entry is None:
            continue
        if node.fused_into and node.fused_into != node.name:
            resolved.warnings.append(f"warning: customize_dtypes names '{node.name}', which ATC's graph fusion merged "
                                     f"into '{node.fused_into}': the setting does not take effect "
                                     "(--customize_dtypes.md L30)")
            continue
        resolved.custom[node.name] = _custom_decision(entry, node, cube_fp32_input, bf16)


def _custom_decision(entry, node: NodeTypes, cube_fp32_input: bool, bf16: bool | None):
    """(input dtype, output dtype, why) the emulation computes a customized node in; dtypes it cannot emulate
    (int8, mixed float dtypes among the inputs) are refused rather than guessed."""
    where = Location(field="customize_dtypes", line=entry.line or None, op=node.name)
    floats_in = {FLOAT_DTYPES.get(d, d) for d in entry.inputs if d}
    floats_out = {FLOAT_DTYPES.get(d, d) for d in entry.outputs if d}
    other = sorted((floats_in | floats_out) - set(FLOAT_DTYPES.values()))
    if other:
        raise UserError(f"customize_dtypes sets '{node.name}' to {', '.join(other)}: the emulation computes float "
                        "dtypes only (float16, float, bfloat16); --backend ascend passes it to atc", where)
    if len(floats_in) > 1 or len(floats_out) > 1:
        raise UserError(f"customize_dtypes gives '{node.name}' different float dtypes per input or output "
                        f"({entry.text()}): not emulated (one dtype for its inputs, one for its outputs)", where)
    if "bfloat16" in floats_in | floats_out and bf16 is False:
        raise UserError(f"customize_dtypes sets '{node.name}' to bfloat16, which this SoC has no kernel for: atc "
                        "fails to compile (--customize_dtypes.md, constraint 2)", where)
    read = next(iter(floats_in), None)
    out = next(iter(floats_out), None)
    if read == "float32" and node.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm") and not cube_fp32_input:
        raise UserError(f"customize_dtypes gives cube op '{node.name}' float inputs, which this SoC's cube unit "
                        "does not read (fp16/int8 only): atc fails to compile (--customize_dtypes.md, constraint 2)",
                        where)
    source = f"OpType::{entry.target}" if entry.is_type else f"name '{entry.target}'"
    return read, out, f"customize_dtypes: {source} (line {entry.line})"


def written(settings, soc_lists: SocLists | None = None) -> dict:
    """The keep_dtype, modify_mixlist and customize_dtypes entries as written for atc: ONNX-only type names
    given as the GE type ATC gives them (needs no model; the SoC's lists say what is a GE type)."""
    keep, mixlist, custom = list(settings.keep_dtype), settings.modify_mixlist, list(settings.customize_dtypes)
    typed = any(e.startswith(remedy.KEEP_TYPE_PREFIX) for e in keep) or mixlist or any(e.is_type for e in custom)
    if not typed:
        return {"keep_dtype": keep, "modify_mixlist": mixlist, "customize_dtypes": custom}
    if soc_lists is None:
        from ascendpipe.precision.lists import for_soc

        soc_lists = for_soc(settings.soc_version)
    keep = [f"OpType::{_ge_name(e[len(remedy.KEEP_TYPE_PREFIX):], soc_lists, kernel=False)}"
            if e.startswith(remedy.KEEP_TYPE_PREFIX) else e for e in keep]
    if mixlist:
        mixlist = {key: {action: [_ge_name(n, soc_lists, kernel=True) for n in names]
                         for action, names in edits.items()} for key, edits in mixlist.items()}
    custom = [remedy.CustomDtype(_ge_name(e.target, soc_lists, kernel=True), True, e.inputs, e.outputs, e.line)
              if e.is_type else e for e in custom]
    return {"keep_dtype": keep, "modify_mixlist": mixlist, "customize_dtypes": custom}


def not_in_model(field_name: str, missing: list[str], names: set[str]) -> str:
    """Names a remedy gives that the model lacks, each with its close names."""
    import difflib

    ordered = sorted(names)
    parts = []
    for name in missing[:5]:  # the first few named, each with its close names; the rest counted (errors.few)
        close = difflib.get_close_matches(name, ordered, n=3, cutoff=0.6)
        parts.append(f"'{name}'" + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""))
    parts += [repr(name) for name in missing[5:]]
    shown = ", ".join(ordered[:12]) + (", ..." if len(ordered) > 12 else "")
    which = "op" if len(missing) == 1 else "ops"
    return f"{field_name} names {which} {few(parts)} not in the model; its ops: {shown}"
