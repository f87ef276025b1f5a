"""ascendpipe validate"""

from __future__ import annotations

from ascendpipe.cli.common import add_pipeline_args, print_json

HELP = "check a pipeline file (YAML, templates, schema, graph) without building"


def add_arguments(p) -> None:
    add_pipeline_args(p)
    p.add_argument("--json", action="store_true", help='print {"ok": true, "pipeline", "backend", "stages": [NAME...]}; an error is still one line on stderr, exit 2')


def main(args) -> int:
    from ascendpipe.api import validate

    info = validate(args.pipeline, set=args.overrides, backend=args.backend)
    if args.json:
        print_json({"ok": True, **info})
        return 0
    print(f"{info['pipeline']}: ok, {len(info['stages'])} stages on backend {info['backend']}: {', '.join(info['stages'])}")
    return 0
