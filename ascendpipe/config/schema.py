"""The pipeline JSON Schema and the translation of schema errors into located one-line messages.

The schema is assembled from the generic stage shape plus each kind's ``params_schema`` so that the
kinds stay the one source of truth. ``schemas/pipeline.schema.json`` is this schema written out for
editors (``editor_schema``: a param may be a template there, as the loader renders it before checking); ``tests/engine/test_schema_file.py`` checks it is current (``python -m
ascendpipe.config.schema > schemas/pipeline.schema.json`` regenerates it).
"""

from __future__ import annotations

import json

from ascendpipe.errors import UserError

SCHEMA_ID = "https://ascendpipe.dev/schemas/pipeline.schema.json"

RESERVED_STAGE_FIELDS = {"kind", "params", "matrix", "cmd", "deps", "outs", "metrics", "desc", "always_changed", "resources"}

RESOURCES_SCHEMA = {
    "type": "object",
    "description": "What a scale-out executor (--executor ray) reserves for the stage: NPU and CPU counts, memory "
    "(bytes, or a string such as 4GB or 512MiB), and any custom Ray resource. Not part of the stage key.",
    "properties": {
        "NPU": {"type": "number", "minimum": 0},
        "CPU": {"type": "number", "minimum": 0},
        "GPU": {"type": "number", "minimum": 0},
        "memory": {"type": ["integer", "string"], "minimum": 0},
    },
    "additionalProperties": {"type": "number", "minimum": 0},
}


def _stage_schema(kind_names: list[str]) -> dict:
    return {
        "type": "object",
        "required": ["kind"],
        "properties": {
            "kind": {"enum": kind_names},
            "desc": {"type": "string"},
            "params": {"type": "object"},
            "matrix": {
                "type": "object",
                "minProperties": 1,
                "description": "Either NAME -> params overlay (named variants), or PARAM -> list of values (product).",
            },
            "cmd": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
            "deps": {"type": "array", "items": {"type": "string"}},
            "outs": {"type": "array", "items": {"type": "string"}},
            "metrics": {"type": "string"},
            "always_changed": {"type": "boolean"},
            "resources": RESOURCES_SCHEMA,
        },
    }


def pipeline_schema() -> dict:
    from ascendpipe.backends import registry as backends
    from ascendpipe.stages.registry import get_kind, kind_names

    names = kind_names()
    stage = _stage_schema(names)
    per_kind = []
    for name in names:
        try:
            kind = get_kind(name)
        except UserError:
            continue  # an unavailable kind is reported where a pipeline uses it
        params = dict(kind.params_schema)
        params.pop("required", None)  # a stage's own params may rely on top-level ones
        allowed = sorted(RESERVED_STAGE_FIELDS | set(kind.input_fields))
        if name == "run":
            allowed = sorted(RESERVED_STAGE_FIELDS)
        per_kind.append(
            {
                "if": {"properties": {"kind": {"const": name}}},
                "then": {
                    "properties": {
                        "params": params,
                        **{f: {"type": "string", "description": "a workspace path or a stage name"} for f in kind.input_fields},
                    },
                    "propertyNames": {"enum": allowed},
                },
            }
        )
    stage["allOf"] = per_kind
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "ascendpipe pipeline",
        "type": "object",
        "required": ["stages"],
        "additionalProperties": False,
        "properties": {
            "backend": {"enum": backends.names()},
            "params": {"type": "object"},
            "env": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}},
            "thresholds": {"type": "object", "additionalProperties": {"type": "number"}},
            "build_dir": {"type": "string", "default": "build",
                          "description": "the folder of this pipeline's stage folders and logs; two pipelines of one "
                                         "workspace may not write one folder (give each its own, e.g. build/NAME)"},
            "remote": {"type": "string", "minLength": 1, "description": "shared remote cache URL, e.g. s3://BUCKET/PREFIX"},
            "stages": {
                "type": "object",
                "minProperties": 1,
                "propertyNames": {"pattern": "^(?!.*__)[A-Za-z_][A-Za-z0-9_.-]*$"},  # `__` is the variant separator in folder names (contract.stage_folder)
                "additionalProperties": stage,
            },
        },
    }


def _kind_of(err, root: dict | None) -> str | None:
    """The kind whose ``if``/``then`` branch of ``root`` raised ``err`` (``allOf[i].if.kind.const``)."""
    path = list(err.absolute_schema_path)
    node = root
    try:
        i = path.index("allOf")
        for part in path[:i + 2]:
            node = node[part]
        return node["if"]["properties"]["kind"]["const"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def describe_error(err, root: dict | None = None) -> str:
    """One readable sentence for a jsonschema ValidationError (field named by the caller)."""
    v = err.validator
    value = err.instance
    if v == "enum" and "propertyNames" in list(err.relative_schema_path):
        return unknown_field(value, err.validator_value, _kind_of(err, root))
    if v == "enum":
        allowed = ", ".join(str(x) for x in err.validator_value)
        return f"'{value}' is not one of {allowed}"
    if v == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return f"expected {want}, got {type(value).__name__} {json.dumps(value, default=str)[:60]}"
    if v == "required":
        missing = [k for k in err.validator_value if k not in (value or {})]
        return f"missing required field '{missing[0] if missing else err.validator_value}'"
    if v == "additionalProperties" and isinstance(value, dict):
        known = sorted((err.schema.get("properties") or {}).keys())
        extra = sorted(set(value) - set(known))
        return unknown_field(extra[0] if extra else "?", known)
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{value} violates {v} {err.validator_value}"
    if v == "pattern" and "propertyNames" in list(err.absolute_schema_path) and list(err.absolute_path) == ["stages"]:
        return (f"stage name '{value}' is not allowed: stage names are [A-Za-z_][A-Za-z0-9_.-]* without '__' "
                "('__' separates a variant in folder names)")
    if v == "pattern" and isinstance(value, str) and any(c.isspace() or not c.isprintable() for c in value):
        from ascendpipe.precision.socs import SOC_PATTERN

        if err.validator_value == SOC_PATTERN:  # said as the CLI and the stage say it (precision/settings.py)
            from ascendpipe.precision.settings import soc_problem

            return soc_problem(value).removeprefix("soc_version ")
        return f"{value!r} holds whitespace, which the pattern {err.validator_value} does not allow"
    if v == "pattern":
        return f"'{value}' does not match the pattern {err.validator_value}"
    if v == "propertyNames":
        return f"invalid name: {err.message}"
    if v == "oneOf" and isinstance(value, (int, float, str, bool)):
        return f"{json.dumps(value)} is not a valid value here"
    return err.message


RUN_ONLY_FIELDS = ("cmd", "deps", "outs", "metrics")


def unknown_field(name: str, allowed, kind: str | None = None) -> str:
    """``unknown field 'modle' (did you mean 'model'?); a 'convert' stage takes: ...``: the close name,
    and only the fields that kind takes (its inputs first; cmd/deps/outs/metrics only for `run`)."""
    import difflib

    names = [str(a) for a in allowed]
    if kind and kind != "run":
        names = [n for n in names if n not in RUN_ONLY_FIELDS]
        names = sorted(n for n in names if n not in RESERVED_STAGE_FIELDS) + sorted(n for n in names if n in RESERVED_STAGE_FIELDS)
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown field '{name}'{hint}; {f'a {kind!r} stage takes' if kind else 'allowed'}: {', '.join(names)}"


def field_name(path) -> str:
    parts = [str(p) for p in path if not isinstance(p, int)]
    return parts[-1] if parts else "pipeline"


_validators: dict[int, object] = {}


def validate(instance, schema: dict, on_error, ignore=None) -> None:
    """Validate; for the first (most specific) error call ``on_error(path_tuple, message)``. ``ignore(error)``:
    errors it is true of are left to a later check (a templated value, checked once rendered)."""
    import jsonschema

    key = id(schema)
    validator = _validators.get(key)
    if validator is None:
        validator = jsonschema.Draft202012Validator(schema)
        _validators[key] = validator
    errors = [e for e in validator.iter_errors(instance) if ignore is None or not ignore(e)]
    if not errors:
        return
    best = jsonschema.exceptions.best_match(errors)
    # Errors inside if/then surface at the deepest path; prefer the deepest error for precision.
    deepest = max(errors, key=lambda e: len(list(e.absolute_path)))
    if len(list(deepest.absolute_path)) > len(list(best.absolute_path)):
        best = deepest
    while best.context:
        best = max(best.context, key=lambda e: len(list(e.absolute_path)))
    if best.validator == "required":
        # `stagez:` for `stages:`: the unknown field is the one to point at, not the missing one
        unknown = [e for e in errors if e.validator == "additionalProperties" and list(e.absolute_path) == list(best.absolute_path)]
        if unknown:
            best = unknown[0]
    path = tuple(best.absolute_path)
    if "propertyNames" in list(best.absolute_schema_path) and isinstance(best.instance, str):
        # a bad key: locate the key itself, not the mapping holding it
        path = path + (best.instance,)
    if best.validator == "additionalProperties" and isinstance(best.instance, dict):
        known = set((best.schema.get("properties") or {}).keys())
        extra = sorted(set(best.instance) - known)
        if extra:
            path = path + (extra[0],)
    on_error(path, describe_error(best, schema))


def located_error(marks, path, message, stage=None) -> UserError:
    """``precision_mode 'fp17' is not one of ...`` at the value's ``file:line:col``."""
    if message.startswith(("unknown field", "stage name")):  # about a key: located at the key
        return UserError(message, marks.key_location(path, stage=stage))
    if path:
        sep = " " if message.startswith("'") else ": "
        message = f"{field_name(path)}{sep}{message}"
    return UserError(message, marks.location(path, stage=stage))


TEMPLATE_VALUE = {"type": "string", "pattern": "\\{\\{.*\\}\\}|\\{%.*%\\}",
                  "description": "a Jinja2 template ({{ params.NAME }}): rendered before the value is checked"}


def editor_schema() -> dict:
    """``pipeline_schema`` as an editor reads it: a stage's param may be a template (``soc_version: "{{
    params.soc }}"``), which the loader renders before it checks the value (config/pipeline.py), so each
    kind's param also takes a template string here."""
    import copy

    schema = copy.deepcopy(pipeline_schema())
    for rule in schema["properties"]["stages"]["additionalProperties"]["allOf"]:
        params = rule["then"]["properties"]["params"]
        for name, prop in list((params.get("properties") or {}).items()):
            params["properties"][name] = {"anyOf": [prop, TEMPLATE_VALUE]}
    return schema


if __name__ == "__main__":  # regenerate schemas/pipeline.schema.json
    print(json.dumps(editor_schema(), indent=2, sort_keys=False))
