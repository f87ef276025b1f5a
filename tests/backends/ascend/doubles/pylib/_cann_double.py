"""Shared by the CANN test doubles (NOT real CANN code): grammar checks and the fake OM.

The enums here are typed in again from the reference on purpose, independent of
ascendpipe/backends/ascend, so a wrong argv from ascendpipe fails here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PRECISION_MODES = {"force_fp32", "cube_fp16in_fp32out", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype",
                   "allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16"}
PRECISION_MODES_V2 = {"fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16", "mixed_hif8"}
MIXED = {"allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "mixed_float16", "mixed_bfloat16"}
IMPLMODES = {"high_precision", "high_performance", "high_precision_for_all", "high_performance_for_all"}
BUFFER = {"l2_optimize", "off_optimize", "l1_optimize"}
LOGS = {"debug", "info", "warning", "error", "null"}
ATC_OPTIONS = {"mode", "framework", "model", "output", "soc_version", "input_shape", "input_format",
               "precision_mode", "precision_mode_v2", "keep_dtype", "fusion_switch_file", "insert_op_conf",
               "modify_mixlist", "op_select_implmode", "optypelist_for_implmode", "buffer_optimize", "out_nodes",
               "log", "om", "json"}
META_CMDLINE = "cann_double.atc_cmdline"
META_SOC = "cann_double.soc_version"
META_BANK = "cann_double.tune_bank"


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
    for part in text.split(";"):
        name, sep, dims = part.rpartition(":")
        if not sep or not name or not all(d.lstrip("-").isdigit() for d in dims.split(",")):
            fail(tool, f"--input_shape '{text}' does not match name:d1,d2;name2:...")


def check_conversion_options(tool: str, o: dict[str, str]) -> None:
    """The documented constraints between ATC options (also taken by AOE)."""
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
    if "input_shape" in o:
        check_shape_grammar(tool, o["input_shape"])
    formats = {"NCHW", "NHWC"} if "insert_op_conf" in o else {"NCHW", "NCDHW", "ND"}
    if o.get("input_format", "NCHW") not in formats:
        fail(tool, f"--input_format {o['input_format']} not in {sorted(formats)}")
    for name in ("keep_dtype", "fusion_switch_file", "insert_op_conf", "modify_mixlist"):
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
        if (o.get("precision_mode") or o.get("precision_mode_v2")) not in MIXED:
            fail(tool, "--modify_mixlist needs a mixed precision mode")
    if o.get("op_select_implmode", "high_performance") not in IMPLMODES:
        fail(tool, f"bad --op_select_implmode {o['op_select_implmode']}")
    if "optypelist_for_implmode" in o and o.get("op_select_implmode") not in ("high_precision", "high_performance"):
        fail(tool, "--optypelist_for_implmode needs --op_select_implmode high_precision|high_performance")
    if o.get("buffer_optimize", "l2_optimize") not in BUFFER:
        fail(tool, f"bad --buffer_optimize {o['buffer_optimize']}")
    if o.get("log", "null") not in LOGS:
        fail(tool, f"bad --log {o['log']}")


def write_fake_om(onnx_path: str, om_path: Path, cmdline: str, soc: str) -> None:
    """The double's OM: the ONNX itself, with the atc command line kept in metadata."""
    import onnx

    model = onnx.load(onnx_path)
    for key, value in ((META_CMDLINE, cmdline), (META_SOC, soc), (META_BANK, os.environ.get("TUNE_BANK_PATH", ""))):
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
    nodes = list(model.graph.node)
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
                        "outputs": list(relu.output), "origin": relu.name, "pass": "ConvReluFusionPass"})
        else:
            ops.append({"name": n.name, "type": IR_TYPES.get(n.op_type, n.op_type), "originals": [n.name],
                        "outputs": list(n.output), "origin": n.name, "pass": None})
    return ops


def _s(value: str) -> dict:
    return {"s": value}


def om_json(model, name: str) -> dict:
    meta = {p.key: p.value for p in model.metadata_props}
    ops = []
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
