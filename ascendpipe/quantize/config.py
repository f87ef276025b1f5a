"""Quantization settings: the stage params and AMCT's simple config file, resolved into one object.

Pure (no onnx, no I/O beyond reading the config file a caller hands in). AMCT's "simple config"
(``--calibration_config``, the ``calibration_config_onnx.proto`` message ``AMCTConfig`` written in
protobuf text format) is parsed here and written back, so the same settings drive
``onnxruntime.quantization`` on the emulation and ``amct_onnx calibration`` on the ascend backend:

    batch_num : 2
    activation_offset : true
    skip_layers : "conv_1"
    skip_layer_types : "Gemm"
    common_config : {
        arq_quantize : { channel_wise : true }
        ifmr_quantize : { search_range_start : 0.7  search_range_end : 1.3  search_step : 0.01
                          max_percentile : 0.999999  min_percentile : 0.999999 }
    }
    override_layer_configs : { layer_name : "conv_2"  calibration_config : { arq_quantize : { channel_wise : false } } }

Precedence (as AMCT documents it): ``override_layer_configs`` > ``override_layer_types`` >
``common_config``. Stage params override the file's top-level fields; ``skip_layers`` and
``skip_layer_types`` from both are joined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ascendpipe.errors import Location, UserError

# The layer types AMCT quantizes in an ONNX model (the ones the device runs as int8 cube ops).
QUANTIZABLE_TYPES = ("Conv", "ConvTranspose", "Gemm", "MatMul")
CALIBRATE_METHODS = ("minmax", "entropy", "percentile")
DEFAULT_BATCH_SIZE = 16  # with batch_num 1: the low end of AMCT's advice (16-32 representative samples)

# AMCTConfig fields: (kind, repeated). kind: 'int' | 'bool' | 'str' | 'float' | a message name
_MESSAGES: dict[str, dict[str, tuple[str, bool]]] = {
    "AMCTConfig": {
        "batch_num": ("int", False), "activation_offset": ("bool", False), "joint_quant": ("bool", False),
        "skip_layers": ("str", True), "skip_layer_types": ("str", True), "version": ("int", False),
        "do_fusion": ("bool", False), "skip_fusion_layers": ("str", True),
        "fakequant_precision_mode": ("enum", False),
        "common_config": ("CalibrationConfig", False),
        "override_layer_types": ("OverrideLayerType", True),
        "override_layer_configs": ("OverrideLayer", True),
    },
    "CalibrationConfig": {"arq_quantize": ("ARQuantize", False), "ifmr_quantize": ("FMRQuantize", False)},
    "ARQuantize": {"channel_wise": ("bool", False)},
    "FMRQuantize": {"search_range_start": ("float", False), "search_range_end": ("float", False),
                    "search_step": ("float", False), "max_percentile": ("float", False),
                    "min_percentile": ("float", False)},
    "OverrideLayerType": {"layer_type": ("str", False), "calibration_config": ("CalibrationConfig", False)},
    "OverrideLayer": {"layer_name": ("str", False), "calibration_config": ("CalibrationConfig", False)},
}
_ORDER = list(_MESSAGES["AMCTConfig"])

_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|("(?:[^"\\]|\\.)*")|([{}:])|([^\s{}:"#]+))')


@dataclass
class QuantSettings:
    """What one calibration uses, whichever backend runs it."""

    batch_num: int = 1
    batch_size: int | None = None  # samples per calibration batch (None: DEFAULT_BATCH_SIZE, or the model's fixed batch)
    activation_offset: bool = True  # asymmetric activations (with offset), AMCT's default
    skip_layers: list[str] = field(default_factory=list)
    skip_layer_types: list[str] = field(default_factory=list)
    channel_wise: bool = True  # per-channel weight scales (ARQ channel_wise), AMCT's default
    calibrate_method: str = "minmax"  # the onnxruntime backend's calibrator; AMCT uses IFMR on ascend
    ifmr: dict[str, float] = field(default_factory=dict)
    override_layer_types: list[dict] = field(default_factory=list)
    override_layer_configs: list[dict] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # other AMCTConfig fields, passed to AMCT as given

    def layer_channel_wise(self, name: str, op_type: str) -> bool:
        """channel_wise for one layer, by AMCT's precedence (layer > type > common)."""
        for entry in self.override_layer_configs:
            if entry.get("layer_name") == name:
                arq = (entry.get("calibration_config") or {}).get("arq_quantize") or {}
                if "channel_wise" in arq:
                    return bool(arq["channel_wise"])
        for entry in self.override_layer_types:
            if entry.get("layer_type") == op_type:
                arq = (entry.get("calibration_config") or {}).get("arq_quantize") or {}
                if "channel_wise" in arq:
                    return bool(arq["channel_wise"])
        return self.channel_wise

    def amct_config(self) -> dict:
        """The AMCTConfig message (as nested dicts) these settings mean."""
        common: dict = {"arq_quantize": {"channel_wise": self.channel_wise}}
        if self.ifmr:
            common["ifmr_quantize"] = dict(self.ifmr)
        config: dict = {"batch_num": self.batch_num, "activation_offset": self.activation_offset}
        if self.skip_layers:
            config["skip_layers"] = list(self.skip_layers)
        if self.skip_layer_types:
            config["skip_layer_types"] = list(self.skip_layer_types)
        config.update(self.extra)
        config["common_config"] = common
        if self.override_layer_types:
            config["override_layer_types"] = list(self.override_layer_types)
        if self.override_layer_configs:
            config["override_layer_configs"] = list(self.override_layer_configs)
        return config

    def record(self) -> dict:
        return {"batch_num": self.batch_num, "batch_size": self.batch_size, "activation_offset": self.activation_offset,
                "skip_layers": list(self.skip_layers), "skip_layer_types": list(self.skip_layer_types),
                "channel_wise": self.channel_wise, "calibrate_method": self.calibrate_method, "ifmr": dict(self.ifmr),
                "override_layer_types": self.override_layer_types, "override_layer_configs": self.override_layer_configs,
                **({"extra": self.extra} if self.extra else {})}


# --- the text format ---------------------------------------------------------------------------

def parse_simple_config(text: str, source: str = "calibration_config") -> dict:
    """AMCT's simple config (protobuf text format of ``AMCTConfig``) -> nested dicts; repeated fields are lists.
    Unknown fields and bad values are UserErrors naming the line."""
    tokens = _tokens(text, source)
    pos, message = _parse_message(tokens, 0, "AMCTConfig", source, top=True)
    return message


def _tokens(text: str, source: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise UserError(f"cannot read '{text[pos:pos + 20].strip()}'",
                            Location(file=source, line=1 + text.count("\n", 0, pos)))
        comment, string, punct, word = m.groups()
        line = 1 + text.count("\n", 0, m.start(m.lastindex))
        if string is not None:
            out.append(("str", bytes(string[1:-1], "utf-8").decode("unicode_escape"), line))
        elif punct is not None:
            out.append((punct, punct, line))
        elif word is not None:
            out.append(("word", word, line))
        pos = m.end()
    return out


def _parse_message(tokens, pos, name, source, top=False):
    fields = _MESSAGES[name]
    result: dict = {}
    while pos < len(tokens):
        kind, value, line = tokens[pos]
        if kind == "}":
            if top:
                raise UserError("unmatched '}'", Location(file=source, line=line))
            return pos + 1, result
        if kind != "word":
            raise UserError(f"expected a field name, got '{value}'", Location(file=source, line=line))
        if value not in fields:
            raise UserError(f"unknown field '{value}' in {name}; known: {', '.join(fields)}",
                            Location(file=source, line=line))
        ftype, repeated = fields[value]
        pos += 1
        if pos < len(tokens) and tokens[pos][0] == ":":
            pos += 1
        if pos >= len(tokens):
            raise UserError(f"field '{value}' has no value", Location(file=source, line=line))
        if ftype in _MESSAGES:
            if tokens[pos][0] != "{":
                raise UserError(f"field '{value}' needs {{ ... }}", Location(file=source, line=line))
            pos, parsed = _parse_message(tokens, pos + 1, ftype, source)
        else:
            parsed = _scalar(tokens[pos], ftype, value, source)
            pos += 1
        if repeated:
            result.setdefault(value, []).append(parsed)
        elif value in result:
            raise UserError(f"field '{value}' given twice", Location(file=source, line=line))
        else:
            result[value] = parsed
    if not top:
        raise UserError(f"'{{' of {name} is never closed", Location(file=source))
    return pos, result


def _scalar(token, ftype, name, source):
    kind, value, line = token
    where = Location(file=source, line=line)
    if ftype == "str":
        if kind != "str":
            raise UserError(f"field '{name}' takes a quoted string, got {value}", where)
        return value
    if kind != "word":
        raise UserError(f"field '{name}' takes a {ftype}, got '{value}'", where)
    try:
        if ftype == "bool":
            if value not in ("true", "false", "True", "False"):
                raise ValueError
            return value.lower() == "true"
        if ftype == "int":
            return int(value)
        if ftype == "float":
            return float(value)
        return value  # enum
    except ValueError:
        raise UserError(f"field '{name}' takes a {ftype}, got '{value}'", where) from None


def format_simple_config(config: dict, *, header: str = "") -> str:
    """Nested dicts (an AMCTConfig) -> AMCT's text format, fields in the proto's order."""
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    _emit(config, "AMCTConfig", lines, 0)
    return "\n".join(lines) + "\n"


def _emit(message: dict, name: str, lines: list[str], depth: int) -> None:
    fields = _MESSAGES[name]
    pad = "    " * depth
    order = _ORDER if name == "AMCTConfig" else list(fields)
    for key in order:
        if key not in message:
            continue
        ftype, repeated = fields[key]
        values = message[key] if repeated else [message[key]]
        for value in values:
            if ftype in _MESSAGES:
                lines.append(f"{pad}{key} : {{")
                _emit(value, ftype, lines, depth + 1)
                lines.append(f"{pad}}}")
            elif ftype == "str":
                escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
                lines.append(f'{pad}{key} : "{escaped}"')
            elif ftype == "bool":
                lines.append(f"{pad}{key} : {'true' if value else 'false'}")
            else:
                lines.append(f"{pad}{key} : {value}")


# --- params -> settings -----------------------------------------------------------------------

def _check_message(config: dict, name: str, where: Location) -> None:
    """An inline ``config`` param (YAML) against the same schema the text format has."""
    fields = _MESSAGES[name]
    for key, value in config.items():
        if key not in fields:
            raise UserError(f"unknown field '{key}' in {name}; known: {', '.join(fields)}", where)
        ftype, repeated = fields[key]
        values = value if repeated and isinstance(value, list) else [value]
        for v in values:
            if ftype in _MESSAGES:
                if not isinstance(v, dict):
                    raise UserError(f"'{key}' takes a mapping", where)
                _check_message(v, ftype, where)


def resolve(params: dict, read_text=None, where: Location | None = None) -> QuantSettings:
    """Settings from the stage params: ``calibration_config`` (a file in AMCT's format, read with
    ``read_text(path)``), the inline ``config`` mapping (same fields), then the top-level params."""
    where = where or Location()
    merged: dict = {}
    path = params.get("calibration_config")
    if path:
        if read_text is None:
            raise UserError("calibration_config given but no way to read it", where)
        text = read_text(path)
        merged = parse_simple_config(text, source=str(path))
    inline = params.get("config") or {}
    if inline:
        _check_message(inline, "AMCTConfig", Location(**{**where.parts(), "field": "config"}))
        for key, value in inline.items():
            if _MESSAGES["AMCTConfig"][key][1]:
                merged[key] = list(merged.get(key) or []) + list(value if isinstance(value, list) else [value])
            else:
                merged[key] = value
    s = QuantSettings()
    s.batch_num = int(params.get("batch_num", merged.get("batch_num", 1)))
    s.batch_size = params.get("batch_size")
    s.activation_offset = bool(params.get("activation_offset", merged.get("activation_offset", True)))
    s.skip_layers = list(dict.fromkeys([*(merged.get("skip_layers") or []), *(params.get("skip_layers") or [])]))
    s.skip_layer_types = list(dict.fromkeys([*(merged.get("skip_layer_types") or []),
                                             *(params.get("skip_layer_types") or [])]))
    common = merged.get("common_config") or {}
    s.channel_wise = bool(params.get("channel_wise", (common.get("arq_quantize") or {}).get("channel_wise", True)))
    s.ifmr = dict(common.get("ifmr_quantize") or {})
    s.calibrate_method = params.get("calibrate_method", "minmax")
    s.override_layer_types = list(merged.get("override_layer_types") or [])
    s.override_layer_configs = list(merged.get("override_layer_configs") or [])
    handled = {"batch_num", "activation_offset", "skip_layers", "skip_layer_types", "common_config",
               "override_layer_types", "override_layer_configs"}
    s.extra = {k: v for k, v in merged.items() if k not in handled}
    if s.batch_num < 1:
        raise UserError(f"batch_num must be at least 1, got {s.batch_num}", Location(**{**where.parts(), "field": "batch_num"}))
    if s.calibrate_method not in CALIBRATE_METHODS:
        raise UserError(f"calibrate_method '{s.calibrate_method}' is not one of {', '.join(CALIBRATE_METHODS)}",
                        Location(**{**where.parts(), "field": "calibrate_method"}))
    return s


def weight_axis(op_type: str, trans_b: bool = False) -> int:
    """The output-channel axis of a layer's weight (one scale per output channel): Conv [O,I,kh,kw] 0,
    ConvTranspose [I,O/g,kh,kw] 1, Gemm B [N,K] with transB else [K,N], MatMul B [K,N] 1."""
    if op_type == "Conv":
        return 0
    if op_type == "Gemm":
        return 0 if trans_b else 1
    return 1


def per_channel_weights(layers, settings: QuantSettings) -> dict[str, int]:
    """``{weight initializer: axis}`` for the quantized layers whose weights get per-channel scales, by
    AMCT's precedence (``override_layer_configs`` > ``override_layer_types`` > ``common_config``).
    ``layers``: (name, op_type, weight initializer or None, transB)."""
    out: dict[str, int] = {}
    for name, op_type, weight, trans_b in layers:
        if weight and name not in settings.skip_layers and settings.layer_channel_wise(name, op_type):
            out[weight] = weight_axis(op_type, trans_b)
    return out
