"""``ascendpipe doctor``: what a user runs first, on a laptop or on a board. Each check says ok or
what is missing, and the fix. The checks' logic is pure (given facts); the probes that gather the
facts (environment, files, subprocesses) are separate and injected, so tests run without a board.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

# ATC (graphengine CheckInputPathValid: also CJK), ais_bench / msit (PATH_WHITE_LIST_REGEX) and msaccucmp
# (safe_path_string) accept only these characters in a path
PATH_CHARS = re.compile(r"[A-Za-z0-9./_-]")
MIN_FREE_GB = 2.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def path_chars(path: Path) -> Check:
    bad = sorted({c for c in str(path) if not PATH_CHARS.fullmatch(c)})
    if not bad:
        return Check("workspace path", True, f"{path}: only [A-Za-z0-9./_-]")
    shown = " ".join(repr(c) for c in bad)
    return Check("workspace path", False, f"{path} has {shown}: atc, ais_bench, msit and msaccucmp refuse any path "
                 "character outside [A-Za-z0-9./_-]",
                 "move (or clone) the workspace to a path of letters, digits, '.', '/', '_' and '-' only")


def free_disk(path: Path, free_bytes: int | None, min_gb: float = MIN_FREE_GB) -> Check:
    if free_bytes is None:
        return Check("disk", False, f"cannot read the free space of {path}", "check that the workspace folder exists")
    gb = free_bytes / 2**30
    if gb >= min_gb:
        return Check("disk", True, f"{gb:.1f} GiB free under {path}")
    return Check("disk", False, f"{gb:.2f} GiB free under {path}, below {min_gb:g} GiB (builds keep every output in "
                 "cache/)", "free space (`ascendpipe gc` drops unreferenced cache objects) or use a bigger disk")


def package(dist: str, version: str | None, why: str) -> Check:
    if version:
        return Check(dist, True, f"{dist} {version}")
    return Check(dist, False, f"{dist} is not installed ({why})", f"pip install {dist}")


def parse_npu_smi(text: str) -> list[str]:
    """Chip names from ``npu-smi info``'s table: the ``Name`` column of each NPU row (``| 0  310P3  | OK``).
    Field meanings: the Atlas 300I Pro ``npu-smi info`` page (300Ipro_015: NPU = device id, Name = chip name)."""
    names = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = cells[0].split() if cells else []
        if len(first) >= 2 and first[0].isdigit() and re.fullmatch(r"\d{3}[A-Za-z0-9_]*", first[1]):
            names.append(first[1])
    return names


def soc_of_chip(name: str) -> str:
    """The ``soc_version`` atc wants for a chip name npu-smi shows: 310P3 -> Ascend310P3."""
    return name if name.lower().startswith("ascend") else f"Ascend{name}"


def soc_match(chips: list[str] | None, wanted: dict[str, str], npu_smi_error: str | None) -> Check:
    """The board's SoC against the pipeline's soc_version (``wanted``: stage -> soc_version)."""
    if chips is None:
        return Check("soc", False, f"npu-smi info failed: {npu_smi_error}" if npu_smi_error else "npu-smi not found",
                     "install the NPU driver (npu-smi comes with it) and run on the board; off the board use "
                     "--backend onnxruntime")
    if not chips:
        return Check("soc", False, "npu-smi info lists no NPU", "check the driver (`npu-smi info`) and the device")
    socs = sorted({soc_of_chip(c) for c in chips})
    wrong = {stage: soc for stage, soc in wanted.items() if soc and soc not in socs}
    if wrong:
        stage, soc = next(iter(sorted(wrong.items())))
        return Check("soc", False, f"the board has {', '.join(socs)}; stage {stage} converts for {soc}",
                     f"set soc_version: {socs[0]} in the convert stage's params (an OM for another SoC does not load)")
    detail = f"board: {', '.join(socs)}"
    if wanted:
        detail += f"; soc_version of {', '.join(sorted(wanted))} matches"
    return Check("soc", True, detail)


@dataclass
class ToolFact:
    name: str
    path: str | None
    version: str | None


TOOL_FIXES = {
    "atc": "source the toolkit's set_env.sh (`. /usr/local/Ascend/ascend-toolkit/set_env.sh`)",
    "aoe": "source the toolkit's set_env.sh (aoe ships with the toolkit)",
    "msprof": "source the toolkit's set_env.sh (msprof ships with the toolkit)",
    "msaccucmp.py": "install the toolkit's operator_cmp tools (tools/operator_cmp/compare/msaccucmp.py)",
    "ais_bench": "pip install the ais_bench wheel from Ascend/tools (ais-bench_workload/tool/ais_bench) for "
                 "the python3 on PATH",
    "msit": "pip install msit (then `msit install compare`)",
}


def tool(fact: ToolFact) -> Check:
    if fact.path:
        return Check(fact.name, True, f"{fact.path}" + (f" ({fact.version})" if fact.version else ""))
    return Check(fact.name, False, f"{fact.name} not found", TOOL_FIXES.get(fact.name))


def toolkit(home: str | None, var: str | None, exists: bool, version: str | None) -> Check:
    if home and exists:
        return Check("toolkit", True, f"${var}={home} (CANN {version or 'unknown'})")
    if home:
        return Check("toolkit", False, f"${var}={home} does not exist",
                     "source the set_env.sh of an installed toolkit, or fix the variable")
    return Check("toolkit", False, "ASCEND_TOOLKIT_HOME is not set (set_env.sh not sourced)",
                 "source the toolkit's set_env.sh: `. /usr/local/Ascend/ascend-toolkit/set_env.sh`")


def render(checks: list[Check]) -> str:
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        lines.append(f"{'ok' if c.ok else 'MISSING':8} {c.name:{width}}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"{'':8} {'':{width}}  fix: {c.fix}")
    failed = sum(not c.ok for c in checks)
    lines.append("all checks passed" if not failed else f"{failed} of {len(checks)} checks failed")
    return "\n".join(lines) + "\n"


def run_checks(backend: str, workspace: Path, probes: "Probes", wanted_socs: dict[str, str]) -> list[Check]:
    checks: list[Check] = []
    if backend == "ascend":
        home, var = probes.toolkit_home()
        checks.append(toolkit(home, var, bool(home) and Path(home).is_dir(), probes.cann_version()))
        checks += [tool(f) for f in probes.tools()]
        chips, error = probes.npu_chips()
        checks.append(soc_match(chips, wanted_socs, error))
        checks.append(path_chars(workspace))
    else:
        checks.append(package("onnxruntime", probes.package_version("onnxruntime"), "the device emulation runs on it"))
        checks.append(package("onnx", probes.package_version("onnx"), "models are read and rewritten with it"))
    checks.append(free_disk(workspace, probes.free_bytes(workspace)))
    return checks


@dataclass
class Probes:
    """Where the facts come from; the ascend ones live in ``backends/ascend/doctor.py``."""

    package_version: Callable[[str], str | None]
    free_bytes: Callable[[Path], int | None]
    toolkit_home: Callable[[], tuple[str | None, str | None]] = lambda: (None, None)
    cann_version: Callable[[], str | None] = lambda: None
    tools: Callable[[], list[ToolFact]] = lambda: []
    npu_chips: Callable[[], tuple[list[str] | None, str | None]] = lambda: (None, None)


def disk_free(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None
