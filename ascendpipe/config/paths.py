"""Path rules, checked before anything runs: a pipeline can never write, delete or read outside its
workspace, nor delete the workspace's own state.

A ``run`` stage's outs are deleted before its command runs, so an out of ``.``, ``.git``, ``cache``,
``.ascendpipe``, the build root or the pipeline file would destroy what the workspace holds. Every
check here looks at names and at ``lstat``/``stat`` only: nothing is opened, so a FIFO as a dep is
refused instead of hanging the build. The functions raise ``UserError`` without a location; the
resolver adds the ``file:line`` of the offending value.
"""

from __future__ import annotations

import os
import re

from ascendpipe.errors import Location, UserError
from ascendpipe.fsutil import special_file  # noqa: F401 (config's callers and tests import it from here)

# Variant names (matrix keys, product values) become folder names (``build/convert__fp16``) and
# reach the CANN tools, which accept only [A-Za-z0-9./_-] in a path (see contract.stage_folder);
# the first character is alphanumeric and ``..`` is refused so a name can never climb a folder.
VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
VARIANT_NAME_RULE = "[A-Za-z0-9][A-Za-z0-9_.-]* without '..'"

# what a workspace keeps at its root and no stage may write or delete
STATE_FOLDERS = (".git", "cache", ".ascendpipe")


def variant_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a variant name, or None."""
    if not VARIANT_NAME.match(name) or ".." in name:
        return f"variant name {name!r} is not allowed: variant names are {VARIANT_NAME_RULE} (they become folder names)"
    return None


def _within(rel: str, folder: str) -> bool:
    """Whether workspace-relative ``rel`` is ``folder`` or inside it (both normalised, '/'-separated)."""
    return rel == folder or folder == "." or rel.startswith(folder + "/")


def overlap(a: str, b: str) -> bool:
    """Whether two workspace-relative paths are the same or one holds the other."""
    return _within(a, b) or _within(b, a)


class PathRules:
    """The rules for one pipeline in one workspace.

    ``workspace``: the workspace folder; ``protected``: absolute paths of files no stage may write
    or delete (the pipeline file and its overrides file).
    """

    def __init__(self, workspace: str, protected=()):
        self.workspace = os.path.realpath(workspace)
        self.protected = [self._relative(os.path.realpath(p)) for p in protected]
        self.protected = [p for p in self.protected if p is not None]
        self.build_dir = None

    def _relative(self, absolute: str) -> str | None:
        """``absolute`` (symlinks resolved) relative to the workspace, or None when outside it."""
        if absolute == self.workspace:
            return "."
        if not absolute.startswith(self.workspace.rstrip(os.sep) + os.sep):
            return None
        return os.path.relpath(absolute, self.workspace).replace(os.sep, "/")

    def inside(self, value, what: str = "path") -> str:
        """The workspace-relative form of ``value`` after resolving ``..`` and symlinks; refused when
        it is empty or lies outside the workspace."""
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"expected a {what}, got {value!r}")
        if "\0" in value:
            raise UserError(f"{what} {value!r} holds a NUL character")
        joined = value if os.path.isabs(value) else os.path.join(self.workspace, value)
        rel = self._relative(os.path.realpath(joined))
        if rel is None:
            raise UserError(f"{what} '{value}' is outside the workspace {self.workspace} (after resolving '..' "
                            f"and symlinks); keep every dep, out and build folder inside it")
        return rel

    def set_build_dir(self, value) -> str:
        """Check and normalise ``build_dir`` (``./build/`` -> ``build``)."""
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"build_dir must be a folder inside the workspace, got {value!r}")
        rel = self.inside(value, "build_dir")
        if rel == ".":
            raise UserError(f"build_dir '{value}' is the workspace root; use a folder inside it (default: build)")
        for folder in STATE_FOLDERS:
            if _within(rel, folder):
                raise UserError(f"build_dir '{value}' is inside '{folder}', which the workspace keeps for itself")
        for path in self.protected:
            if _within(path, rel):
                raise UserError(f"build_dir '{value}' holds the pipeline file '{path}'; use a folder of its own")
        self.build_dir = rel
        return rel

    def check_out(self, rel: str, value: str) -> None:
        """``rel`` (from ``inside``) may be deleted and rewritten by a stage."""
        if rel == ".":
            raise UserError(f"out '{value}' is the workspace root: outs are deleted before a stage runs")
        for folder in STATE_FOLDERS:
            if _within(rel, folder):
                raise UserError(f"out '{value}' is inside '{folder}', which the workspace keeps for itself "
                                "(outs are deleted before a stage runs)")
        if self.build_dir is not None and _within(self.build_dir, rel):
            raise UserError(f"out '{value}' is or holds the build root '{self.build_dir}'; write a path of its own")
        for path in self.protected:
            if _within(path, rel):
                raise UserError(f"out '{value}' is or holds '{path}', a pipeline or overrides file "
                                "(outs are deleted before a stage runs)")

    def check_dep(self, rel: str, value: str) -> None:
        """A dep that exists must be a file, a folder or a symlink to one: never opened here."""
        special = special_file(os.path.join(self.workspace, rel))
        if special:
            raise UserError(f"dep '{value}' is {special}; a dep must be a regular file or a folder")

    def check_log(self, rel: str) -> None:
        """A stage's log (``build/<stage>.log``) is written, so it must not lead outside or into a FIFO."""
        absolute = os.path.join(self.workspace, rel)
        if self._relative(os.path.realpath(absolute)) is None:
            raise UserError(f"the stage's log '{rel}' leads outside the workspace (a symlink?); remove it")
        special = special_file(absolute)
        if special or os.path.isdir(absolute):
            raise UserError(f"the stage's log '{rel}' is {special or 'a folder'}; remove it")


def refuse_special_pipeline_file(path: str) -> None:
    """A pipeline file that is a FIFO, socket or device is refused without being opened: reading a
    FIFO blocks until someone writes to it."""
    special = special_file(path)
    if special:
        raise UserError(f"pipeline file {path} is {special}; give the pipeline's YAML file", Location(file=path))


