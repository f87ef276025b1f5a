"""``--set KEY=VALUE`` overrides, applied to the parsed pipeline before anything else.

KEY is a dotted path into the pipeline document (``params.x``, ``stages.convert.params.precision_mode``,
``stages.convert.matrix.fp16.precision_mode``); VALUE is parsed as a YAML scalar or flow collection,
so ``n=32`` is a number and ``keep_dtype=[a,b]`` a list. A variant of a list-form matrix
(``matrix: {precision_mode: [force_fp16, ...]}``) is named as in a named one
(``stages.convert.matrix.force_fp16.keep_dtype=[a]``): the matrix becomes the named form first.
"""

from __future__ import annotations


from ascendpipe.errors import Location, UserError


def parse_override(text: str, origin: Location | None = None) -> tuple[list[str], object]:
    """``KEY=VALUE`` -> (key parts, value). The value goes through the pipeline loader, with its
    limits (no recursive aliases, alias bombs or deep nesting). Errors are located at ``origin``
    (the ``--set`` argument, or the overrides file's line)."""
    from ascendpipe.config.yamlmarks import load_yaml

    origin = origin or Location(file=f"--set {text}")
    key, eq, raw = text.partition("=")
    parts = key.strip().split(".")
    if not eq or not key.strip() or not all(p.strip() for p in parts):
        raise UserError(f"--set expects KEY=VALUE with a dotted KEY (e.g. params.n=32), got '{text}'", origin)
    try:
        value = load_yaml(raw, "--set")[0] if raw.strip() else ""
    except UserError as err:
        raise UserError(f"value '{raw}' is not valid YAML: {err.message}", origin) from None
    return [p.strip() for p in parts], value


ADD_PREFIX = "+"  # `--set +stages.S.matrix.NEW.p=v` adds a variant; without it a new variant name is refused


def _close(name: str, names) -> str:
    import difflib

    close = difflib.get_close_matches(name, [str(n) for n in names], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _unshared_copy(obj):
    """A copy of a YAML tree in which no two places share an object. ``copy.deepcopy`` keeps YAML
    aliases shared (``params: *common`` in two stages is one dict in both copies), so a ``--set`` of
    one stage's param would change every stage that names the anchor."""
    if isinstance(obj, dict):
        return {k: _unshared_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unshared_copy(v) for v in obj]
    return obj


def apply_overrides(data: dict, overrides, marks=None, origins=None) -> dict:
    """``overrides`` applied to a copy of ``data``. ``origins`` (one ``Location`` per override;
    default: the ``--set`` argument) is where an error in it is blamed; with ``marks``, the paths
    each override replaced are recorded there, so later errors about those values point at it."""
    if not overrides:
        return data
    data = _unshared_copy(data)
    origins = list(origins or [])
    for index, text in enumerate(overrides):
        origin = origins[index] if index < len(origins) else Location(file=f"--set {text}")
        adding = text.lstrip().startswith(ADD_PREFIX)
        if adding:
            text = text.lstrip()[len(ADD_PREFIX):]
        parts, value = parse_override(text, origin)
        if parts[0] not in ("params", "stages", "backend", "thresholds", "env", "build_dir"):
            raise UserError(
                "the key must start with params., stages., thresholds., env, build_dir or backend", origin)
        if not adding:
            _refuse_new_param(data, parts, text, origin)
        if parts[0] == "stages":
            if len(parts) < 3:
                raise UserError("expected stages.NAME.FIELD=VALUE", origin)
            stages = data.get("stages") or {}
            if parts[1] not in stages:
                known = ", ".join(map(str, stages)) or "none"
                raise UserError(f"unknown stage '{parts[1]}'{_close(parts[1], stages)}; stages: {known}", origin)
            if parts[2] == "matrix" and len(parts) >= 4 and not adding:
                raw = stages[parts[1]]
                matrix = raw.get("matrix") if isinstance(raw, dict) else None
                names = [str(k) for k in matrix] if isinstance(matrix, dict) else []
                product = bool(names) and all(isinstance(v, list) for v in matrix.values())
                variant = _product_overlays(matrix).get(parts[3]) if product and len(parts) >= 5 else None
                if variant is not None:
                    # a variant of a list-form matrix (its values joined by '-'): the matrix becomes the
                    # named form with the same variants and params, so this one variant can change alone
                    raw["matrix"] = {name: dict(overlay) for name, overlay in _product_overlays(matrix).items()}
                    names = list(raw["matrix"])
                if parts[3] not in names:
                    what = "matrix param" if product else "variant"
                    raise UserError(
                        f"stage '{parts[1]}' has no {what} '{parts[3]}'{_close(parts[3], names)}; it has: "
                        f"{', '.join(names) or 'none'}. To add {'one (it adds variants)' if product else 'a variant'} "
                        f"on purpose: --set {ADD_PREFIX}{text}", origin)
        node = data
        for depth, part in enumerate(parts[:-1]):
            if isinstance(node, dict) and part not in node:
                part = _existing_key(node, part)
                parts[depth] = part
            child = node.get(part) if isinstance(node, dict) else None
            if child is None:
                child = {}
                node[part] = child
                if marks is not None:  # what an override created is blamed on it
                    marks.overrides[tuple(parts[:depth + 1])] = origin
            if not isinstance(child, dict):
                raise UserError(f"'{part}' is not a mapping", origin)
            node = child
        last = _existing_key(node, parts[-1])
        parts[-1] = last
        node[last] = value
        if marks is not None:
            marks.overrides[tuple(parts)] = origin
            if isinstance(value, bool):
                marks.bools[tuple(parts)] = text.partition("=")[2].strip()
    return data


def _product_overlays(matrix: dict) -> dict[str, dict]:
    """A list-form matrix's variants: name ('v1-v2', as ``config.matrix`` names them) -> its params."""
    import itertools

    keys = list(matrix)
    return {"-".join(str(v) for v in combo): dict(zip(keys, combo)) for combo in itertools.product(*matrix.values())}


def _kind_params(data: dict) -> set[str]:
    """Every param the kinds of the pipeline's stages take (a top-level param reaches those stages)."""
    from ascendpipe.stages.registry import get_kind

    known: set[str] = set()
    for raw in (data.get("stages") or {}).values():
        kind_name = raw.get("kind") if isinstance(raw, dict) else None
        if not isinstance(kind_name, str) or kind_name == "run":
            continue
        try:
            kind = get_kind(kind_name)
        except Exception:  # an unknown kind is the loader's error, located there
            continue
        known.update((kind.params_schema.get("properties") or {}).keys())
    return known


def _read_in_templates(node) -> set[str]:
    """The param names the templates under ``node`` read (``params.NAME``, ``params['NAME']``): a
    param a template reads but the pipeline leaves to ``--set`` is no typo."""
    import re

    found: set[str] = set()
    if isinstance(node, str):
        if "params" in node:
            found.update(m.group(1) or m.group(2) for m in re.finditer(r"params\.(\w+)|params\[['\"](\w+)['\"]\]", node))
    elif isinstance(node, dict):
        for value in node.values():
            found |= _read_in_templates(value)
    elif isinstance(node, list):
        for value in node:
            found |= _read_in_templates(value)
    return found


def _refuse_new_param(data: dict, parts: list[str], text: str, origin: Location) -> None:
    """``--set params.epoch=2`` where the pipeline has ``epochs``: a typo that would add a param no
    stage reads, and build nothing new. A param the pipeline does not have is refused, the close one
    suggested (as a variant name is); ``--set +KEY=VALUE`` adds one on purpose. Checked: top-level
    ``params.X`` (known: the pipeline's params, those its templates read and those its stages' kinds
    take) and a run stage's ``stages.S.params.X`` / ``stages.S.matrix.V.X`` (known: its own, the
    top-level ones, its matrix's and those its templates read); a kind stage's params are checked
    against the kind by the loader."""
    top = data.get("params") if isinstance(data.get("params"), dict) else {}
    if parts[0] == "params" and len(parts) == 2:
        names = [str(k) for k in top]
        if parts[1] in names or parts[1] in _kind_params(data) or parts[1] in _read_in_templates(data):
            return
        where = "the pipeline has no param"
    elif parts[0] == "stages" and ((len(parts) == 4 and parts[2] == "params")
                                   or (len(parts) == 5 and parts[2] == "matrix")):
        raw = (data.get("stages") or {}).get(parts[1])
        if not isinstance(raw, dict) or raw.get("kind", "run") != "run":
            return
        own = raw.get("params") if isinstance(raw.get("params"), dict) else {}
        matrix = raw.get("matrix") if isinstance(raw.get("matrix"), dict) else {}
        axes = [k for k, v in matrix.items() if isinstance(v, list)]
        overlay = [k for v in matrix.values() if isinstance(v, dict) for k in v]
        names = [str(k) for k in dict.fromkeys(list(own) + list(top) + axes + overlay)]
        if parts[-1] in names or parts[-1] in _read_in_templates(raw):
            return
        where = f"stage '{parts[1]}' has no param"
    else:
        return
    name = parts[-1]
    raise UserError(f"{where} '{name}'{_close(name, names)}; it has: {', '.join(names) or 'none'}. "
                    f"To add one on purpose: --set {ADD_PREFIX}{text}", origin)


def _existing_key(node: dict, part: str):
    """The key of ``node`` that ``part`` names: itself, or a non-string key written the same
    (`matrix: {1: ...}` is reached by ``matrix.1``)."""
    if part in node:
        return part
    for key in node:
        if not isinstance(key, bool) and str(key) == part:
            return key
    return part


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
    return [line for _, line in read_overrides_lines(pipeline_path)]


def read_overrides_lines(pipeline_path) -> list[tuple[int, str]]:
    """(line number, ``KEY=VALUE``) of each line of the pipeline's overrides file."""
    path = overrides_file(pipeline_path)
    from ascendpipe.config.paths import special_file

    special = special_file(path)
    if special:  # never opened: a FIFO would block every command
        raise UserError(f"the overrides file {path} is {special}; remove it", Location(file=path))
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
        lines.append((number, line))
    return lines
