"""Resolved stages and pipelines: what the engine works from, and what the plan cache stores.

Kept free of heavy imports (no dataclasses, pathlib or typing at run time): a no-op build loads
these from ``.ascendpipe/plans/`` without importing the resolver.
"""

from __future__ import annotations

import os

DEFAULT_BUILD_DIR = "build"

_STAGE_FIELDS = (
    "name", "base", "variant", "kind", "params", "cmd", "deps", "outs", "inputs", "upstream",
    "metrics_file", "always_changed", "env_used", "line", "resources", "dep_lines",
)


class Stage:
    __slots__ = _STAGE_FIELDS

    def __init__(self, name, base, variant, kind, params, cmd=None, deps=None, outs=None, inputs=None,
                 upstream=None, metrics_file=None, always_changed=False, env_used=None, line=None, resources=None,
                 dep_lines=None):
        self.name = name  # 'convert@fp16'
        self.base = base  # 'convert'
        self.variant = variant  # 'fp16', or None
        self.kind = kind
        self.params = params  # what the stage is keyed on and sees
        self.cmd = cmd  # run stages only
        self.deps = list(deps or [])  # workspace-relative files/dirs read
        self.outs = list(outs or [])  # workspace-relative files/dirs written
        self.inputs = dict(inputs or {})  # input field -> workspace path
        self.upstream = dict(upstream or {})  # input field -> stage name
        self.metrics_file = metrics_file
        self.always_changed = always_changed
        self.env_used = dict(env_used or {})
        self.line = line  # the stage's line in the pipeline file
        # what a scale-out executor reserves for it ({"NPU": 1, "CPU": 2, "memory": bytes}); not keyed
        self.resources = dict(resources or {})
        # dep -> [line, column] of the field naming it in the pipeline file (for path errors); not keyed
        self.dep_lines = dict(dep_lines or {})

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in _STAGE_FIELDS}

    def __repr__(self):
        return f"Stage({self.name!r}, kind={self.kind!r})"


class Pipeline:
    def __init__(self, path, workspace, backend, build_dir, thresholds, stages, env_names, marks=None, remote=None):
        self.path = path  # as given (for messages)
        self.workspace = workspace  # absolute
        self.backend = backend
        self.build_dir = build_dir
        self.thresholds = thresholds
        self.stages = stages  # name -> Stage, in file order, variants expanded
        self.env_names = env_names
        self.marks = marks
        self.remote = remote  # the shared remote cache URL from the file (`remote:`), or None

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "workspace": self.workspace,
            "backend": self.backend,
            "build_dir": self.build_dir,
            "thresholds": self.thresholds,
            "env_names": self.env_names,
            "remote": self.remote,
            "stages": {n: s.to_json() for n, s in self.stages.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> "Pipeline":
        return cls(
            path=data["path"],
            workspace=data["workspace"],
            backend=data["backend"],
            build_dir=data["build_dir"],
            thresholds=data["thresholds"],
            stages={n: Stage(**s) for n, s in data["stages"].items()},
            env_names=data["env_names"],
            remote=data.get("remote"),
        )


def find_workspace(pipeline_path) -> str:
    """The nearest folder above the pipeline holding ``.ascendpipe/`` or ``.git``; else its folder."""
    start = os.path.dirname(os.path.abspath(str(pipeline_path)))
    folder = start
    while True:
        if os.path.isdir(os.path.join(folder, ".ascendpipe")) or os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return start
        folder = parent
