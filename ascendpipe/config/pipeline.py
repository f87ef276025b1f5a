"""From a pipeline file to resolved stages: overrides, matrix expansion, params overlay, templates,
validation, inputs. Pure apart from reading the file; the DAG checks live in ``graph.dag``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from ascendpipe.backends import registry as backends
from ascendpipe.config import schema as schema_mod
from ascendpipe.config.matrix import Expansion
from ascendpipe.config.model import DEFAULT_BUILD_DIR, Pipeline, Stage, find_workspace
from ascendpipe.config.template import AllowedEnv, LazyParams, RecordingParams, render_tree
from ascendpipe.config.yamlmarks import Marks, decode, load_yaml
from ascendpipe.contract import stage_folder
from ascendpipe.errors import Location, UserError

__all__ = ["load_pipeline", "Pipeline", "Stage", "find_workspace", "DEFAULT_BUILD_DIR"]

# Linux: one argv or environment string is at most 32 pages (include/uapi/linux/binfmts.h), NUL included
MAX_ARG_STRLEN = 32 * 4096


def load_pipeline(
    path: str | Path,
    overrides: list[str] = (),
    backend: str | None = None,
    environ: dict[str, str] | None = None,
) -> Pipeline:
    path = Path(path)
    display = str(path)
    from ascendpipe.config.paths import refuse_special_pipeline_file

    refuse_special_pipeline_file(display)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"pipeline file {display} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{display} is a folder; give the pipeline's YAML file") from None
    except OSError as exc:
        raise UserError(f"cannot read pipeline file {display}: {exc.strerror}") from None
    data, marks = load_yaml(decode(raw, display), display)
    if not isinstance(data, dict):
        raise UserError("a pipeline file must be a mapping with a `stages:` section", Location(display, 1, 1))
    from ascendpipe.config.overrides import apply_overrides, overrides_file

    data = apply_overrides(data, overrides, marks, _origins(path, list(overrides or [])))
    _check_keys(data, marks)
    _stage_booleans(data, marks)
    # a templated value ("{{ params.soc }}") is checked once rendered, with the stage's params (_Resolver._one)
    schema_mod.validate(data, schema_mod.pipeline_schema(), lambda p, m: _raise(marks, p, m, data), ignore=_templated)
    workspace = Path(find_workspace(path))
    from ascendpipe.config.paths import PathRules

    rules = PathRules(str(workspace), protected=[str(path), overrides_file(path)])
    try:
        build_dir = rules.set_build_dir(data.get("build_dir", DEFAULT_BUILD_DIR))
    except UserError as err:
        raise err.with_location(**_loc_parts(marks.location(("build_dir",), field="build_dir"))) from None
    resolver = _Resolver(data, marks, workspace, environ if environ is not None else dict(os.environ), rules)
    stages = resolver.resolve()
    pipeline = Pipeline(
        path=display,
        workspace=str(workspace),
        backend=backend or data.get("backend", backends.DEFAULT),
        build_dir=build_dir,
        thresholds=dict(data.get("thresholds") or {}),
        stages=stages,
        env_names=list(data.get("env") or []),
        marks=marks,
        remote=data.get("remote"),
    )
    if pipeline.backend not in backends.names():
        raise UserError(f"unknown backend '{pipeline.backend}'; known: {', '.join(backends.names())}")
    from ascendpipe.graph.dag import check_graph

    check_graph(pipeline, locate=resolver.locate)
    pipeline.locate = resolver.locate  # where a stage or its out is written (engine/owners.py's errors)
    return pipeline


def _origins(path, overrides: list) -> list:
    """Where each override comes from: the overrides file's lines when ``overrides`` starts with
    them (engine.plan.resolve puts them first), else the ``--set`` argument."""
    from ascendpipe.config.overrides import overrides_file, read_overrides_lines

    try:
        file_lines = read_overrides_lines(path)
    except UserError:
        file_lines = []
    origins = []
    if file_lines and [line for _, line in file_lines] == overrides[:len(file_lines)]:
        origins = [Location(file=overrides_file(path), line=number) for number, _ in file_lines]
    return origins + [Location(file=f"--set {text}") for text in overrides[len(origins):]]


def _yaml_word(key) -> str:
    if isinstance(key, bool):
        return "a boolean"
    if key is None:
        return "null"
    return "a number"


def _check_keys(data: dict, marks: Marks) -> None:
    """Names must be strings: YAML 1.1 reads `on:`/`no:` as booleans and `1234:` as a number, which
    would otherwise crash later or name a stage `True`. Matrix variant names may be numbers."""

    def refuse(path, key, what):
        text = marks.key_text(path) or str(key)
        stage = path[1] if len(path) > 1 and path[0] == "stages" and isinstance(path[1], str) else None
        raise UserError(f"{what} `{text}` is read by YAML as {_yaml_word(key)}; quote it: '{text}':",
                        marks.key_location(path, stage=stage))

    def names(mapping, path, what, allow_numbers=False):
        if not isinstance(mapping, dict):
            return
        for key in mapping:
            if isinstance(key, str):
                continue
            if allow_numbers and isinstance(key, (int, float)) and not isinstance(key, bool):
                continue
            refuse(path + (key,), key, what)

    names(data, (), "field name")
    names(data.get("params"), ("params",), "param name")
    stages = data.get("stages")
    if not isinstance(stages, dict):
        return
    names(stages, ("stages",), "stage name")
    for base, raw in stages.items():
        if not isinstance(raw, dict):
            continue
        here = ("stages", base)
        names(raw, here, "field name")
        names(raw.get("params"), here + ("params",), "param name")
        matrix = raw.get("matrix")
        if isinstance(matrix, dict):
            named = all(isinstance(v, dict) for v in matrix.values())
            names(matrix, here + ("matrix",), "variant name" if named else "param name", allow_numbers=named)
            if named:
                for key, overlay in matrix.items():
                    names(overlay, here + ("matrix", key), "param name")


def _stage_booleans(data: dict, marks: Marks) -> None:
    """`_yaml_booleans` on each stage's own params and named-variant overlays, in place, before the
    pipeline schema (which holds each kind's params schema) sees them."""
    from ascendpipe.stages.registry import get_kind

    for base, raw in (data.get("stages") or {}).items() if isinstance(data.get("stages"), dict) else ():
        if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str) or raw["kind"] == "run":
            continue
        try:
            schema = get_kind(raw["kind"]).params_schema
        except UserError:
            continue  # an unknown kind is reported, located, by the schema
        blocks = [(("stages", base, "params"), raw.get("params"))]
        matrix = raw.get("matrix")
        if isinstance(matrix, dict):
            blocks += [(("stages", base, "matrix", k), v) for k, v in matrix.items()]
        for where, block in blocks:
            if isinstance(block, dict):
                block.update(_yaml_booleans(block, schema, {k: marks.bools.get(where + (k,)) for k in block}))


def _template_of(raw, path: tuple) -> str | None:
    """The template text at ``path`` inside a param's value as written, or None where there is none."""
    from ascendpipe.config.template import needs_render

    for part in path:
        try:
            raw = raw[part]
        except (KeyError, IndexError, TypeError):
            return None
    return raw if isinstance(raw, str) and needs_render(raw) else None


def _templated(error) -> bool:
    """A schema error about a template's text in a stage's params, not the value it renders to (checked,
    rendered, against the kind's schema). Elsewhere (backend, env, build_dir) nothing renders it later."""
    from ascendpipe.config.template import needs_render

    path = list(error.absolute_path)
    return (len(path) > 3 and path[0] == "stages" and path[2] == "params"
            and isinstance(error.instance, str) and needs_render(error.instance))


def _raise(marks, path, message, data=None):
    text = marks.bools.get(tuple(path))
    if text:
        message += f" (YAML 1.1 reads `{text}` as a boolean; quote it: '{text}')"
    stage = path[1] if len(path) > 1 and path[0] == "stages" else None
    raise schema_mod.located_error(marks, path, message, stage=stage)


class _Resolver:
    def __init__(self, data: dict, marks: Marks, workspace: Path, environ: dict, rules):
        self.data = data
        self.marks = marks
        self.workspace = workspace
        self.environ = environ
        self.rules = rules
        self.top_params = dict(data.get("params") or {})
        self.env_names = list(data.get("env") or [])
        self.build_dir = rules.build_dir
        self.raw_stages: dict[str, dict] = data["stages"]
        self.where: dict[tuple, tuple] = {}  # (stage name, workspace path) -> YAML path of its value
        self.dep_where: dict[tuple, tuple] = {}  # (stage name, dep) -> YAML path of the field naming it

    def locate(self, stage: str, path: str | None = None):
        """Where ``stage`` (or its dep/out ``path``) is written: for the graph checks' errors."""
        base = stage.partition("@")[0]
        where = self.where.get((stage, path))
        if where is None:
            return self.marks.key_location(("stages", base), stage=stage)
        return self.marks.location(where, stage=stage)

    # -- resolution ---------------------------------------------------------------------------
    def resolve(self) -> dict[str, Stage]:
        from ascendpipe.stages.registry import get_kind

        kinds = {}
        for base, raw in self.raw_stages.items():
            try:
                kinds[base] = get_kind(raw["kind"])
            except UserError as err:
                raise err.with_location(**_loc_parts(self.marks.location(("stages", base, "kind"), stage=base)))
        self.expansion = Expansion(self.raw_stages, self.marks, lambda base: kinds[base].input_fields)
        resolved: dict[str, Stage] = {}
        for base, raw in self.raw_stages.items():
            for stage in self._expand(base, raw, kinds[base]):
                resolved[stage.name] = stage
        for stage in resolved.values():
            for dep in stage.deps:
                where = self.dep_where.get((stage.name, dep))
                loc = self.marks.location(where) if where else None
                if loc is not None and loc.line and loc.file == self.marks.file:
                    stage.dep_lines[dep] = [loc.line, loc.column]
        return resolved

    def _expand(self, base: str, raw: dict, kind) -> list[Stage]:
        stages = []
        for variant, overlay, where, origin in self.expansion.variants(base):
            name = f"{base}@{variant}" if variant else base
            stages.append(self._one(base, name, variant, raw, kind, dict(overlay), where, origin))
        return stages

    def _one(self, base, name, variant, raw, kind, overlay, overlay_where, choice) -> Stage:
        marks = self.marks
        stage_path = ("stages", base)
        own = dict(raw.get("params") or {})
        sources: dict[str, tuple] = {k: ("params", k) for k in self.top_params}
        sources.update({k: stage_path + ("params", k) for k in own})
        sources.update({k: overlay_where + (k,) for k in overlay})
        raw_merged = {**self.top_params, **own, **overlay}
        accessed: set = set()
        env_used: dict = {}
        out_dir = f"{self.build_dir}/{stage_folder(name)}"
        context = {
            "env": AllowedEnv(self.env_names, self.environ, env_used),
            "stage": {"name": name, "base": base, "variant": variant or "", "out": out_dir},
        }

        def on_error(path, err):
            raise err.with_location(**_loc_parts(marks.location(stage_path + path, stage=name)))

        def on_param_error(path, err):
            where = sources.get(path[0], stage_path + ("params",)) + tuple(path[1:])
            raise err.with_location(**_loc_parts(marks.location(where, stage=name)))

        # Params may be templated too, against the other params, which are rendered first when
        # a template reads them (a param reading a templated param gets its rendered value).
        rendered: dict = {}
        rendering: list = []

        def resolve_param(key):
            if key in rendered:
                return rendered[key]
            if key in rendering:
                cycle = " -> ".join(map(str, rendering[rendering.index(key):] + [key]))
                raise UserError(f"template error: params refer to each other in a cycle: {cycle}",
                                marks.location(sources.get(key, stage_path + ("params",)), stage=name))
            rendering.append(key)
            try:
                value = render_tree(raw_merged[key], context, lambda p, err: on_param_error((key,) + p, err))
            finally:
                rendering.pop()
            rendered[key] = value
            return value

        context["params"] = LazyParams(raw_merged, accessed, resolve_param)
        merged = {k: resolve_param(k) for k in raw_merged}
        context["params"] = RecordingParams(merged, accessed)
        fields = {k: v for k, v in raw.items() if k not in ("params", "matrix", "kind")}
        if kind.name == "run" and "cmd" in fields:
            # the command goes to /bin/sh: every value substituted into it is one quoted word
            cmd = render_tree(fields.pop("cmd"), context, lambda p, err: on_error(("cmd",) + p, err), shell=True)
            fields = render_tree(fields, context, on_error)
            fields["cmd"] = cmd
        else:
            fields = render_tree(fields, context, on_error)

        if kind.name == "run":
            # keyed on its own params (and matrix overlay) plus the top-level ones its templates read
            keyed = {k: merged[k] for k in merged if k in own or k in overlay or k in accessed}
        else:
            known = set((kind.params_schema.get("properties") or {}).keys())
            keyed = {k: v for k, v in merged.items() if k in known and (k in own or k in overlay or k in self.top_params)}
            unknown = sorted(k for k in list(own) + list(overlay) if k not in known)
            if unknown:
                k = unknown[0]
                raise UserError(
                    f"unknown param '{k}' for kind '{kind.name}'; known: {', '.join(sorted(known)) or 'none'}",
                    marks.location(sources[k], stage=name),
                )
            keyed = _yaml_booleans(keyed, kind.params_schema, {k: marks.bools.get(sources.get(k)) for k in keyed})

            def on_schema_error(path, message):
                where = sources.get(path[0], stage_path + ("params",)) + tuple(path[1:]) if path else stage_path
                text = marks.bools.get(where)
                if text and isinstance(keyed.get(path[0]) if len(path) == 1 else None, bool):
                    message += f" (YAML 1.1 reads `{text}` as a boolean; quote it: '{text}')"
                template = _template_of(raw_merged.get(path[0]) if path else None, path[1:])
                if template is not None:  # the error is about what the template rendered
                    message += f" (rendered from '{template}'" + (
                        "; a template renders text: give this param its value without one)"
                        if message.startswith("expected ") else ")")
                raise schema_mod.located_error(marks, where, message, stage=name)

            schema_mod.validate(keyed, kind.params_schema, on_schema_error)
            keyed = _with_defaults(keyed, kind.params_schema)

        stage = Stage(
            name=name,
            base=base,
            variant=variant,
            kind=kind.name,
            params=keyed,
            env_used=env_used,
            line=marks.key_location(stage_path).line,
            always_changed=bool(raw.get("always_changed", False)),
            resources=self._resources(fields.get("resources"), stage_path, name),
        )
        fields.pop("resources", None)
        self._fill_io(stage, fields, kind, choice, stage_path)
        return stage

    def _fill_io(self, stage: Stage, fields: dict, kind, choice: dict, stage_path: tuple) -> None:
        marks = self.marks
        self._check_log(stage, stage_path)
        if kind.name == "run":
            cmd = fields.get("cmd")
            if cmd is None:
                raise UserError("a `run` stage needs `cmd`", marks.location(stage_path, stage=stage.name))
            stage.cmd = cmd if isinstance(cmd, str) else " && ".join(cmd)
            self._check_exec_size(stage, stage_path)
            for extra in sorted(set(fields) - schema_mod.RESERVED_STAGE_FIELDS):
                raise UserError(
                    f"unknown field '{extra}' for kind 'run'; allowed: cmd, deps, outs, params, metrics, matrix, desc",
                    marks.key_location(stage_path + (extra,), stage=stage.name),
                )
            stage.deps = [self._dep(d, stage_path + ("deps", i), stage.name) for i, d in enumerate(fields.get("deps") or [])]
            stage.outs = [self._out(o, stage_path + ("outs", i), stage.name) for i, o in enumerate(fields.get("outs") or [])]
            if fields.get("metrics"):
                stage.metrics_file = self._out(fields["metrics"], stage_path + ("metrics",), stage.name, "metrics file")
                covered = any(stage.metrics_file == o or stage.metrics_file.startswith(o + "/") for o in stage.outs)
                if not covered:  # a metrics file is an output of the stage too
                    stage.outs.append(stage.metrics_file)
            return
        for reserved in ("cmd", "deps", "outs", "metrics"):
            if reserved in fields:
                raise UserError(
                    f"'{reserved}' is only for `run` stages; a '{kind.name}' stage declares its inputs as "
                    f"{', '.join(kind.input_fields) or 'nothing'}",
                    marks.key_location(stage_path + (reserved,), stage=stage.name),
                )
        allowed = set(kind.input_fields) | schema_mod.RESERVED_STAGE_FIELDS
        for extra in sorted(set(fields) - allowed):
            raise UserError(
                f"unknown field '{extra}' for kind '{kind.name}'; inputs it takes: {', '.join(kind.input_fields) or 'none'}",
                marks.key_location(stage_path + (extra,), stage=stage.name),
            )
        for required in kind.required_inputs:
            if not fields.get(required):
                raise UserError(
                    f"a '{kind.name}' stage needs `{required}` (a path or a stage name)",
                    marks.location(stage_path, stage=stage.name),
                )
        for fieldname in kind.input_fields:
            value = fields.get(fieldname)
            if value is None:
                continue
            where = stage_path + (fieldname,)
            try:
                target = self._stage_ref(value, choice)
            except UserError as err:
                raise err.with_location(**_loc_parts(marks.location(where, stage=stage.name))) from None
            if target is not None:
                stage.upstream[fieldname] = target
                stage.inputs[fieldname] = f"{self.build_dir}/{stage_folder(target)}"
            else:
                rel = self._dep(value, where, stage.name)
                stage.inputs[fieldname] = rel
                stage.deps.append(rel)
        for pname in kind.path_params:
            value = stage.params.get(pname)
            if isinstance(value, str) and value:
                where = ("stages", stage.base, "params", pname)
                if stage.variant is not None and pname not in (self.raw_stages[stage.base].get("params") or {}):
                    where = self._param_source(stage.base, pname, where)
                stage.deps.append(self._dep(value, where, stage.name))
        out = f"{self.build_dir}/{stage_folder(stage.name)}"
        self._located(lambda: self.rules.check_out(self.rules.inside(out, "stage folder"), out),
                      stage_path, stage.name, key=True)
        stage.outs = [out]

    def _check_exec_size(self, stage: Stage, stage_path: tuple) -> None:
        """The command is one argument of `/bin/sh -c` and the params one environment string: Linux
        refuses either over MAX_ARG_STRLEN (E2BIG) when the stage would start, so refuse it here."""
        import json

        size = len(stage.cmd.encode("utf-8", "surrogatepass"))
        if size >= MAX_ARG_STRLEN:
            raise UserError(f"the command is {size} bytes once rendered; /bin/sh takes at most {MAX_ARG_STRLEN - 1} "
                            "(Linux MAX_ARG_STRLEN): put long data in a file the command reads",
                            self.marks.location(stage_path + ("cmd",), stage=stage.name))
        env = "ASCENDPIPE_PARAMS=" + json.dumps(stage.params, sort_keys=True, default=str)
        if len(env.encode("utf-8", "surrogatepass")) >= MAX_ARG_STRLEN:
            raise UserError(f"the stage's params are {len(env)} bytes as JSON in ASCENDPIPE_PARAMS; an environment "
                            f"value is at most {MAX_ARG_STRLEN - 1} bytes (Linux MAX_ARG_STRLEN): keep large data in files",
                            self.marks.location(stage_path + ("params",), stage=stage.name))

    def _param_source(self, base: str, pname: str, default: tuple) -> tuple:
        """The YAML path a variant's param comes from (its matrix overlay, or the top level)."""
        matrix = self.raw_stages[base].get("matrix")
        if isinstance(matrix, dict):
            for key, overlay in matrix.items():
                if isinstance(overlay, dict) and pname in overlay:
                    return ("stages", base, "matrix", key, pname)
        if pname in self.top_params:
            return ("params", pname)
        return default

    def _located(self, check, where: tuple, stage: str, key: bool = False):
        try:
            return check()
        except UserError as err:
            locate = self.marks.key_location if key else self.marks.location
            raise err.with_location(**_loc_parts(locate(where, stage=stage))) from None

    def _check_log(self, stage: Stage, stage_path: tuple) -> None:
        log = f"{self.build_dir}/{stage_folder(stage.name)}.log"
        self._located(lambda: self.rules.check_log(log), stage_path, stage.name, key=True)

    def _resources(self, raw, stage_path: tuple, name: str) -> dict:
        from ascendpipe.config.resources import normalize

        try:
            return normalize(raw)
        except UserError as err:
            field = err.message.split(":", 1)[0]
            where = stage_path + ("resources", field) if isinstance(raw, dict) and field in raw else stage_path + ("resources",)
            raise UserError(f"resources.{err.message}", self.marks.location(where, stage=name)) from None

    def _stage_ref(self, value: str, origin: dict) -> str | None:
        if value in self.raw_stages:
            for variant, _, _, theirs in self.expansion.variants(value):
                if all(origin.get(k) == v for k, v in theirs.items()):
                    return f"{value}@{variant}" if variant else value
            return value
        base, at, variant = value.partition("@")
        if at and base in self.raw_stages:
            names = [v[0] for v in self.expansion.variants(base)]
            if variant not in names:
                raise UserError(f"stage '{base}' has no variant '{variant}'; it has: {', '.join(map(str, names))}")
            return value
        return None

    def _rel(self, value, where: tuple, stage: str, what: str = "path") -> str:
        rel = self._located(lambda: self.rules.inside(value, what), where, stage)
        self.where.setdefault((stage, rel), where)
        return rel

    def _dep(self, value, where: tuple, stage: str) -> str:
        """A dep: inside the workspace and, when it exists, a file or a folder (never opened)."""
        rel = self._rel(value, where, stage, "dep")
        self.dep_where.setdefault((stage, rel), where)
        self._located(lambda: self.rules.check_dep(rel, value), where, stage)
        return rel

    def _out(self, value, where: tuple, stage: str, what: str = "out") -> str:
        """An out: inside the workspace and nothing the workspace keeps (it is deleted before a run)."""
        rel = self._rel(value, where, stage, what)
        self.where[(stage, rel)] = where  # an out that is also a dep is blamed as the out
        self._located(lambda: self.rules.check_out(rel, value), where, stage)
        return rel


def _yaml_booleans(params: dict, schema: dict, texts: dict) -> dict:
    """A param the kind declares as a string but YAML 1.1 read as a boolean (`msit: off`) gets the
    word as written back when the schema takes that word and not a boolean (docs/pipelines.md)."""
    import jsonschema

    props = schema.get("properties") or {}
    out = dict(params)
    for key, value in params.items():
        text = texts.get(key)
        spec = props.get(key)
        if isinstance(value, bool) and text and isinstance(spec, dict):
            check = jsonschema.Draft202012Validator(spec)
            if not check.is_valid(value) and check.is_valid(text):
                out[key] = text
    return out


def _with_defaults(params: dict, schema: dict) -> dict:
    out = dict(params)
    for key, spec in (schema.get("properties") or {}).items():
        if key not in out and isinstance(spec, dict) and "default" in spec:
            out[key] = copy.deepcopy(spec["default"])
    return out


def _loc_parts(loc: Location) -> dict:
    return {k: getattr(loc, k) for k in ("file", "line", "column", "stage")}
