"""Shared by the CANN test doubles (NOT real CANN code): grammar checks and the fake OM.

The enums here are typed in again from the reference on purpose, independent of
ascendpipe/backends/ascend, so a wrong argv from ascendpipe fails here.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

# GE compiler/api/aclgrph/option_utils.cc (ffdcbc9f) L1316-1326 and L1341-1343: atc's own value sets
# (force_lowerprecision is not in them: E10001)
PRECISION_MODES = {"force_fp32", "cube_fp16in_fp32out", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype",
                   "allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16"}
PRECISION_MODES_V2 = {"fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16", "cube_hif8", "mixed_hif8"}
MIXED = {"allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "mixed_float16", "mixed_bfloat16",
         "mixed_hif8"}
# GE compiler/engines/nn_engine/utils/common/fe_context_utils.cc L131-133, L179-181: these modes need the SoC's
# vconv f32->bf16 ("Current soc not support dtype of BFloat16"); which SoCs have it: GE --precision_mode_v2.md
# L89-107 (Atlas A2/A3, 200I/500 A2 = 310B, 950), typed in again here by soc_version prefix
BF16_MODES = {"allow_mix_precision_bf16", "allow_fp32_to_bf16", "mixed_bfloat16"}
BF16_SOCS = re.compile(r"Ascend(910B\d|910_93|310B|950)", re.IGNORECASE)
IMPLMODES = {"high_precision", "high_performance", "high_precision_for_all", "high_performance_for_all"}
BUFFER = {"l2_optimize", "off_optimize", "l1_optimize"}
LOGS = {"debug", "info", "warning", "error", "null"}
ATC_OPTIONS = {"mode", "framework", "model", "output", "soc_version", "input_shape", "input_format",
               "precision_mode", "precision_mode_v2", "keep_dtype", "fusion_switch_file", "insert_op_conf",
               "modify_mixlist", "op_select_implmode", "optypelist_for_implmode", "buffer_optimize", "out_nodes",
               "log", "om", "json", "dynamic_batch_size", "dynamic_image_size", "dynamic_dims", "input_shape_range",
               "allow_hf32", "customize_dtypes", "op_precision_mode"}
ATC_PATH_OPTIONS = ("model", "output", "om", "json", "keep_dtype", "fusion_switch_file", "insert_op_conf",
                    "modify_mixlist", "op_precision_mode")
META_CMDLINE = "cann_double.atc_cmdline"
META_SOC = "cann_double.soc_version"
META_BANK = "cann_double.tune_bank"


# ---- the real tools' path rules (typed in again from their sources, independent of ascendpipe) ----------
# ais_bench / msit: PATH_WHITE_LIST_REGEX = re.compile(r"[^_A-Za-z0-9/.-]")
#   (msit 8.2.0 components/utils/constants.py:21; ais_bench infer/path_security_check.py)
# ATC: graphengine CheckInputPathValid / CheckOutputPathValid, "^[\u4e00-\u9fa5A-Za-z0-9./_-]+$"
# msaccucmp: safe_path_string, re.compile(r"[^_A-Za-z0-9/.,-]")
#   (mindstudio-probe 26.2.0 msprobe/msaccucmp/cmp_utils/utils.py:36-42)
PATH_REFUSED = {
    "ais_bench": re.compile(r"[^_A-Za-z0-9/.-]"),
    "msit": re.compile(r"[^_A-Za-z0-9/.-]"),
    "atc": re.compile(r"[^\u4e00-\u9fa5A-Za-z0-9./_-]"),
    # --customize_dtypes also takes ':' in its path
    # (GE docs/zh/user_guides/atc_tools/CLI_options/--customize_dtypes.md L33)
    "atc --customize_dtypes": re.compile(r"[^\u4e00-\u9fa5A-Za-z0-9./_:-]"),
    "aoe": re.compile(r"[^\u4e00-\u9fa5A-Za-z0-9./_-]"),  # AOE takes ATC's options and parser
    "msprof": re.compile(r"[^_A-Za-z0-9/.-]"),  # msprof's own check is not read: held to the msit set
    "msaccucmp.py": re.compile(r"[^_A-Za-z0-9/.,-]"),
}


def check_path(tool: str, option: str, path: str) -> None:
    """The tool's path whitelist; the message is the double's, the rule the tool's (above)."""
    found = PATH_REFUSED[tool].search(str(path))
    if found:
        fail(tool, f"{option} {path}: invalid character {found.group(0)!r} in path (the tool's path whitelist)")


def check_not_link(tool: str, option: str, path: str) -> None:
    """ais_bench and msit refuse a symbolic link (msit components/utils/security_check.py:58,
    ``os.path.islink(os.path.abspath(path))``)."""
    if os.path.islink(os.path.abspath(path)):
        fail(tool, f"{option} {path} is a soft link, which is not allowed")


def fail(tool: str, message: str) -> None:
    print(f"[ERROR] {tool} double: {message}", file=sys.stderr)
    sys.exit(2)


def parse_eq_args(tool: str, argv: list[str], allowed: set[str]) -> dict[str, str]:
    """ATC/AOE style: every option is one token ``--name=value``."""
    out: dict[str, str] = {}
    for token in argv:
        if not token.startswith("--") or "=" not in token:
            fail(tool, f"expected --option=value, got '{token}'")
        name, value = token[2:].split("=", 1)
        if name not in allowed:
            fail(tool, f"unknown option --{name}")
        if name in out:
            fail(tool, f"--{name} given twice")
        if value == "":
            fail(tool, f"--{name} has an empty value")
        out[name] = value
    return out


def check_shape_grammar(tool: str, text: str) -> None:
    """name:d1,d2;name2:... with a dim a number, -1 or lo~hi; 'name:' a scalar (atlasatcparam_16_0016)."""
    for part in filter(None, text.split(";")):
        name, sep, dims = part.rpartition(":")
        if not sep or not name or not all(re.fullmatch(r"-1|\d+|\d+~(-1|\d+)", d) for d in dims.split(",") if dims):
            fail(tool, f"--input_shape '{text}' does not match name:d1,d2;name2:...")


def check_conversion_options(tool: str, o: dict[str, str]) -> None:
    """The documented constraints between ATC options (also taken by AOE)."""
    for name in ATC_PATH_OPTIONS:
        if name in o:
            check_path(tool, f"--{name}", o[name])
    if "customize_dtypes" in o:
        found = PATH_REFUSED["atc --customize_dtypes"].search(o["customize_dtypes"])
        if found:
            fail(tool, f"--customize_dtypes {o['customize_dtypes']}: invalid character {found.group(0)!r} in path")
        if tool != "atc":  # GE's option map names it for atc (api/atc/atc_option_map.cc L58)
            fail(tool, "unknown option --customize_dtypes")
        check_customize_dtypes(tool, o["customize_dtypes"])
    if o.get("framework") != "5":
        fail(tool, "--framework=5 (ONNX) is required")
    for name in ("model", "soc_version"):
        if name not in o:
            fail(tool, f"--{name} is required")
    if not o["model"].endswith(".onnx") or not Path(o["model"]).is_file():
        fail(tool, f"--model {o['model']} is not an existing .onnx file")
    if "precision_mode" in o and "precision_mode_v2" in o:
        fail(tool, "--precision_mode and --precision_mode_v2 cannot be combined")
    if o.get("precision_mode", "force_fp16") not in PRECISION_MODES:
        fail(tool, f"bad --precision_mode {o['precision_mode']}")
    if o.get("precision_mode_v2", "fp16") not in PRECISION_MODES_V2:
        fail(tool, f"bad --precision_mode_v2 {o['precision_mode_v2']}")
    bf16 = {o.get("precision_mode"), o.get("precision_mode_v2")} & BF16_MODES
    if bf16 and not BF16_SOCS.match(o["soc_version"]):
        fail(tool, f"E10001: --precision_mode {bf16.pop()}: Current soc not support dtype of BFloat16")
    if o.get("allow_hf32", "true") not in ("true", "false"):  # option_utils.cc L1413-1417
        fail(tool, f"--allow_hf32's value:{o['allow_hf32']} must be true or false")
    if "input_shape" in o:
        check_shape_grammar(tool, o["input_shape"])
    # an ONNX model takes NCHW / NCDHW / ND only (graphengine ge/offline/main.cc:620-660, E10001); with
    # --insert_op_conf only NCHW or NHWC (atlasatcparam_16_0015): for ONNX that leaves NCHW. The AIPP-connected
    # input becomes NHWC inside the OM without --input_format saying so.
    formats = {"NCHW"} if "insert_op_conf" in o else {"NCHW", "NCDHW", "ND"}
    if o.get("input_format", "NCHW") not in formats:
        fail(tool, f"E10001: --input_format {o['input_format']} is not valid for an ONNX model"
                   f"{' with --insert_op_conf' if 'insert_op_conf' in o else ''}: take {sorted(formats)}")
    for name in ("keep_dtype", "fusion_switch_file", "insert_op_conf", "modify_mixlist", "op_precision_mode"):
        if name in o and not Path(o[name]).is_file():
            fail(tool, f"--{name} file {o[name]} does not exist")
    if "keep_dtype" in o:
        for line in Path(o["keep_dtype"]).read_text().splitlines():
            if line.strip().startswith("OpType::") and not line.strip()[8:]:
                fail(tool, "keep_dtype line 'OpType::' names no type")
    if "fusion_switch_file" in o:
        text = Path(o["fusion_switch_file"]).read_text()
        if text.lstrip().startswith("{"):
            switch = json.loads(text).get("Switch")
            if not isinstance(switch, dict) or set(switch) - {"GraphFusion", "UBFusion"}:
                fail(tool, "fusion switch JSON must be {\"Switch\": {\"GraphFusion\": {}, \"UBFusion\": {}}}")
        else:
            for line in filter(None, (l.strip() for l in text.splitlines())):
                if line.rpartition(":")[2] not in ("on", "off"):
                    fail(tool, f"fusion switch line '{line}' is not Rule:on|off")
    if "insert_op_conf" in o and "aipp_op" not in Path(o["insert_op_conf"]).read_text():
        fail(tool, "insert_op_conf has no aipp_op block")
    if "modify_mixlist" in o:
        data = json.loads(Path(o["modify_mixlist"]).read_text())
        if set(data) - {"black-list", "white-list", "gray-list"}:
            fail(tool, "modify_mixlist keys must be black-list / white-list / gray-list")
        check_mixlist_edits(tool, data)
        if (o.get("precision_mode") or o.get("precision_mode_v2")) not in MIXED:
            fail(tool, "--modify_mixlist needs a mixed precision mode")
    # GE api/atc/main_impl.cc L907-917 -> option_utils.cc L1275-1305 (CheckImplmodeParamValid): the list needs a mode;
    # the FE then takes only the four modes (op_impl_mode_config_parser.cc L184-201); the ini must exist (L912-917)
    if "optypelist_for_implmode" in o and "op_select_implmode" not in o:
        fail(tool, "E10001: Parameters --op_select_implmode and --optypelist_for_implmode must be set at the "
                   "same time.")
    if o.get("op_select_implmode", "high_performance") not in IMPLMODES:
        fail(tool, f"bad --op_select_implmode {o['op_select_implmode']}")
    if o.get("buffer_optimize", "l2_optimize") not in BUFFER:
        fail(tool, f"bad --buffer_optimize {o['buffer_optimize']}")
    if o.get("log", "null") not in LOGS:
        fail(tool, f"bad --log {o['log']}")


# GE modify_mixlist_config_parser.cc (ffdcbc9f) L29-60 (the accepted bitmaps of one op type's edits), L208-248
# (AddMixList ORs each edit's bit; VerifyMixlist refuses any other mix): typed in again as bits
_MIX_BITS = {("black-list", "to-remove"): 0b100000, ("black-list", "to-add"): 0b010000,
             ("white-list", "to-remove"): 0b001000, ("white-list", "to-add"): 0b000100,
             ("gray-list", "to-remove"): 0b000010, ("gray-list", "to-add"): 0b000001}
_MIX_OK = {0b100000, 0b001000, 0b000001, 0b100001, 0b001001, 0b000100, 0b000110, 0b100100, 0b010000, 0b010010,
           0b011000}


def check_mixlist_edits(tool: str, data: dict) -> None:
    bits: dict[str, int] = {}
    for key, edits in data.items():
        if not isinstance(edits, dict):
            fail(tool, "The second level of the JSON is not a JSON object")
        for action, names in edits.items():
            if (key, action) not in _MIX_BITS or not isinstance(names, list):
                fail(tool, f"modify_mixlist {key}.{action} is not to-add / to-remove with an array")
            for name in names:
                bits[name] = bits.get(name, 0) | _MIX_BITS[(key, action)]
    for name, value in bits.items():
        if value not in _MIX_OK:
            fail(tool, f"E10003: modify_mixlist: Operation {value:#08b} for op {name} is invalid")


# GE op_cust_dtypes_config_parser.cc (ffdcbc9f) L83-236, typed in again: each line (std::getline into 1024 bytes)
# is 'OpType::T:...' or 'Name:...'; the name is what precedes the first ':' and may not be empty; InputDtype
# before OutputDtype, one of them present; each dtype upper-cased and prefixed DT_ must be a GE serial name
# (graph_metadef/base/utils/type_utils_inner.cc L80-126); an empty entry is allowed (left undefined).
_GE_DTYPES = {"FLOAT", "FLOAT16", "INT8", "INT16", "UINT16", "UINT8", "INT32", "INT64", "UINT32", "UINT64", "BOOL",
              "DOUBLE", "DUAL", "DUAL_SUB_INT8", "DUAL_SUB_UINT8", "COMPLEX32", "COMPLEX64", "COMPLEX128", "QINT8",
              "QINT16", "QINT32", "QUINT8", "QUINT16", "RESOURCE", "STRING_REF", "STRING", "FLOAT32", "VARIANT",
              "BFLOAT16", "INT4", "UINT1", "INT2", "UINT2", "HIFLOAT8", "FLOAT8_E5M2", "FLOAT8_E4M3FN",
              "FLOAT8_E8M0", "FLOAT6_E3M2", "FLOAT6_E2M3", "FLOAT4_E2M1", "FLOAT4_E1M2", "HIFLOAT4"}


def check_customize_dtypes(tool: str, path: str) -> None:
    if not Path(path).is_file():
        fail(tool, f"--customize_dtypes file {path} does not exist")
    bad = "The content format of the customization file is incorrect"
    lines = Path(path).read_bytes().decode().split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]  # the file's last newline ends a line; it starts none
    for line in lines:
        if len(line.encode()) >= 1024:  # atc would stop reading here, dropping the rest: the double refuses it
            fail(tool, f"--customize_dtypes line of {len(line.encode())} bytes: atc reads 1023 per line")
        text = line[len("OpType::"):] if line.startswith("OpType::") else line
        text = text.strip()
        if text.find(":") <= 0:
            fail(tool, f"E10001: {bad} (line {line!r})")
        at_in, at_out = text.find("InputDtype"), text.find("OutputDtype")
        if (at_in < 0 and at_out < 0) or (at_in >= 0 and at_out >= 0 and at_in > at_out):
            fail(tool, f"E10001: {bad} (line {line!r})")
        ins = text[at_in + 11:at_out if at_out >= 0 else len(text)] if at_in >= 0 else ""
        outs = text[at_out + 12:] if at_out >= 0 else ""
        for value in (ins.split(",") if ins else []) + (outs.split(",") if outs else []):
            if value.strip() and value.strip().upper() not in _GE_DTYPES:
                fail(tool, f"E10003: {value.strip()} is an invalid dtype (--customize_dtypes)")


META_SHAPES = "cann_double.shapes"
GEARS = ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims")


def _dims(tool: str, text: str) -> list:
    out = []
    for d in filter(None, text.split(",")):
        if re.fullmatch(r"-1|\d+", d):
            out.append(int(d))
        elif re.fullmatch(r"\d+~(-1|\d+)", d):
            out.append(d)
        else:
            fail(tool, f"--input_shape dim '{d}' is not a number, -1 or lo~hi")
    return out


def check_shapes(tool: str, o: dict[str, str]) -> dict:
    """ATC's --input_shape and gear rules against the ONNX (typed again from CANN's ATC pages):
    - "If the original model has a non-fixed shape, --input_shape is required" (atlasatcparam_16_0016);
    - dynamic_batch_size / dynamic_image_size / dynamic_dims / input_shape_range are mutually exclusive,
      each needs --input_shape; batch: "the first place of the shape is set to -1"; gear count (1, 100],
      batch sizes in [1, 2048] (atlasatcparam_16_0018); dynamic_dims: one value per -1, in order, not with
      --insert_op_conf (atlasatcparam_16_0020);
    - shape ranges: not on Atlas 200/300/500 inference products (Ascend310; aclpythondevg_0047).
    Returns {"input_shape": {name: dims}, "option", "gears"} for the fake OM."""
    import onnx

    model = onnx.load(o["model"], load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = {i.name: [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                       for d in i.type.tensor_type.shape.dim] for i in model.graph.input if i.name not in inits}
    shape: dict[str, list] = {}
    if "input_shape" in o:
        check_shape_grammar(tool, o["input_shape"])
        for part in filter(None, o["input_shape"].split(";")):
            name, _, dims = part.rpartition(":")
            if name not in inputs:
                fail(tool, f"--input_shape: input '{name}' is not found in the model (inputs: {', '.join(inputs)})")
            shape[name] = _dims(tool, dims)
    for name, dims in inputs.items():
        if None in dims and name not in shape:
            fail(tool, f"input '{name}' has a non-fixed shape: --input_shape is required (atlasatcparam_16_0016)")
    given = [g for g in (*GEARS, "input_shape_range") if g in o]
    if len(given) > 1:
        fail(tool, f"--{given[0]} and --{given[1]} are mutually exclusive (atlasatcparam_16_0018)")
    option = next((g for g in given if g in GEARS), None)
    ranged = "input_shape_range" in o or any(isinstance(d, str) for v in shape.values() for d in v) or (
        not option and any(d == -1 for v in shape.values() for d in v))
    # Atlas 200/300/500 (Ascend310, aclpythondevg_0047) and Atlas 200I/500 A2 (Ascend310B*: CANN 8.0
    # atlasatcparam_16_0016, "Atlas 200I/500 A2 推理产品不支持设置shape范围") take no shape range
    if ranged and (o["soc_version"] == "Ascend310" or o["soc_version"].startswith("Ascend310B")):
        fail(tool, f"dynamic shape range is not supported on {o['soc_version']} (aclpythondevg_0047, "
                   "atlasatcparam_16_0016)")
    gears: list[list[int]] = []
    if option:
        if not shape:
            fail(tool, f"--{option} must be used with --input_shape (atlasatcparam_16_0018)")
        if option == "dynamic_dims" and "insert_op_conf" in o:
            fail(tool, "--dynamic_dims cannot be used with --insert_op_conf (atlasatcparam_16_0020)")
        text = o[option]
        try:
            gears = ([[int(v)] for v in text.split(",")] if option == "dynamic_batch_size"
                     else [[int(v) for v in g.split(",")] for g in text.split(";") if g])
        except ValueError:
            fail(tool, f"--{option} '{text}' is not integers")
        if not 1 < len(gears) <= 100:
            fail(tool, f"--{option}: the number of gears must be in (1, 100]")
        minus = [(n, a) for n, v in shape.items() for a, d in enumerate(v) if d == -1]
        if not minus or any(isinstance(d, str) for v in shape.values() for d in v):
            fail(tool, f"--{option} needs -1 dims (and no ranges) in --input_shape")
        if option == "dynamic_batch_size":
            if any(a != 0 for _, a in minus):
                fail(tool, "--dynamic_batch_size: only the first dim of --input_shape may be -1")
            if any(not 1 <= g[0] <= 2048 for g in gears):
                fail(tool, "--dynamic_batch_size: each batch size must be in [1, 2048]")
        if option == "dynamic_image_size":
            if any(len(g) != 2 for g in gears) or any(
                    a < len(shape[n]) - 2 for n, a in minus) or len(minus) != 2 * len({n for n, _ in minus}):
                fail(tool, "--dynamic_image_size: gears 'h,w;h,w' and -1 at the H and W of --input_shape")
        if option == "dynamic_dims" and any(len(g) != len(minus) for g in gears):
            fail(tool, f"--dynamic_dims: each gear needs one value per -1 in --input_shape ({len(minus)})")
    return {"input_shape": shape, "option": option, "gears": gears}


def om_input_dims(model) -> dict[str, list]:
    """The fake OM's inputs: fixed dims as ints, gear dims (-1) as None."""
    inits = {i.name for i in model.graph.initializer}
    return {i.name: [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                     for d in i.type.tensor_type.shape.dim] for i in model.graph.input if i.name not in inits}


def om_input_numpy_dtype(value_info) -> str:
    return {1: "float32", 2: "uint8", 3: "int8", 10: "float16", 6: "int32", 7: "int64"}.get(
        value_info.type.tensor_type.elem_type, "float32")


def om_input_dtypes(model) -> dict[str, str]:
    """The fake OM's input dtypes as GE's JSON names them (an AIPP input: DT_UINT8)."""
    names = {1: "DT_FLOAT", 2: "DT_UINT8", 3: "DT_INT8", 10: "DT_FLOAT16", 6: "DT_INT32", 7: "DT_INT64"}
    return {i.name: names.get(i.type.tensor_type.elem_type, "DT_FLOAT") for i in model.graph.input}


def om_shapes(model) -> dict:
    meta = {p.key: p.value for p in model.metadata_props}
    return json.loads(meta.get(META_SHAPES) or '{"input_shape": {}, "option": null, "gears": []}')


def write_fake_om(onnx_path: str, om_path: Path, cmdline: str, soc: str, shapes: dict | None = None,
                  aipp_conf: str | None = None) -> None:
    """The double's OM: the ONNX itself, its inputs fixed as --input_shape fixes them (a -1 or range dim stays
    open), with the atc command line and the shapes/gears kept in metadata."""
    import onnx

    model = onnx.load(onnx_path)
    shapes = shapes or {"input_shape": {}, "option": None, "gears": []}
    for value in model.graph.input:
        dims = shapes["input_shape"].get(value.name)
        if dims is None:
            continue
        proto = value.type.tensor_type.shape.dim
        for dim, given in zip(proto, dims):
            if isinstance(given, int) and given > 0:
                dim.Clear()
                dim.dim_value = given
            else:
                dim.Clear()
                dim.dim_param = "gear"
    if aipp_conf:  # the AIPP input takes uint8 NHWC; the prelude normalises it (_aipp_double)
        import _aipp_double

        _aipp_double.apply(model, _aipp_double.read_blocks(aipp_conf), lambda message: fail("atc", message))
    for key, value in ((META_CMDLINE, cmdline), (META_SOC, soc), (META_BANK, os.environ.get("TUNE_BANK_PATH", "")),
                       (META_SHAPES, json.dumps(shapes))):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    om_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(om_path))


def load_fake_om(tool: str, path: str):
    import onnx

    if not path.endswith(".om") or not Path(path).is_file():
        fail(tool, f"model {path} is not an existing .om file")
    try:
        return onnx.load(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure means "not made by the atc double"
        fail(tool, f"{path} is not an OM written by the atc double: {exc}")


IR_TYPES = {"Conv": "Conv2D", "Gemm": "MatMulV2", "MatMul": "MatMulV2", "BatchNormalization": "BNInference",
            "MaxPool": "MaxPoolV3", "GlobalAveragePool": "GlobalAveragePool", "Softmax": "SoftmaxV2"}


def om_ops(model) -> list[dict]:
    """The OM's op view: Conv + its only consumer Relu fused (named after the Conv), others 1:1."""
    nodes = [n for n in model.graph.node if not n.name.startswith("aipp_double/")]  # AIPP is the Data's, not an op
    consumers: dict[str, list] = {}
    for n in nodes:
        for t in n.input:
            consumers.setdefault(t, []).append(n)
    fused_away = set()
    ops = []
    for n in nodes:
        if n.name in fused_away:
            continue
        users = consumers.get(n.output[0], []) if n.output else []
        if n.op_type == "Conv" and len(users) == 1 and users[0].op_type == "Relu":
            relu = users[0]
            fused_away.add(relu.name)
            ops.append({"name": n.name, "type": "Conv2D", "originals": [n.name, relu.name],
                        "outputs": list(relu.output), "origin": relu.name, "pass": "ConvReluFusionPass",
                        "inputs": list(n.input)})
        else:
            ops.append({"name": n.name, "type": IR_TYPES.get(n.op_type, n.op_type), "originals": [n.name],
                        "outputs": list(n.output), "origin": n.name, "pass": None,
                        "inputs": list(n.input)})
    return ops


def _s(value: str) -> dict:
    return {"s": value}


def om_json(model, name: str) -> dict:
    meta = {p.key: p.value for p in model.metadata_props}
    ops = []
    # the OM's inputs as Data ops with their output_desc shape (-1 for a gear dim), as GE's JSON lists them
    for name, dims in om_input_dims(model).items():
        ops.append({"name": name, "type": "Data",
                    "attr": [{"key": "_datadump_original_op_names", "value": {"list": {"s": [name]}}}],
                    "output_desc": [{"dtype": om_input_dtypes(model).get(name, "DT_FLOAT"),
                                     "shape": {"dim": [d if d is not None else -1 for d in dims]}}]})
    for op in om_ops(model):
        attr = [{"key": "_datadump_original_op_names", "value": {"list": {"s": op["originals"]}}}]
        if op["pass"]:
            attr.append({"key": "pass_name", "value": {"list": {"s": [op["pass"]]}}})
        # each output names the original op and output it stands for, as atc writes it and msaccucmp reads it
        # (mindstudio-probe msaccucmp/vector_cmp/fusion_manager/fusion_rule_parser.py:459-460)
        descs = [{"dtype": "DT_FLOAT", "attr": [{"key": "_datadump_origin_name", "value": _s(op["origin"])},
                                                {"key": "_datadump_origin_output_index", "value": {"i": i}}]}
                 for i, _ in enumerate(op["outputs"])]
        ops.append({"name": op["name"], "type": op["type"], "attr": attr, "output_desc": descs})
    return {"name": name, "version": 1,
            "attr": [{"key": "atc_cmdline", "value": _s(meta.get(META_CMDLINE, ""))},
                     {"key": "soc_version", "value": _s(meta.get(META_SOC, ""))},
                     {"key": "opp_version", "value": _s("8.0.RC1.double")},
                     {"key": "tune_bank", "value": _s(meta.get(META_BANK, ""))}],
            "graph": [{"name": model.graph.name or name, "op": ops}]}


def timestamp_us() -> int:
    return int(time.time() * 1_000_000)
