"""ATC: the conversion argv (validated against the documented grammar) and the ``--mode=1`` JSON.

Pure: no I/O except ``load_om_json``. Option names and values follow CANN's ATC documentation
(docs/ascend.md lists what is verified only against documentation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendpipe.errors import Location, UserError
from ascendpipe.precision.input_shape import format_input_shape, parse_input_shape  # noqa: F401 (ours)

FRAMEWORK_ONNX = "5"
PRECISION_MODES = (
    "force_fp32", "cube_fp16in_fp32out", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype",
    "allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16",
)
# ATC's own option check (GE compiler/api/aclgrph/option_utils.cc L1316-1357, at ffdcbc9f): force_lowerprecision,
# which GE's FE maps, is not in the --precision_mode set, so atc refuses it (E10001)
PRECISION_MODES_V2 = ("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16", "cube_hif8",
                      "mixed_hif8")
MIXED_MODES = ("allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16",
               "mixed_float16", "mixed_bfloat16", "mixed_hif8")  # option_utils.cc CheckModifyMixlistParamValid
# ONNX takes NCHW / NCDHW / ND (graphengine ge/offline/main.cc:620-660, E10001; atlasatcparam_16_0015);
# with --insert_op_conf only NCHW or NHWC: for ONNX, NCHW (the AIPP input becomes NHWC inside the OM)
ONNX_INPUT_FORMATS = ("NCHW", "NCDHW", "ND")
AIPP_INPUT_FORMATS = ("NCHW",)
IMPL_MODES = ("high_precision", "high_performance", "high_precision_for_all", "high_performance_for_all")
BUFFER_OPTIMIZE = ("l2_optimize", "off_optimize", "l1_optimize")
LOG_LEVELS = ("debug", "info", "warning", "error", "null")
SUCCESS_LINE = "ATC run success, welcome to the next use."


@dataclass
class AtcSettings:
    """Everything one ``atc`` conversion takes. Paths are the remedy files already written."""

    model: Path
    output: Path  # without the .om suffix, as ATC wants it
    soc_version: str
    input_shape: dict[str, list[int]] | str | None = None
    input_format: str | None = None
    precision_mode: str | None = None
    precision_mode_v2: str | None = None
    allow_hf32: str | None = None  # 'true' | 'false': both of --allow_hf32's switches (None: conv on, matmul off)
    keep_dtype: Path | None = None
    fusion_switch_file: Path | None = None
    insert_op_conf: Path | None = None
    modify_mixlist: Path | None = None
    # atc only (convert_argv): GE's option map names it for atc (api/atc/atc_option_map.cc L58); aoe is not
    # given it (the tune plan refuses it)
    customize_dtypes: Path | None = None
    op_select_implmode: str | None = None
    optypelist_for_implmode: list[str] | str | None = None
    op_precision_mode: Path | None = None  # the user's ini, passed as it is
    buffer_optimize: str | None = None
    out_nodes: list[str] | str | None = None
    log: str | None = None
    shape_options: list[str] = field(default_factory=list)  # --input_shape and a gear option (dynamic_shapes.py)
    shapes: Any = None  # the dynamic_shapes.ShapePlan behind shape_options (recorded in convert.json)
    extra: list[str] = field(default_factory=list)  # tool-specific options appended as given


def _bad(field_name: str, value: Any, allowed: tuple[str, ...]) -> UserError:
    return UserError(f"{field_name} '{value}' is not one of: {', '.join(allowed)}", Location(field=field_name))


def _join(value: list[str] | str, sep: str) -> str:
    return value if isinstance(value, str) else sep.join(value)


def validate(s: AtcSettings) -> None:
    """The documented constraints between options, each a located UserError."""
    if not s.soc_version:
        raise UserError("soc_version is required on the ascend backend (e.g. Ascend310P3)",
                        Location(field="soc_version"))
    if s.precision_mode and s.precision_mode_v2:
        raise UserError("precision_mode and precision_mode_v2 cannot be combined; give one",
                        Location(field="precision_mode_v2"))
    if s.precision_mode and s.precision_mode not in PRECISION_MODES:
        raise _bad("precision_mode", s.precision_mode, PRECISION_MODES)
    if s.precision_mode_v2 and s.precision_mode_v2 not in PRECISION_MODES_V2:
        raise _bad("precision_mode_v2", s.precision_mode_v2, PRECISION_MODES_V2)
    if s.allow_hf32 and s.allow_hf32 not in ("true", "false"):  # option_utils.cc L1413-1417: "must be true or false"
        raise _bad("allow_hf32", s.allow_hf32, ("true", "false"))
    if s.input_format:
        allowed = AIPP_INPUT_FORMATS if s.insert_op_conf else ONNX_INPUT_FORMATS
        if s.input_format not in allowed:
            err = _bad("input_format", s.input_format, allowed)
            if s.insert_op_conf:  # atc would stop with E10001
                err.hint = ("for an ONNX model with AIPP give NCHW or leave input_format out: the AIPP input takes "
                            "uint8 NHWC inside the OM")
            raise err
    mode = s.precision_mode or s.precision_mode_v2
    if s.modify_mixlist and mode not in MIXED_MODES:
        raise UserError(f"modify_mixlist needs a mixed precision mode ({', '.join(MIXED_MODES)}), "
                        f"not '{mode or 'force_fp16 (default)'}'", Location(field="modify_mixlist"))
    # atc's own check (GE api/atc/main_impl.cc L907-917, compiler/api/aclgrph/option_utils.cc L1275-1305): the list
    # needs a mode (any of the four: a _for_all mode reads its ini and ignores the list, op_impl_mode_config_parser.cc
    # L184-187); the FE takes four modes (L184-201); the op_precision_mode file must exist (E10001)
    if s.optypelist_for_implmode and not s.op_select_implmode:
        raise UserError("optypelist_for_implmode needs op_select_implmode (atc E10001: \"Parameters "
                        "--op_select_implmode and --optypelist_for_implmode must be set at the same time.\")",
                        Location(field="optypelist_for_implmode"))
    if s.op_select_implmode and s.op_select_implmode not in IMPL_MODES:
        raise _bad("op_select_implmode", s.op_select_implmode, IMPL_MODES)
    if s.buffer_optimize and s.buffer_optimize not in BUFFER_OPTIMIZE:
        raise _bad("buffer_optimize", s.buffer_optimize, BUFFER_OPTIMIZE)
    if s.log and s.log not in LOG_LEVELS:
        raise _bad("log", s.log, LOG_LEVELS)


def common_options(s: AtcSettings, *, check: bool = True) -> list[str]:
    """The options ATC and AOE share (AOE accepts most ATC options). ``check=False`` skips the
    documented constraints (and a missing soc_version): for the line an emulated convert records."""
    if check:
        validate(s)
    argv = [f"--framework={FRAMEWORK_ONNX}", f"--model={s.model}"]
    if s.soc_version:
        argv.append(f"--soc_version={s.soc_version}")
    if s.shape_options:
        argv += s.shape_options
    elif s.input_shape:
        argv.append(f"--input_shape={format_input_shape(s.input_shape)}")
    if s.input_format:
        argv.append(f"--input_format={s.input_format}")
    if s.precision_mode:
        argv.append(f"--precision_mode={s.precision_mode}")
    if s.precision_mode_v2:
        argv.append(f"--precision_mode_v2={s.precision_mode_v2}")
    if s.allow_hf32:
        argv.append(f"--allow_hf32={s.allow_hf32}")
    for opt in ("keep_dtype", "fusion_switch_file", "insert_op_conf", "modify_mixlist", "op_precision_mode"):
        path = getattr(s, opt)
        if path:
            argv.append(f"--{opt}={path}")
    if s.op_select_implmode:
        argv.append(f"--op_select_implmode={s.op_select_implmode}")
    if s.optypelist_for_implmode:
        argv.append(f"--optypelist_for_implmode={_join(s.optypelist_for_implmode, ',')}")
    if s.out_nodes:
        argv.append(f"--out_nodes={_join(s.out_nodes, ';')}")
    return argv


# a ConvertSettings remedy name -> the AtcSettings field (atc option) that names its file
REMEDY_OPTIONS = {"keep_dtype": "keep_dtype", "fusion_switch": "fusion_switch_file", "aipp": "insert_op_conf",
                  "modify_mixlist": "modify_mixlist", "customize_dtypes": "customize_dtypes"}


def allow_hf32_value(switches: dict | None, strict: bool = True) -> str | None:
    """``--allow_hf32``'s value for the pipeline's switches: 'true' / 'false' sets both (GE
    --allow_hf32.md: "true: ... Conv and Matmul"); the default (conv on, matmul off) is no option at all.
    ``strict``: a mix atc cannot spell (conv off, matmul on) is an error; else it is left out."""
    if not switches:
        return None
    merged = {"conv": True, "matmul": False, **switches}
    if merged == {"conv": True, "matmul": False}:
        return None
    if merged["conv"] == merged["matmul"]:
        return "true" if merged["conv"] else "false"
    if strict:
        raise UserError("allow_hf32 conv off with matmul on has no atc spelling: --allow_hf32 sets both switches "
                        "(true or false), and its default is conv on, matmul off", Location(field="allow_hf32"))
    return None


def from_convert_settings(settings, model, output, remedy_paths: dict, strict: bool = True, **options) -> AtcSettings:
    """AtcSettings for resolved convert settings (``precision.settings.ConvertSettings``), with the
    remedy files (name -> path) as written; ``options``: soc_version and ATC-only options."""
    options.setdefault("soc_version", settings.soc_version or "")
    files = {REMEDY_OPTIONS[name]: path for name, path in remedy_paths.items()}
    for name in ("op_select_implmode", "optypelist_for_implmode"):  # emulated settings atc takes as they are
        if getattr(settings, name, None):
            options.setdefault(name, getattr(settings, name))
    if getattr(settings, "op_precision_mode", None):
        options.setdefault("op_precision_mode", Path(settings.op_precision_mode[0]))
    return AtcSettings(model=model, output=output, input_shape=settings.input_shape or None,
                       input_format=settings.input_format,
                       precision_mode=None if settings.precision_mode_v2 else settings.precision_mode,
                       precision_mode_v2=settings.precision_mode_v2,
                       allow_hf32=allow_hf32_value(getattr(settings, "allow_hf32", None), strict), **files, **options)


def settings_argv(settings, model: str, output: str, remedy_dir: str = ".") -> list[str]:
    """The atc line resolved convert settings drive, remedy files named as a convert stage writes
    them (the emulator records it; the dry run shows it)."""
    from ascendpipe.precision.settings import REMEDY_NAMES

    paths = {name: f"{remedy_dir}/{REMEDY_NAMES[name]}" for name in settings.remedy_files()}
    if settings.fusion_switch_source:  # the same file goes to atc
        paths["fusion_switch"] = settings.fusion_switch_source[0]
    return convert_argv("atc", from_convert_settings(settings, model, output, paths, strict=False), check=False)


def convert_argv(atc: str | Path, s: AtcSettings, *, check: bool = True) -> list[str]:
    """The ``atc`` conversion argv (the one builder: the ascend backend runs it, the emulator records it)."""
    argv = [str(atc), *common_options(s, check=check)]
    if s.customize_dtypes:  # GE api/atc/main_impl.cc L669 (help), L1756 (CUSTOMIZE_DTYPES option)
        argv.append(f"--customize_dtypes={s.customize_dtypes}")
    argv.append(f"--output={s.output}")
    if s.buffer_optimize:
        argv.append(f"--buffer_optimize={s.buffer_optimize}")
    if s.log:
        argv.append(f"--log={s.log}")
    return argv + list(s.extra)


def json_argv(atc: str | Path, om: Path, json_path: Path) -> list[str]:
    """``atc --mode=1``: the OM as JSON (op mapping for compare, the recorded atc_cmdline)."""
    return [str(atc), "--mode=1", f"--om={om}", f"--json={json_path}"]


# ---- the --mode=1 JSON -------------------------------------------------------------------------

@dataclass
class OmOp:
    name: str
    type: str
    original_names: list[str]  # from _datadump_original_op_names; [name] when the op is not fused
    pass_names: list[str] = field(default_factory=list)  # pass_name (list) and pass_name_ub (string)


@dataclass
class OmInfo:
    name: str
    attrs: dict[str, Any]
    ops: list[OmOp]
    inputs: dict[str, list[int]] = field(default_factory=dict)  # Data ops' output shapes (the OM's inputs)

    @property
    def atc_cmdline(self) -> str | None:
        return self.attrs.get("atc_cmdline")

    def mapping(self) -> dict[str, list[str]]:
        """NPU op name -> the original ONNX node names it covers."""
        return {op.name: op.original_names for op in self.ops}

    def op_types(self) -> dict[str, str]:
        return {op.name: op.type for op in self.ops}


def attr_value(value: dict) -> Any:
    """A GE attr value: ``{"s": ...}``, ``{"i": ...}``, ``{"b": ...}``, ``{"f": ...}`` or ``{"list": {...}}``."""
    if not isinstance(value, dict):
        return value
    for key in ("s", "i", "f", "b"):
        if key in value:
            return value[key]
    if "list" in value:
        inner = value["list"] or {}
        for key in ("s", "i", "f", "b"):
            if key in inner:
                return list(inner[key])
        return []
    return None


def attrs_of(items: Any) -> dict[str, Any]:
    if isinstance(items, dict):  # some dumps write attrs as a mapping already
        return {k: attr_value(v) for k, v in items.items()}
    return {a.get("key"): attr_value(a.get("value", {})) for a in items or [] if isinstance(a, dict)}


def parse_om_json(data: dict) -> OmInfo:
    model_attrs = attrs_of(data.get("attr"))
    ops: list[OmOp] = []
    inputs: dict[str, list[int]] = {}
    for graph in data.get("graph") or []:
        for key, value in attrs_of(graph.get("attr")).items():
            model_attrs.setdefault(key, value)
        for op in graph.get("op") or []:
            a = attrs_of(op.get("attr"))
            if op.get("type") == "Data":  # the OM's input: its output_desc shape is what the device takes
                desc = (op.get("output_desc") or [{}])[0] or {}
                dims = (desc.get("shape") or {}).get("dim")
                if isinstance(dims, list):
                    inputs[op.get("name", "")] = [int(d) for d in dims]
            originals = a.get("_datadump_original_op_names")
            if isinstance(originals, str):
                originals = [originals]
            passes = list(a.get("pass_name") or [])
            if a.get("pass_name_ub"):
                passes.append(a["pass_name_ub"])
            ops.append(OmOp(name=op.get("name", ""), type=op.get("type", ""),
                            original_names=list(originals) if originals else [op.get("name", "")],
                            pass_names=passes))
    return OmInfo(name=data.get("name", ""), attrs=model_attrs, ops=ops, inputs=inputs)


def load_om_json(path: Path) -> OmInfo:
    try:
        return parse_om_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the OM JSON {path}: {exc}") from None


# The ONNX ops ATC converts: its ONNX parser registers each as ``ai.onnx::<opset>::<type>`` ("E19010:
# No parser is registered for Op [/model.0/conv/Conv, optype [ai.onnx::19::Conv]]", hiascend forum
# thread 02108171386292261156; a custom domain: "[pkg.onnxscript.torch_lib.common::1::Cast]", thread
# 0292174974303120058), and CANN documents the ONNX operators it supports as ONNX's own IR, ai.onnx ops
# by name ("支持ONNX算子清单", operatorlist_0004, CANN 8.0.RC2.2: "该算子规格仅适用于ONNX原生IR定义的网络模型",
# ONNX 1.12). No ai.onnx.ml op is documented there: it is refused too (the conservative side).
ONNX_DOMAINS = ("", "ai.onnx")
ALLOW_CUSTOM_OPS = "--allow-custom-ops"


_FIRST_VERSIONS: dict[tuple[str, str], int] | None = None


def published_since(op_type: str, domain: str = "") -> int | None:
    """The first opset in which ONNX's published schemas (``onnx.defs``, every version of the ONNX
    release installed) define ``op_type`` in ``domain`` ('' and 'ai.onnx' alike), or None: ONNX defines
    no such op."""
    global _FIRST_VERSIONS
    if _FIRST_VERSIONS is None:
        import onnx

        first: dict[tuple[str, str], int] = {}
        for schema in onnx.defs.get_all_schemas_with_history():
            key = ("" if schema.domain in ONNX_DOMAINS else schema.domain, schema.name)
            first[key] = min(first.get(key, schema.since_version), schema.since_version)
        _FIRST_VERSIONS = first
    return _FIRST_VERSIONS.get(("" if domain in ONNX_DOMAINS else domain, op_type))


def unconvertible_ops(nodes, opsets: dict[str, int] | None = None) -> list[dict]:
    """The (name, op_type, domain) triples ATC cannot convert: a domain other than ai.onnx, or an op in it
    outside ONNX's published schemas (issue 49: onnxruntime's optimiser saves SimplifiedLayerNormalization,
    its own op, in the default domain), at the model's opset when ``opsets`` (domain -> version) gives it
    (an op ONNX defines only from a later opset has no parser at the model's: E19010 names
    ``ai.onnx::<opset>::<type>``). Each: {"op_name", "op_type", "domain"}, and for a default-domain op
    "since": the opset ONNX defines it from (None: never) and "opset": the model's."""
    found = []
    for name, op_type, domain in nodes:
        if domain not in ONNX_DOMAINS:
            found.append({"op_name": name, "op_type": op_type, "domain": domain})
            continue
        since = published_since(op_type)
        opset = (opsets or {}).get("", (opsets or {}).get("ai.onnx"))
        if since is None or (opset is not None and since > opset):
            found.append({"op_name": name, "op_type": op_type, "domain": domain, "since": since, "opset": opset})
    return found


def _kind(op: dict) -> str:
    """How the refusal names an op type: domain.type, or for the default domain why it is no ONNX op."""
    if op["domain"] not in ONNX_DOMAINS:
        return f"{op['domain']}.{op['op_type']}"
    if op.get("since") is None:
        return f"{op['op_type']} (default domain: not an ONNX op)"
    return f"{op['op_type']} (default domain: an ONNX op from opset {op['since']}, the model imports {op['opset']})"


def unconvertible_error(ops: list[dict], *, emulated: bool) -> UserError:
    """One line naming each op type ATC cannot convert, its domain and its nodes (three, then a count).
    ``emulated``: on the onnxruntime backend, where ``--allow-custom-ops`` emulates them anyway."""
    groups: dict[str, list[str]] = {}
    for op in ops:
        groups.setdefault(_kind(op), []).append(op["op_name"])
    parts = [f"{kind} at {', '.join(repr(n) for n in names[:3])}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")
             for kind, names in groups.items()]
    how = (f"; emulate them anyway with {ALLOW_CUSTOM_OPS} (param allow_custom_ops: true), which ATC will not do"
           if emulated else "")
    return UserError(f"ATC cannot convert {len(ops)} op(s) outside ONNX's published schemas (E19010, no parser): "
                     f"{'; '.join(parts)}: export them as standard ONNX ops{how}",
                     Location(op=ops[0]["op_name"], field="model"))
