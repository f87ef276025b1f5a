"""``ascendpipe quantize``: int8 calibration of one model outside a pipeline (the quantize stage's library).

    ascendpipe quantize --model M.onnx --calibration calib/ --output out/ [--batch-num 1 --batch-size 16]
        [--skip-layers a,b] [--activation-offset false] [--calibration-config quant.cfg] [--backend ascend --dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "int8 calibration (AMCT-style): fake-quant QDQ model, deployable model, scales and record"


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, given {text!r}")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="the fp32 .onnx model (or a directory holding one)")
    parser.add_argument("--calibration", required=True, help=".npy/.npz or a folder of them: representative inputs")
    parser.add_argument("--output", required=True, help="output directory (model.onnx, deploy/, quant.cfg, scales.json, quantize.json)")
    parser.add_argument("--batch-num", "--batch_num", dest="batch_num", type=int, help="calibration batches (default 1)")
    parser.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int, help="samples per batch (default 16)")
    parser.add_argument("--activation-offset", "--activation_offset", dest="activation_offset", type=_bool,
                        help="true: asymmetric activations (AMCT's default); false: symmetric")
    parser.add_argument("--skip-layers", "--skip_layers", dest="skip_layers", type=_names, help="layers kept in float, comma-separated")
    parser.add_argument("--skip-layer-types", "--skip_layer_types", dest="skip_layer_types", type=_names,
                        help="layer types kept in float, e.g. Gemm")
    parser.add_argument("--calibration-config", "--calibration_config", dest="calibration_config",
                        help="AMCT simple config file (calibration_config_onnx.proto text format)")
    parser.add_argument("--calibrate-method", "--calibrate_method", dest="calibrate_method",
                        choices=["minmax", "entropy", "percentile"], help="onnxruntime backend's calibrator (default minmax)")
    parser.add_argument("--backend", choices=["onnxruntime", "ascend"], default="onnxruntime",
                        help="onnxruntime (emulation, default) or ascend (runs amct_onnx)")
    parser.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                        help="print the command lines it would run (the amct_onnx argv on ascend) and stop")
    parser.add_argument("--json", action="store_true", help="print the record (quantize.json) as JSON")


def main(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from ascendpipe.cli import guard
    from ascendpipe.contract import StageContext
    from ascendpipe.stages.registry import get_kind

    guard.refuse_output_over_inputs(args.output, {"--model": args.model, "--calibration": args.calibration,
                                                  "--calibration-config": args.calibration_config})
    guard.text_file(args.calibration_config, "--calibration-config")
    if args.backend != "ascend":
        guard.model_file(args.model)
    params = {k: getattr(args, k) for k in ("batch_num", "batch_size", "activation_offset", "skip_layers",
                                            "skip_layer_types", "calibration_config", "calibrate_method")
              if getattr(args, k) is not None}
    output = Path(args.output).absolute()
    kind = get_kind("quantize")
    cwd = Path.cwd()

    def context(out_dir: Path, log) -> StageContext:
        return StageContext(name="quantize", kind="quantize", workspace=cwd, out_dir=out_dir, final_out_dir=output,
                            params=params, inputs={"model": Path(args.model).absolute(),
                                                   "calibration": Path(args.calibration).absolute()},
                            upstream={}, backend=args.backend, log=log)

    if args.dry_run:
        for argv in kind.commands(context(output, sys.stderr)):
            print(" ".join(argv))
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        with open(tmp / "quantize.log", "w") as log:
            kind.run(context(tmp, log))
        if output.exists():
            shutil.rmtree(output)
        tmp.rename(output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record = json.loads((output / "quantize.json").read_text())
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print(f"{output / 'model.onnx'}: {len(record['quantized_layers'])} layers int8 "
              f"({record.get('calibration_method')}, {record['calibration']['samples']} samples, "
              f"sha256 {record['calibration']['sha256'][:12]}); kept in float: {', '.join(record['skipped_layers']) or 'none'}")
        print(f"  deployable: {output / 'deploy' / 'model.onnx'}; scales: {output / 'scales.json'}")
    return 0
