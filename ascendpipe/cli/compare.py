"""``ascendpipe compare``: per-op accuracy of a target against a golden, msit-style."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ascendpipe.backends import registry as backends

HELP = "compare a converted model or dump against the fp32 golden, op by op (msit metrics, first failure, advice)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ascendpipe.cli.common import add_batch_axes_arg

    parser.add_argument("--golden", required=True, type=Path, help="fp32 .onnx model or golden dump dir")
    parser.add_argument("--target", required=True, type=Path, help="converted model dir, .onnx, or dump dir")
    parser.add_argument("--input", type=Path, default=None, help=".npy (one input), .npz keyed by input name, or a "
                        "directory of them: every batch is compared, each op shown at its worst batch; "
                        "default: a seeded random input")
    parser.add_argument("--golden-input", "--golden_input", dest="golden_input", type=Path, default=None,
                        help="the golden's own input (training-preprocessed float data) when the target takes other "
                        "data; with AIPP it is checked against the device's preprocessing first")
    parser.add_argument("--output", type=Path, default=None, help="write result.csv, result.json, report.html and the "
                        "first failure's remedy files (keep_dtype.cfg, fusion_switch.cfg) here")
    parser.add_argument("--check", action="store_true", help="exit 1 when the outputs fail the thresholds (for CI); "
                        "without it the exit status is 0 whatever the verdict")
    parser.add_argument("--dump-keep", "--dump_keep", dest="dump_keep", choices=["rerun", "failing", "all"], default="rerun",
                        help="with --output, the dumps' tensors kept there: rerun (default: the failing ops' and those "
                        "feeding the first failure), failing, or all")
    parser.add_argument("--dump-budget", "--dump_budget", dest="dump_budget", default="auto",
                        help="the disk the dumps may take (500M, 2G, bytes; none: no limit; default auto: half the "
                        "free space): past it both sides are dumped as statistics and only the tensors around the "
                        "first failure in full")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout and nothing else")
    parser.add_argument("--strategy", default="first-overall", choices=["first-overall", "first-per-output", "all"])
    parser.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    add_batch_axes_arg(parser)
    parser.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                        help="override a threshold: cosine, relative_euclidean, kl, rmse, mean_relative_error")
    parser.add_argument("--backend", choices=backends.names(), default=backends.DEFAULT,
                        help="ascend: the target is an OM dir (dumped on the NPU with ais_bench + acl.json)")
    parser.add_argument("--convert-stage", "--convert_stage", dest="convert_stage", default=None,
                        help="stage name used in the advice's --set lines (default: the stage a dump stage's "
                        "target names in its source.json, else convert)")


def _parse_thresholds(items: list[str]) -> dict:
    from ascendpipe.errors import Location, UserError

    result = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            result[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise UserError(f"--threshold expects NAME=NUMBER, got '{item}'", Location(field="--threshold"))
    return result


def main(args: argparse.Namespace) -> int:
    from ascendpipe.cli.common import batch_axes
    from ascendpipe.compare import thresholds as thr
    from ascendpipe.backends.compare_sources import run_compare
    from ascendpipe.cli.common import use_color
    from ascendpipe.compare.writers import json_text, terminal_text, write_results

    from ascendpipe.cli import guard

    guard.refuse_output_over_inputs(args.output, {"--golden": args.golden, "--target": args.target,
                                                  "--input": args.input, "--golden-input": args.golden_input})
    golden = guard.onnx_side(args.golden, "--golden")
    if args.backend != "ascend":
        guard.onnx_side(args.target, "--target")
    if golden is not None and args.input is None:
        guard.random_input_size(golden, None, flag="--golden")
    limits = thr.resolve(_parse_thresholds(args.threshold))
    from ascendpipe.backends.dump_budget import parse_budget
    from ascendpipe.errors import Location

    budget = parse_budget(args.dump_budget, Location(field="--dump-budget"))  # a bad size: refused before any dump
    with tempfile.TemporaryDirectory(prefix="ascendpipe-compare-") as scratch:
        work = args.output or Path(scratch)
        result, note = run_compare(args.golden, args.target, input_path=args.input, work_dir=work, limits=limits,
                                   strategy=args.strategy, seed=args.seed, convert_stage=args.convert_stage,
                                   golden_inputs=args.golden_input, backend=args.backend, log=sys.stderr,
                                   batch_axes=batch_axes(args), keep=args.dump_keep if args.output else "all",
                                   dump_budget=budget)
        if args.output:
            write_results(result, args.output, note)
    apply = _apply(result, args)
    if args.json:
        import json

        doc = json.loads(json_text(result, note))
        if apply is not None:
            doc["apply"] = apply
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(with_output_cosine(terminal_text(result, color=use_color(sys.stdout), input_note=note), result))
        if args.output:
            sys.stdout.write(f"results: {args.output / 'result.csv'}, {args.output / 'result.json'}, {args.output / 'report.html'}\n")
        for line in (apply or {}).get("lines", []):
            sys.stdout.write(line + "\n")
    return 1 if args.check and not outputs_pass(result) else 0


def output_cosine_line(result: dict) -> str:
    """``output cosine: 0.999995 (...)``: the model outputs' cosine, the figure a build's summary prints for a
    compare stage (``output_cosine``, the lowest over the outputs); n/a where no output was compared."""
    value = result["summary"].get("output_cosine")
    outputs = [r for r in result["rows"] if r.get("is_output") and r.get("side") == "both" and not r.get("empty")]
    if value is None or not outputs:
        return "output cosine: n/a (no model output was compared)"
    if len(outputs) == 1:
        where = f"the model output {outputs[0].get('tensor') or outputs[0]['op_name']}"
    else:
        worst = min(outputs, key=lambda r: _exact(r))
        where = f"the lowest of the model's {len(outputs)} outputs: {worst.get('tensor') or worst['op_name']}"
    return f"output cosine: {value:.6g} ({where}; `build` prints it as output_cosine)"


def _exact(row: dict) -> float:
    import math

    value = row.get("exact_cosine") if row.get("exact_cosine") is not None else row.get("cosine")
    return 0.0 if value is None or math.isnan(value) else value


def with_output_cosine(text: str, result: dict) -> str:
    """The compare's console text with the output cosine after its verdict (before the counts)."""
    import re

    lines = text.split("\n")
    plain = [re.sub(r"\033\[[0-9;]*m", "", line) for line in lines]
    at = next((i for i, line in enumerate(plain) if line.startswith("compared ")), len(lines) - 1)
    lines.insert(at, output_cosine_line(result))
    return "\n".join(lines)


def outputs_pass(result: dict) -> bool:
    """The verdict ``--check`` gates on (the terminal's first line): no failure reaches an output."""
    return result["first_failure"] is None and result["summary"].get("outputs_pass") is not False


def _apply(result: dict, args: argparse.Namespace) -> dict | None:
    """The first failure's remedy files, written into --output, and the convert line that applies
    them; without --output, what to add to get them. None when the advice has no remedy file."""
    from ascendpipe.cli.apply_line import apply_lines, remedy_items, write_remedy_files

    files = remedy_items((result["first_failure"] or {}).get("advice") or [])
    if not files:
        return None
    if not args.output:
        names = ", ".join(files)
        return {"files": {}, "lines": [f"add --output DIR to have {names} written there, with the convert line "
                                       "that applies them outside a pipeline"]}
    written = write_remedy_files(args.output, files)
    # the impl-mode item is an alternative to keeping the op ("or ..."): its own line, not joined to the keep line
    alternative = {name: path for name, path in written.items() if name == "op_precision_mode.ini" and len(written) > 1}
    main = {name: path for name, path in written.items() if name not in alternative}
    lines = apply_lines(main, target=args.target, golden=args.golden, new_output=args.output / "converted",
                        backend=args.backend)
    if alternative:
        other = apply_lines(alternative, target=args.target, golden=args.golden, new_output=args.output / "converted",
                            backend=args.backend)
        lines += ["or, the data kept in fp16 and the kernel given high_precision instead:", *other[1:]]
    lines.append("  then check it: " + _check_line(args))
    return {"files": {name: str(path) for name, path in written.items()}, "lines": lines,
            "convert": lines[1].strip()}


def _check_line(args: argparse.Namespace) -> str:
    import shlex

    words = ["ascendpipe", "compare", "--golden", str(args.golden), "--target", str(args.output / "converted")]
    if args.input is not None:
        words += ["--input", str(args.input)]
    if args.golden_input is not None:
        words += ["--golden-input", str(args.golden_input)]
    if args.backend != "onnxruntime":
        words += ["--backend", args.backend]
    return shlex.join(words + ["--check"])
