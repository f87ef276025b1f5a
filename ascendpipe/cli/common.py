"""Small helpers shared by the CLI commands."""

from __future__ import annotations

import json
import sys

from ascendpipe.backends import registry as backends


def add_pipeline_args(p, *, stages: bool = False) -> None:
    p.add_argument("pipeline", help="the pipeline YAML file")
    if stages:
        p.add_argument("stages", nargs="*", metavar="STAGE", help="only these stages (and what they need); a base name means all its variants")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a value, e.g. params.n=32 or stages.convert.params.precision_mode=allow_fp32_to_fp16 (repeatable)")
    p.add_argument("--backend", choices=backends.names(), help="toolchain backend (default: the pipeline's, else onnxruntime)")


def add_remote_args(p, *, optional: bool = True) -> None:
    p.add_argument("--remote", default=None, metavar="URL",
                   help="remote cache (s3://BUCKET/PREFIX, a folder...) instead of .ascendpipe/config.json's or the pipeline's `remote:`")
    if optional:
        p.add_argument("--no-remote", action="store_true", help="ignore the remote cache")


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (argparse says the refusal in its one line)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, given {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, given {text!r}")
    return value


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0, given {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number above 0, given {text!r}")
    return value


def use_color(stream) -> bool:
    """ANSI colours only on a terminal, never with NO_COLOR set or TERM=dumb, as ``build`` paints
    (``ascendpipe.terminal``)."""
    from ascendpipe import terminal

    return terminal.colour(stream)


def batch_axis_item(text: str) -> tuple[str, int | None]:
    """An argparse type: NAME=AXIS (a whole number from 0, or none for an input without a batch axis)."""
    import argparse

    name, sep, axis = text.rpartition("=")
    axis = axis.strip().lower()
    if not sep or not name or not (axis.isdigit() or axis in ("none", "null")):
        raise argparse.ArgumentTypeError(f"expected NAME=AXIS (AXIS 0, 1, ... or none), given {text!r}")
    return name, None if axis in ("none", "null") else int(axis)


def add_batch_axes_arg(parser) -> None:
    """``--batch-axes NAME=AXIS`` (repeatable): the standalone twin of a stage's ``batch_axes``."""
    parser.add_argument("--batch-axes", "--batch_axes", dest="batch_axes", action="append", type=batch_axis_item,
                        metavar="NAME=AXIS", help="the batch axis of an input whose batch is not on axis 0 "
                        "(a state [2,B,H]: state=1; none: one value for every batch); repeatable")


def batch_axes(args) -> dict | None:
    """The ``--batch-axes`` given, as a stage's ``batch_axes`` mapping (None when none)."""
    items = getattr(args, "batch_axes", None)
    return dict(items) if items else None


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def fmt_value(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = lambda cells: "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()
    out = [line(header), line(["-" * w for w in widths])]
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"


def note_overrides_file(pipeline_path: str) -> None:
    """Say on stderr when the pipeline's overrides file (written by ``checkout``) applies."""
    import os

    from ascendpipe.config.overrides import overrides_file

    path = overrides_file(pipeline_path)
    if os.path.exists(path):
        sys.stderr.write(f"note: the --set lines of {path} apply (written by `ascendpipe checkout`); delete it to build the pipeline as written\n")
