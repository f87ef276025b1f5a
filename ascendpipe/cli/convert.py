"""``ascendpipe convert``: one model through the convert stage's library, ATC-style flags."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "convert an ONNX model into the emulated fp16 device model (ATC-style flags)"

_FLAGS = [
    ("model", "ONNX model to convert", True),
    ("output", "output directory (model.onnx, precision_plan.json, fused_map.json, remedy files)", True),
    ("precision-mode", "force_fp16 (default), allow_fp32_to_fp16, allow_mix_precision, ..._bf16, ...", False),
    ("precision-mode-v2", "fp16, origin, mixed_float16, cube_fp16in_fp32out, mixed_bfloat16", False),
    ("keep-dtype", "keep_dtype file, or a comma list of op names / OpType::T", False),
    ("fusion-switch-file", "fusion switch file (either ATC format; ATC pass names)", False),
    ("insert-op-conf", "AIPP config (aipp_op { ... })", False),
    ("modify-mixlist", "modify_mixlist JSON", False),
    ("customize-dtypes", "customize_dtypes file: 'OpName::InputDtype:float16,OutputDtype:float' or "
                         "'OpType::SoftmaxV2:InputDtype:float,OutputDtype:float' lines (ATC's format)", False),
    ("input-shape", "name:1,3,224,224;name2:... (a dim may be 0: an empty KV cache, past_key_0:2,2,0,16)", False),
    ("input-format", "NCHW, NHWC, ND...", False),
    ("soc-version", "e.g. Ascend310P3: the passes that apply and the default overflow mode", False),
    ("overflow-mode", "inf_nan or saturation (default: the SoC's)", False),
    ("allow-hf32", "true/false: fp32 Conv and MatMul read HF32 on Atlas A2/A3 (default: conv on, matmul off)", False),
    ("op-select-implmode", "high_performance (ATC's default), high_precision, high_precision_for_all, "
                           "high_performance_for_all: the kernels' implementation modes", False),
    ("optypelist-for-implmode", "GE op types that alone take --op-select-implmode, e.g. SoftmaxV2,LayerNorm", False),
    ("op-precision-mode", "ini of OpType=mode lines ([ByOpType] / [ByNodeName]); wins over --op-select-implmode",
     False),
    ("tune-bank", "tune knowledge bank JSON (its 'session' goes to runtime.json)", False),
    ("dynamic-batch-size", "ATC batch gears, e.g. 1,2,4,8 (with -1 at dim 0 of --input-shape)", False),
    ("dynamic-image-size", "ATC image-size gears, e.g. 224,224;448,448 (-1 at H and W)", False),
    ("dynamic-dims", "ATC dims gears, e.g. 1,32;8,64 (one value per -1)", False),
    ("input-shape-range", "ATC shape ranges, e.g. x:[1~8,3,224,224]", False),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, text, required in _FLAGS:
        spellings = dict.fromkeys([f"--{flag}", f"--{flag.replace('-', '_')}"])  # ATC's underscores too, once
        parser.add_argument(*spellings, dest=flag.replace("-", "_"), required=required, help=text)
    parser.add_argument("--framework", default="5", metavar="5",
                        help="ATC's framework: 5 (ONNX), the only one ascendpipe converts; accepted so that an atc "
                        "command line pastes as it is")
    parser.add_argument("--allow-custom-ops", "--allow_custom_ops", dest="allow_custom_ops", action="store_true",
                        help="emulate ops outside ONNX's published schemas (onnxruntime contrib ops, its own ops "
                        "in the default domain) that ATC cannot convert, "
                        "instead of refusing them (onnxruntime backend only; recorded in convert.json)")
    parser.add_argument("--json", action="store_true",
                        help='print {"model", "output", "precision_mode", "ops": {"float16", "float32", "other"}, "remedy_files", "atc_argv"}')
    parser.add_argument("--backend", choices=("onnxruntime", "ascend"), default="onnxruntime",
                        help="ascend: run atc (the CANN toolkit; --soc-version required), writing model.om")


def params_from_args(args: argparse.Namespace) -> dict:
    params = {f.replace("-", "_"): getattr(args, f.replace("-", "_")) for f, _, _ in _FLAGS[2:]}
    if params.get("keep_dtype"):
        from ascendpipe.precision.settings import keep_dtype_arg

        params["keep_dtype"] = keep_dtype_arg(params["keep_dtype"])
    return {k: v for k, v in params.items() if v is not None}  # a flag given "" is refused (check_params)


def _check(args: argparse.Namespace) -> None:
    """Before anything is written: the output apart from every input, config files that are text,
    the model an ONNX file."""
    import os

    from ascendpipe.cli import guard
    from ascendpipe.errors import Location, UserError

    from ascendpipe.precision.settings import check_params

    # atc's checks of its options, on either backend, before anything is read or written: a flag given
    # empty, a SoC name holding a newline, both precision modes, allow_hf32 with a switch twice
    check_params(params_from_args(args), spelled=lambda key: "--" + key.replace("_", "-"))
    if str(args.framework).strip() != "5":
        names = {"0": "Caffe", "1": "MindSpore", "3": "TensorFlow"}
        what = names.get(str(args.framework).strip(), "not ONNX")
        raise UserError(f"--framework={args.framework} ({what}): ascendpipe converts ONNX models only (--framework=5); "
                        "export the model to ONNX first", Location(field="--framework"))
    files = {"--model": args.model}
    for flag in ("keep-dtype", "fusion-switch-file", "insert-op-conf", "modify-mixlist", "tune-bank",
                 "customize-dtypes", "op-precision-mode"):
        value = getattr(args, flag.replace("-", "_"))
        if value and os.path.exists(value):  # --keep-dtype may be a list of op names instead
            files[f"--{flag}"] = value
    guard.refuse_output_over_inputs(args.output, files)
    for flag in ("--keep-dtype", "--fusion-switch-file", "--insert-op-conf", "--customize-dtypes"):
        guard.text_file(files.get(flag), flag)
    if args.backend != "ascend":
        if args.soc_version is not None:  # atc refuses an unknown SoC itself; the emulation says so here
            from ascendpipe.errors import Location, UserError
            from ascendpipe.precision.atc_passes import soc_version_problem

            problem = soc_version_problem(args.soc_version)
            if problem:
                raise UserError(f"--soc-version {problem}", Location(field="--soc-version"))
        guard.model_file(args.model)
        if args.tune_bank:
            from ascendpipe.backends.onnxruntime.tune_bank import read_bank

            read_bank(args.tune_bank)  # a bank the next infer would refuse, refused before anything is written


def _shown(value) -> str:
    text = value if isinstance(value, str) else ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def main(args: argparse.Namespace) -> int:
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.errors import Location, UserError
    from ascendpipe.precision.settings import resolve

    _check(args)
    if args.backend == "ascend":
        from ascendpipe.backends.ascend.standalone import run

        result = run("convert", params_from_args(args), {"model": args.model}, Path(args.output))
        print(f"{Path(args.output) / 'model.om'}: {result.metrics['om_ops']} OM ops, {result.metrics['fused_ops']} fused")
        print(f"  atc: {result.info['atc_cmdline']}")
        return 0
    params = params_from_args(args)
    try:
        settings = resolve(params)
        result = convert_model(Path(args.model), Path(args.output), settings, allow_custom_ops=args.allow_custom_ops,
                               shape_params=params)
    except UserError as err:  # about one flag's value (keep_dtype names ops the model lacks): named by the flag
        field = (err.location.field or "").split(".")[0]
        if err.location.file or field not in params:
            raise
        raise UserError(err.message, Location(file=f"--{field.replace('_', '-')} {_shown(params[field])}"),
                        hint=err.hint) from None
    for line in result.warnings:
        print(line, file=sys.stderr)
    c = result.counts
    if args.json:
        from ascendpipe.cli.common import print_json

        print_json({"model": str(result.model_path), "output": str(result.out_dir),
                    "precision_mode": settings.precision_mode_v2 or settings.precision_mode, "ops": dict(c),
                    "remedy_files": {k: str(v) for k, v in sorted(result.remedy_files.items())},
                    "atc_argv": list(result.atc_argv)})
        return 0
    bf16 = f", {c['bfloat16']} ops bf16" if c.get("bfloat16") else ""
    print(f"{result.model_path}: {c['float16']} ops fp16{bf16}, {c['float32']} ops fp32, {c['other']} non-float "
          f"({settings.precision_mode_v2 or settings.precision_mode})")
    for name, path in sorted(result.remedy_files.items()):
        print(f"  {name}: {path}")
    return 0
