"""Finding the CANN toolkit and its tools, and reading their versions.

Pure given an environment mapping: nothing here runs a tool (a no-op build reads versions for every
stage key, so this must stay at a few file stats). Lookup order: the toolkit home from
``ASCEND_TOOLKIT_HOME`` then ``ASCEND_HOME_PATH``, then ``PATH``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ascendpipe.errors import Location, UserError

HOME_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
DEFAULT_HOME = "/usr/local/Ascend/ascend-toolkit/latest"

# Where each tool sits below the toolkit home. `bin/` holds links to all of them in an installed
# toolkit; the component directories are the fallbacks (layout from install docs, see docs/ascend.md).
TOOL_DIRS: dict[str, tuple[str, ...]] = {
    "atc": ("bin", "compiler/bin", "atc/bin"),
    "aoe": ("bin", "tools/aoe/bin"),
    "msprof": ("bin", "tools/profiler/bin"),
    "msit": ("bin",),
    "python3": ("bin",),
}
MSACCUCMP_DIRS = ("tools/operator_cmp/compare", "toolkit/tools/operator_cmp/compare")
MISSING_HINT = (
    "source the toolkit's set_env.sh (e.g. `. /usr/local/Ascend/ascend-toolkit/set_env.sh`), "
    "or run with `--backend onnxruntime`, which needs no CANN"
)


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` lines (the toolkit's install info and each component's version.info)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            out[key.strip().lower()] = value.strip()
    return out


def version_from_info(text: str) -> str | None:
    values = parse_key_values(text)
    return values.get("version") or None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def cann_version(home: Path | None) -> str:
    """The CANN version from ``<home>/<arch>-linux/ascend_toolkit_install.info`` (or version.info)."""
    if home is None or not home.is_dir():
        return "unknown"
    candidates = sorted(home.glob("*-linux/ascend_toolkit_install.info"))
    candidates += [home / "ascend_toolkit_install.info", home / "version.info", home / "compiler/version.info"]
    for path in candidates:
        text = _read(path)
        if text:
            version = version_from_info(text)
            if version:
                return version
    return "unknown"


def toolkit_home(env: Mapping[str, str]) -> Path | None:
    for var in HOME_VARS:
        value = env.get(var)
        if value:
            return Path(value)
    return None


@dataclass
class Toolkit:
    """What was found: the home (may be None when tools come from PATH only) and tool paths."""

    home: Path | None
    env: Mapping[str, str]
    version: str = "unknown"
    _found: dict[str, Path | None] = field(default_factory=dict)

    def find(self, tool: str) -> Path | None:
        if tool not in self._found:
            self._found[tool] = _locate(tool, self.home, self.env)
        return self._found[tool]

    def tool(self, tool: str, *, stage: str | None = None) -> Path:
        """The tool's path, or a one-line UserError naming it and the remedy."""
        path = self.find(tool)
        if path is None:
            where = f"${HOME_VARS[0]}={self.home}" if self.home else "no $ASCEND_TOOLKIT_HOME"
            raise UserError(f"CANN tool '{tool}' not found ({where}, not on PATH)",
                            Location(stage=stage), hint=MISSING_HINT)
        return path

    def msaccucmp(self, *, stage: str | None = None) -> Path:
        roots = [self.home] if self.home else []
        roots.append(Path(DEFAULT_HOME))
        for root in roots:
            for rel in MSACCUCMP_DIRS:
                path = root / rel / "msaccucmp.py"
                if path.is_file():
                    return path
        raise UserError("CANN script 'msaccucmp.py' not found under tools/operator_cmp/compare of the toolkit",
                        Location(stage=stage), hint=MISSING_HINT)

    def tool_version(self, tool: str) -> str:
        """The nearest ``version.info`` above the tool inside the home, else the CANN version."""
        path = self.find(tool)
        if path is None:
            return "not found"
        real = path.resolve()
        stop = self.home.resolve() if self.home else None
        for parent in list(real.parents)[:4]:
            text = _read(parent / "version.info")
            version = version_from_info(text) if text else None
            if version:
                return version
            if stop is not None and parent == stop:
                break
        return self.version

    def versions(self, tools: tuple[str, ...]) -> dict[str, str]:
        out = {"cann": self.version}
        for tool in tools:
            out[tool] = self.tool_version(tool)
        return out


def _locate(tool: str, home: Path | None, env: Mapping[str, str]) -> Path | None:
    if home is not None:
        for rel in TOOL_DIRS.get(tool, ("bin",)):
            path = home / rel / tool
            if path.is_file() and os.access(path, os.X_OK):
                return path
    found = shutil.which(tool, path=env.get("PATH", ""))
    return Path(found) if found else None


def discover(env: Mapping[str, str] | None = None) -> Toolkit:
    env = dict(os.environ if env is None else env)
    home = toolkit_home(env)
    return Toolkit(home=home, env=env, version=cann_version(home))
