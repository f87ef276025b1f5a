"""``--set KEY=VALUE`` overrides, applied to the parsed pipeline before anything else.

KEY is a dotted path into the pipeline document (``params.x``, ``stages.convert.params.precision_mode``,
``stages.convert.matrix.fp16.precision_mode``); VALUE is parsed as a YAML scalar or flow collection,
so ``n=32`` is a number and ``keep_dtype=[a,b]`` a list.
"""

from __future__ import annotations

import copy

from ascendpipe.errors import Location, UserError


def parse_override(text: str) -> tuple[list[str], object]:
    """``KEY=VALUE`` -> (key parts, value). The value goes through the pipeline loader, with its
    limits (no recursive aliases, alias bombs or deep nesting)."""
    from ascendpipe.config.yamlmarks import load_yaml

    key, eq, raw = text.partition("=")
    parts = key.strip().split(".")
    if not eq or not key.strip() or not all(p.strip() for p in parts):
        raise UserError(f"--set expects KEY=VALUE with a dotted KEY (e.g. params.n=32), got '{text}'",
                        Location(file="--set"))
    try:
        value = load_yaml(raw, "--set")[0] if raw.strip() else ""
    except UserError as err:
        raise UserError(f"--set {key}: value '{raw}' is not valid YAML: {err.message}", Location(file="--set")) from None
    return [p.strip() for p in parts], value


def apply_overrides(data: dict, overrides, marks=None) -> dict:
    if not overrides:
        return data
    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        if parts[0] not in ("params", "stages", "backend", "thresholds", "env", "build_dir"):
            raise UserError(
                f"--set {text}: the key must start with params., stages., thresholds. or backend",
                Location(file="--set"),
            )
        if parts[0] == "stages":
            if len(parts) < 3:
                raise UserError(f"--set {text}: expected stages.NAME.FIELD=VALUE", Location(file="--set"))
            stages = data.get("stages") or {}
            if parts[1] not in stages:
                known = ", ".join(stages) or "none"
                raise UserError(f"--set {text}: unknown stage '{parts[1]}'; stages: {known}", Location(file="--set"))
        node = data
        for part in parts[:-1]:
            child = node.get(part) if isinstance(node, dict) else None
            if child is None:
                child = {}
                node[part] = child
            if not isinstance(child, dict):
                raise UserError(f"--set {text}: '{part}' is not a mapping", Location(file="--set"))
            node = child
        node[parts[-1]] = value
    return data


# -- the pipeline's overrides file -------------------------------------------------------------
# ``pipelines/reid.yaml`` -> ``pipelines/reid.overrides``: ``--set`` lines that every command
# resolving the pipeline (build, status, dag, validate, fix) applies before the command line's own
# ``--set``. ``ascendpipe checkout RUN`` writes it; people may edit or delete it.

OVERRIDES_SUFFIX = ".overrides"


def overrides_file(pipeline_path) -> str:
    import os

    path = str(pipeline_path)
    stem, ext = os.path.splitext(path)
    return (stem if ext in (".yaml", ".yml") else path) + OVERRIDES_SUFFIX


def read_overrides_file(pipeline_path) -> list[str]:
    """The ``KEY=VALUE`` lines of the pipeline's overrides file (none when it does not exist).

    Blank lines and lines starting with ``#`` are skipped; a line without ``=`` is a located error.
    """
    path = overrides_file(pipeline_path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the overrides file {path}: {exc}", Location(file=path)) from None
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, _ = line.partition("=")
        if not eq or not key.strip():
            raise UserError(
                f"expected KEY=VALUE (a --set line), got '{line}'; fix or delete this file",
                Location(file=path, line=number),
            )
        lines.append(line)
    return lines
