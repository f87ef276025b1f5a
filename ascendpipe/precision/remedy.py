"""Remedy files in the exact formats ATC reads: keep_dtype list, fusion switch, modify_mixlist, AIPP.

Readers take the file path for error locations (file:line); parsers on text are pure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascendpipe.errors import Location, UserError

KEEP_TYPE_PREFIX = "OpType::"
MIXLIST_KEYS = ("black-list", "white-list", "gray-list")
MIXLIST_ACTIONS = ("to-remove", "to-add")


def read_text(path: Path, field: str) -> str:
    return _read(path, field)


def _read(path: Path, field: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise UserError(f"cannot read {field} file: {exc.strerror}", Location(file=str(path), field=field)) from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{field}: not a text file (byte {exc.start} is not {exc.encoding} text)",
                        Location(file=str(path), field=field)) from None


# --- keep_dtype: one op name or OpType::TypeName per line --------------------------------------

def parse_keep_dtype(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def read_keep_dtype(path: Path) -> list[str]:
    return parse_keep_dtype(_read(path, "keep_dtype"))


def format_keep_dtype(entries: list[str]) -> str:
    return "".join(f"{entry}\n" for entry in entries)


def split_keep_entries(entries: list[str]) -> tuple[list[str], list[str]]:
    """(op names, op types) from keep_dtype entries."""
    names = [e for e in entries if not e.startswith(KEEP_TYPE_PREFIX)]
    types = [e[len(KEEP_TYPE_PREFIX):] for e in entries if e.startswith(KEEP_TYPE_PREFIX)]
    return names, types


# --- customize_dtypes: 'Name::InputDtype:a,b,OutputDtype:c' / 'OpType::T:InputDtype:...' ------------
# GE's parser, compiler/engines/nn_engine/utils/common/config_parser/op_cust_dtypes_config_parser.cc (hicann/ge
# ffdcbc9f): a line starting 'OpType::' names a GE op type (L111-114); the name is what precedes the first ':'
# (L146-155); 'InputDtype' must come before 'OutputDtype' and one of them must be there (L157-184); each dtype is
# upper-cased, prefixed 'DT_' and looked up in GE's serial names (L223-236, graph_metadef/base/utils/
# type_utils_inner.cc L80-126); an empty entry leaves that input or output as it is (L193-196); a repeated name
# or type keeps its first line (L238-257); a line is read into 1024 bytes (L24, L108: a longer one ends the read).

CUSTOM_DTYPES = ("float", "float16", "int8", "int16", "uint16", "uint8", "int32", "int64", "uint32", "uint64",
                 "bool", "double", "dual", "dual_sub_int8", "dual_sub_uint8", "complex32", "complex64", "complex128",
                 "qint8", "qint16", "qint32", "quint8", "quint16", "resource", "string_ref", "string", "float32",
                 "variant", "bfloat16", "int4", "uint1", "int2", "uint2", "hifloat8", "float8_e5m2", "float8_e4m3fn",
                 "float8_e8m0", "float6_e3m2", "float6_e2m3", "float4_e2m1", "float4_e1m2", "hifloat4")
CUSTOM_LINE_MAX = 1023  # std::getline into a 1024-byte buffer


@dataclass(frozen=True)
class CustomDtype:
    """One customize_dtypes line: an op name or (``is_type``) a GE op type, and the dtype of each input and
    output it sets (None: left as it is). Dtypes are GE's names, lower case ('float' and 'float32' alike)."""

    target: str
    is_type: bool
    inputs: tuple[str | None, ...]
    outputs: tuple[str | None, ...]
    line: int = 0

    def text(self) -> str:
        """The line in ATC's format."""
        head = f"OpType::{self.target}:" if self.is_type else f"{self.target}::"
        parts = []
        if self.inputs:
            parts.append("InputDtype:" + ",".join(d or "" for d in self.inputs))
        if self.outputs:
            parts.append("OutputDtype:" + ",".join(d or "" for d in self.outputs))
        return head + ",".join(parts)


def _custom_list(text: str, where: Location) -> tuple[str | None, ...]:
    values = text.split(",") if text else []
    if values and values[-1].strip() == "" and len(values) > 1:  # the ',' before OutputDtype
        values = values[:-1]
    out = []
    for value in values:
        value = value.strip()
        if value and value.lower() not in CUSTOM_DTYPES:
            raise UserError(f"customize_dtypes: '{value}' is not a dtype atc knows (GE's names: float16, float, "
                            "bfloat16, int8, ...; 'fp16' and 'bf16' are not among them)", where)
        out.append(value.lower() or None)
    return tuple(out)


def parse_customize_dtypes(text: str, file: str = "<customize_dtypes>") -> list[CustomDtype]:
    """Every line of a customize_dtypes file, checked as atc's parser checks it. Blank lines and '#' comments
    are skipped here (atc refuses them; the file ascendpipe writes for atc has none)."""
    entries: list[CustomDtype] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        where = Location(file=file, line=number, field="customize_dtypes")
        if len(raw.encode()) > CUSTOM_LINE_MAX:
            raise UserError(f"customize_dtypes line is {len(raw.encode())} bytes: atc reads at most {CUSTOM_LINE_MAX} "
                            "per line and stops reading the file there; split the entries", where)
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        is_type = line.startswith("OpType::")
        body = line[len("OpType::"):].strip() if is_type else line
        name, sep, _ = body.partition(":")
        if not sep or not name.strip():
            raise UserError(f"customize_dtypes line '{line}': expected 'OpName::InputDtype:...,OutputDtype:...' or "
                            "'OpType::Type:InputDtype:...,OutputDtype:...'", where)
        at_in, at_out = body.find("InputDtype"), body.find("OutputDtype")
        if at_in < 0 and at_out < 0:
            raise UserError(f"customize_dtypes line '{line}' has neither InputDtype nor OutputDtype", where)
        if at_in >= 0 and at_out >= 0 and at_in > at_out:
            raise UserError(f"customize_dtypes line '{line}': InputDtype must come before OutputDtype (as atc "
                            "reads it)", where)
        ins = body[at_in + len("InputDtype:"):at_out if at_out >= 0 else None] if at_in >= 0 else ""
        outs = body[at_out + len("OutputDtype:"):] if at_out >= 0 else ""
        entries.append(CustomDtype(name.strip(), is_type, _custom_list(ins, where), _custom_list(outs, where), number))
    return entries


def read_customize_dtypes(path: Path) -> list[CustomDtype]:
    return parse_customize_dtypes(_read(path, "customize_dtypes"), str(path))


def format_customize_dtypes(entries: list[CustomDtype]) -> str:
    return "".join(f"{entry.text()}\n" for entry in entries)


# --- fusion switch: 'Rule:off' lines, or {"Switch": {"GraphFusion": {...}, "UBFusion": {...}}} ----

def _switch_value(value: Any, where: Location, rule: str) -> str:
    text = str(value).strip().lower()
    if text not in ("on", "off"):
        raise UserError(f"fusion rule '{rule}' must be 'on' or 'off', not '{value}'", where)
    return text


def parse_fusion_switch(text: str, file: str = "<fusion_switch_file>") -> dict[str, str]:
    """Rule -> 'on'/'off' from either documented format (GraphFusion and UBFusion are merged)."""
    if text.lstrip().startswith("{"):
        return _parse_fusion_json(text, file)
    switches: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = Location(file=file, line=number)
        rule, sep, value = line.partition(":")
        if not sep or not rule.strip():
            raise UserError(f"expected 'RuleName:on' or 'RuleName:off', got '{line}'", where)
        switches[rule.strip()] = _switch_value(value, where, rule.strip())
    return switches


def _parse_fusion_json(text: str, file: str) -> dict[str, str]:
    from ascendpipe.userfile import parse_json

    data = parse_json(text, file, "fusion switch file")  # malformed or nested past reading: one located line
    where = Location(file=file)
    switch = data.get("Switch") if isinstance(data, dict) else None
    if not isinstance(switch, dict):
        raise UserError('expected {"Switch": {"GraphFusion": {...}, "UBFusion": {...}}}', where)
    switches: dict[str, str] = {}
    for section, rules in switch.items():
        if section not in ("GraphFusion", "UBFusion") or not isinstance(rules, dict):
            raise UserError(f"unknown fusion section '{section}'; expected GraphFusion or UBFusion (objects)", where)
        for rule, value in rules.items():
            switches[rule] = _switch_value(value, where, rule)
    return switches


def read_fusion_switch(path: Path) -> dict[str, str]:
    return parse_fusion_switch(_read(path, "fusion_switch_file"), str(path))


def format_fusion_switch(switches: dict[str, str]) -> str:
    """The JSON format (it is the one that also carries ALL), each pass in its section (graph or UB
    fusion, from the ATC pass catalogue; names it does not know go under GraphFusion; ALL in both)."""
    from ascendpipe.precision.atc_passes import GRAPH, UB, section_of

    sections: dict[str, dict[str, str]] = {GRAPH: {}, UB: {}}
    for rule, value in switches.items():
        for section in ((GRAPH, UB) if rule == "ALL" else (section_of(rule),)):
            sections[section][rule] = value
    return json.dumps({"Switch": sections}, indent=2) + "\n"


# --- modify_mixlist JSON ----------------------------------------------------------------------

def parse_mixlist(text: str, file: str = "<modify_mixlist>") -> dict[str, dict[str, list[str]]]:
    from ascendpipe.userfile import parse_json

    return validate_mixlist(parse_json(text, file, "modify_mixlist file"), file)


def validate_mixlist(data: Any, file: str = "<modify_mixlist>") -> dict[str, dict[str, list[str]]]:
    where = Location(file=file, field="modify_mixlist")
    if not isinstance(data, dict):
        raise UserError('expected {"black-list": {"to-add": [...], "to-remove": [...]}, ...}', where)
    result: dict[str, dict[str, list[str]]] = {}
    for key, edits in data.items():
        if key not in MIXLIST_KEYS:
            raise UserError(f"unknown list '{key}'; expected one of {', '.join(MIXLIST_KEYS)}", where)
        if not isinstance(edits, dict):
            raise UserError(f"'{key}' must be an object with to-add / to-remove lists", where)
        result[key] = {}
        for action, types in edits.items():
            if action not in MIXLIST_ACTIONS:
                raise UserError(f"unknown action '{key}.{action}'; expected to-add or to-remove", where)
            if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
                raise UserError(f"'{key}.{action}' must be a list of op type names", where)
            result[key][action] = list(types)
    _check_mixlist_edits(result, where)
    return result


# The edits GE accepts for one op type (modify_mixlist_config_parser.cc L46-60, kPrecisionReduceUpdateTemplate;
# VerifyMixlist L233-248 refuses any other mix: "Operation ... for op X is invalid")
_MIXLIST_ALLOWED = frozenset(frozenset(edits) for edits in (
    {("black-list", "to-remove")}, {("white-list", "to-remove")}, {("gray-list", "to-add")},
    {("gray-list", "to-add"), ("black-list", "to-remove")}, {("gray-list", "to-add"), ("white-list", "to-remove")},
    {("white-list", "to-add")}, {("white-list", "to-add"), ("gray-list", "to-remove")},
    {("white-list", "to-add"), ("black-list", "to-remove")},
    {("black-list", "to-add")}, {("black-list", "to-add"), ("gray-list", "to-remove")},
    {("black-list", "to-add"), ("white-list", "to-remove")},
))


def _check_mixlist_edits(mixlist: dict[str, dict[str, list[str]]], where: Location) -> None:
    """An op type's edits must be one of the combinations GE accepts (adding it to two lists, or removing it
    from the gray list alone, is refused by atc)."""
    per_op: dict[str, set[tuple[str, str]]] = {}
    for key, edits in mixlist.items():
        for action, names in edits.items():
            for name in names:
                per_op.setdefault(name, set()).add((key, action))
    for name, edits in per_op.items():
        if frozenset(edits) not in _MIXLIST_ALLOWED:
            said = ", ".join(f"{action} {key}" for key, action in sorted(edits))
            raise UserError(f"modify_mixlist: {said} for op type '{name}' is a combination atc refuses "
                            "(GE modify_mixlist_config_parser.cc VerifyMixlist): put an op type in one list, "
                            "optionally removing it from the list it is in", where)


def read_mixlist(path: Path) -> dict[str, dict[str, list[str]]]:
    return parse_mixlist(_read(path, "modify_mixlist"), str(path))


def format_mixlist(mixlist: dict) -> str:
    return json.dumps(mixlist, indent=2) + "\n"


# --- AIPP config: protobuf text 'aipp_op { key: value ... }' ------------------------------------

_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|([{}])|(:)|("(?:[^"\\]|\\.)*")|([^\s{}:#"]+))')


def _tokens(text: str, file: str):
    line, pos = 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            if text[pos:].strip() == "":
                return
            raise UserError(f"unexpected character '{text[pos]}'", Location(file=file, line=line))
        line += text.count("\n", pos, match.start(0) + len(match.group(0)) - len(match.group(0).lstrip()))
        start_line = line
        line += match.group(0).lstrip().count("\n")
        pos = match.end()
        if match.group(1) is None and match.group(0).strip():
            yield match.group(0).strip(), start_line


def _scalar(token: str) -> Any:
    if token.startswith('"'):
        return token[1:-1]
    if token in ("true", "false"):
        return token == "true"
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return token  # an enum name such as static or RGB888_U8


def parse_aipp(text: str, file: str = "<insert_op_conf>") -> list[dict[str, Any]]:
    """Every ``aipp_op { ... }`` block as a dict; fields keep their types (int, float, bool, enum)."""
    blocks: list[dict[str, Any]] = []
    tokens = list(_tokens(text, file))
    i = 0
    while i < len(tokens):
        word, line = tokens[i]
        if word != "aipp_op" or i + 1 >= len(tokens) or tokens[i + 1][0] != "{":
            raise UserError(f"expected 'aipp_op {{', got '{word}'", Location(file=file, line=line))
        i += 2
        block: dict[str, Any] = {}
        while True:
            if i >= len(tokens):
                raise UserError("unclosed 'aipp_op {' block", Location(file=file, line=line))
            key, key_line = tokens[i]
            if key == "}":
                i += 1
                break
            if i + 2 >= len(tokens) or tokens[i + 1][0] != ":" or tokens[i + 2][0] in "{}:":
                raise UserError(f"expected 'field: value' after '{key}'", Location(file=file, line=key_line))
            block[key] = _scalar(tokens[i + 2][0])
            block.setdefault("__lines__", {})[key] = key_line
            i += 3
        blocks.append(block)
    if not blocks:
        raise UserError("no 'aipp_op { ... }' block", Location(file=file))
    return blocks


def read_aipp(path: Path) -> list[dict[str, Any]]:
    return parse_aipp(_read(path, "insert_op_conf"), str(path))


def format_aipp(blocks: list[dict[str, Any]]) -> str:
    out = []
    for block in blocks:
        out.append("aipp_op {")
        for key, value in block.items():
            if key.startswith("__"):
                continue
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            out.append(f"  {key}: {text}")
        out.append("}")
    return "\n".join(out) + "\n"
