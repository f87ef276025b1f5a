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
from ascendpipe.config.template import AllowedEnv, RecordingParams, render_tree
from ascendpipe.config.yamlmarks import Marks, decode, load_yaml
from ascendpipe.contract import stage_folder
from ascendpipe.errors import Location, UserError

__all__ = ["load_pipeline", "Pipeline", "Stage", "find_workspace", "DEFAULT_BUILD_DIR"]


def load_pipeline(
    path: str | Path,
    overrides: list[str] = (),
    backend: str | None = None,
    environ: dict[str, str] | None = None,
) -> Pipeline:
    path = Path(path)
    display = str(path)
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
    from ascendpipe.config.overrides import apply_overrides

    data = apply_overrides(data, overrides, marks)
    schema_mod.validate(data, schema_mod.pipeline_schema(), lambda p, m: _raise(marks, p, m, data))
    workspace = Path(find_workspace(path))
    resolver = _Resolver(data, marks, workspace, environ if environ is not None else dict(os.environ))
    stages = resolver.resolve()
    pipeline = Pipeline(
        path=display,
        workspace=str(workspace),
        backend=backend or data.get("backend", backends.DEFAULT),
        build_dir=data.get("build_dir", DEFAULT_BUILD_DIR),
        thresholds=dict(data.get("thresholds") or {}),
        stages=stages,
        env_names=list(data.get("env") or []),
        marks=marks,
        remote=data.get("remote"),
    )
    if pipeline.backend not in backends.names():
        raise UserError(f"unknown backend '{pipeline.backend}'; known: {', '.join(backends.names())}")
    from ascendpipe.graph.dag import check_graph

    check_graph(pipeline)
    return pipeline


def _raise(marks, path, message, data=None):
    stage = path[1] if len(path) > 1 and path[0] == "stages" else None
    raise schema_mod.located_error(marks, path, message, stage=stage)


class _Resolver:
    def __init__(self, data: dict, marks: Marks, workspace: Path, environ: dict):
        self.data = data
        self.marks = marks
        self.workspace = workspace
        self.environ = environ
        self.top_params = dict(data.get("params") or {})
        self.env_names = list(data.get("env") or [])
        self.build_dir = data.get("build_dir", DEFAULT_BUILD_DIR)
        self.raw_stages: dict[str, dict] = data["stages"]

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
        merged = {**self.top_params, **own, **overlay}
        accessed: set = set()
        env_used: dict = {}
        out_dir = f"{self.build_dir}/{stage_folder(name)}"
        context = {
            "params": RecordingParams(merged, accessed),
            "env": AllowedEnv(self.env_names, self.environ, env_used),
            "stage": {"name": name, "base": base, "variant": variant or "", "out": out_dir},
        }

        def on_error(path, err):
            raise err.with_location(**_loc_parts(marks.location(stage_path + path, stage=name)))

        def on_param_error(path, err):
            where = sources.get(path[0], stage_path + ("params",)) + tuple(path[1:])
            raise err.with_location(**_loc_parts(marks.location(where, stage=name)))

        # Params may be templated too (against the other params).
        merged = render_tree(merged, context, on_param_error)
        context["params"] = RecordingParams(merged, accessed)
        fields = {k: v for k, v in raw.items() if k not in ("params", "matrix", "kind")}
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
            def on_schema_error(path, message):
                where = sources.get(path[0], stage_path + ("params",)) + tuple(path[1:]) if path else stage_path
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
            line=marks.location(stage_path).line,
            always_changed=bool(raw.get("always_changed", False)),
            resources=self._resources(fields.get("resources"), stage_path, name),
        )
        fields.pop("resources", None)
        self._fill_io(stage, fields, kind, choice, stage_path)
        return stage

    def _fill_io(self, stage: Stage, fields: dict, kind, choice: dict, stage_path: tuple) -> None:
        marks = self.marks
        if kind.name == "run":
            cmd = fields.get("cmd")
            if cmd is None:
                raise UserError("a `run` stage needs `cmd`", marks.location(stage_path, stage=stage.name))
            stage.cmd = cmd if isinstance(cmd, str) else " && ".join(cmd)
            stage.deps = [self._rel(d, stage_path + ("deps", i), stage.name) for i, d in enumerate(fields.get("deps") or [])]
            stage.outs = [self._rel(o, stage_path + ("outs", i), stage.name) for i, o in enumerate(fields.get("outs") or [])]
            if fields.get("metrics"):
                stage.metrics_file = self._rel(fields["metrics"], stage_path + ("metrics",), stage.name)
                covered = any(stage.metrics_file == o or stage.metrics_file.startswith(o + "/") for o in stage.outs)
                if not covered:  # a metrics file is an output of the stage too
                    stage.outs.append(stage.metrics_file)
            for extra in set(fields) - schema_mod.RESERVED_STAGE_FIELDS:
                raise UserError(
                    f"unknown field '{extra}' for kind 'run'; allowed: cmd, deps, outs, params, metrics, matrix, desc",
                    marks.location(stage_path + (extra,), stage=stage.name),
                )
            return
        for reserved in ("cmd", "deps", "outs", "metrics"):
            if reserved in fields:
                raise UserError(
                    f"'{reserved}' is only for `run` stages; a '{kind.name}' stage declares its inputs as "
                    f"{', '.join(kind.input_fields) or 'nothing'}",
                    marks.location(stage_path + (reserved,), stage=stage.name),
                )
        allowed = set(kind.input_fields) | schema_mod.RESERVED_STAGE_FIELDS
        for extra in sorted(set(fields) - allowed):
            raise UserError(
                f"unknown field '{extra}' for kind '{kind.name}'; inputs it takes: {', '.join(kind.input_fields) or 'none'}",
                marks.location(stage_path + (extra,), stage=stage.name),
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
            target = self._stage_ref(value, choice)
            if target is not None:
                stage.upstream[fieldname] = target
                stage.inputs[fieldname] = f"{self.build_dir}/{stage_folder(target)}"
            else:
                rel = self._rel(value, where, stage.name)
                stage.inputs[fieldname] = rel
                stage.deps.append(rel)
        for pname in kind.path_params:
            value = stage.params.get(pname)
            if isinstance(value, str) and value:
                where = ("stages", stage.base, "params", pname)
                stage.deps.append(self._rel(value, where, stage.name))
        stage.outs = [f"{self.build_dir}/{stage_folder(stage.name)}"]

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

    def _rel(self, value: str, where: tuple, stage: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise UserError("expected a path", self.marks.location(where, stage=stage))
        p = Path(value)
        absolute = (p if p.is_absolute() else self.workspace / p).resolve()
        try:
            rel = absolute.relative_to(self.workspace.resolve())
        except ValueError:
            raise UserError(
                f"path '{value}' is outside the workspace {self.workspace}; keep every dep and out inside it",
                self.marks.location(where, stage=stage),
            ) from None
        return rel.as_posix()


def _with_defaults(params: dict, schema: dict) -> dict:
    out = dict(params)
    for key, spec in (schema.get("properties") or {}).items():
        if key not in out and isinstance(spec, dict) and "default" in spec:
            out[key] = copy.deepcopy(spec["default"])
    return out


def _loc_parts(loc: Location) -> dict:
    return {k: getattr(loc, k) for k in ("file", "line", "column", "stage")}
