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
    required: bool = True  # an optional tool (msit) missing is reported, not counted as a failure

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


# A chip name in npu-smi info's Name column: 310 (Atlas 200/300), 310P3 (300I Pro), 310B4 (200I A2),
# 910A / 910ProB (Atlas 800 training), 910B1..910B4 / 910B2C (Atlas A2), and on Atlas A3 the family name
# Ascend910 (its Chip row then carries "Chip Phy-ID": `| 0     10   | 0000:9D:00.0 |`).
_CHIP_NAME = re.compile(r"(?:\d{3}[A-Za-z0-9_]*|Ascend\d{3}[A-Za-z0-9_]*)")
A3_NAME = "Ascend910"  # npu-smi info names every A3 chip so; the soc_version is Ascend910_93xx
A3_SOC_PREFIX = "Ascend910_93"


def parse_npu_smi(text: str) -> list[str]:
    """Chip names from ``npu-smi info``'s table: the ``Name`` of each NPU row. Row layouts (the Atlas 300I Pro
    page 300Ipro_015, and public outputs of the 310, 310B, 910, 910B and A3 boards): ``| NPU  Name | Health |``
    rows with ``| 0  310P3 | OK |``, each followed by a Chip row (``| 0  0 | 0000:01:00.0 |``, ``| 0 |
    0000:C1:00.0 |`` on 910/910B, ``| 0  10 | 0000:9D:00.0 |`` with Phy-ID on A3); the name may also stand
    alone in the next field (``| 0 | 910B3 | OK |``). The process table (``| 0  0  | 2431 | python |``) is not
    an NPU row: its first field holds two numbers."""
    names = []
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = cells[0].split() if cells else []
        health = cells[1].split()[0] if len(cells) > 1 and cells[1].split() else ""
        if len(first) >= 2 and first[0].isdigit() and _CHIP_NAME.fullmatch(first[1]):
            # a name of digits only (310) must be followed by the Health field, not a Chip row's Phy-ID (A3: 100+)
            if not first[1].isdigit() or (health.isalpha() and health != "NA"):
                names.append(first[1])
        elif len(first) == 1 and first[0].isdigit() and len(cells) > 1 and cells[1].split() and \
                _CHIP_NAME.fullmatch(cells[1].split()[0]) and not cells[1].split()[0].isdigit():
            names.append(cells[1].split()[0])
    return names


def soc_of_chip(name: str) -> str:
    """The ``soc_version`` atc wants for a chip name npu-smi shows: 310P3 -> Ascend310P3 (A3's Ascend910:
    the family, Ascend910_93xx; npu-smi info does not show the variant)."""
    return name if name.lower().startswith("ascend") else f"Ascend{name}"


def _fits(board: str, soc: str) -> bool:
    if board == A3_NAME:
        return soc.startswith(A3_SOC_PREFIX)
    return soc == board


def soc_match(chips: list[str] | None, wanted: dict[str, str], npu_smi_error: str | None) -> Check:
    """The board's SoC against the pipeline's soc_version (``wanted``: stage -> soc_version, "" where a
    convert or tune stage sets none: the ascend backend refuses to build it)."""
    if chips is None:
        return Check("soc", False, f"npu-smi info failed: {npu_smi_error}" if npu_smi_error else "npu-smi not found",
                     "install the NPU driver (npu-smi comes with it) and run on the board; off the board use "
                     "--backend onnxruntime")
    if not chips:
        return Check("soc", False, "npu-smi info lists no NPU", "check the driver (`npu-smi info`) and the device")
    socs = sorted({soc_of_chip(c) for c in chips})
    shown = ", ".join(f"{s} (Atlas A3: soc_version {A3_SOC_PREFIX}xx, the variant is not in npu-smi info)"
                      if s == A3_NAME else s for s in socs)
    suggest = f"{A3_SOC_PREFIX}91" if socs[0] == A3_NAME else socs[0]
    missing = sorted(stage for stage, soc in wanted.items() if not soc)
    if missing:
        return Check("soc", False, f"the board has {shown}; stage {missing[0]} sets no soc_version"
                     + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else ""),
                     f"set soc_version: {suggest} in its params, or for every convert/tune stage "
                     f"--set params.soc_version={suggest}")
    wrong = {stage: soc for stage, soc in wanted.items() if not any(_fits(b, soc) for b in socs)}
    if wrong:
        stage, soc = next(iter(sorted(wrong.items())))
        return Check("soc", False, f"the board has {shown}; stage {stage} converts for {soc}",
                     f"set soc_version: {suggest} in the convert stage's params (an OM for another SoC does not load)")
    detail = f"board: {shown}"
    if wanted:
        detail += f"; soc_version of {', '.join(sorted(wanted))} matches"
    return Check("soc", True, detail)


@dataclass
class ToolFact:
    name: str
    path: str | None
    version: str | None


# where set_env.sh lives: CANN 8 installs the toolkit under ascend-toolkit/, CANN 9 under cann/
SET_ENV_SCRIPTS = ("/usr/local/Ascend/ascend-toolkit/set_env.sh", "/usr/local/Ascend/cann/set_env.sh")
SET_ENV = f"`. {SET_ENV_SCRIPTS[0]}` (CANN 8) or `. {SET_ENV_SCRIPTS[1]}` (CANN 9)"
OPTIONAL_TOOLS = ("msit", "msaccucmp.py")  # msit: a second compare beside ours; dumps are read without msaccucmp

TOOL_FIXES = {
    "atc": f"source the toolkit's set_env.sh: {SET_ENV}",
    "aoe": "source the toolkit's set_env.sh (aoe ships with the toolkit)",
    "msprof": "source the toolkit's set_env.sh (msprof ships with the toolkit)",
    "msaccucmp.py": "install the toolkit's operator_cmp tools (tools/operator_cmp/compare/msaccucmp.py); optional: "
                    "ascendpipe reads the device's dumps itself",
    "ais_bench": "pip install the ais_bench wheel from Ascend/tools (ais-bench_workload/tool/ais_bench) for "
                 "the python3 on PATH",
    "msit": "pip install msit (then `msit install compare`)",
}


def tool(fact: ToolFact) -> Check:
    required = fact.name not in OPTIONAL_TOOLS
    if fact.path:
        return Check(fact.name, True, f"{fact.path}" + (f" ({fact.version})" if fact.version else ""), required=required)
    return Check(fact.name, False, f"{fact.name} not found" + ("" if required else " (optional)"),
                 TOOL_FIXES.get(fact.name), required=required)


def toolkit(home: str | None, var: str | None, exists: bool, version: str | None,
            scripts: list[str] | None = None) -> Check:
    """``scripts``: the set_env.sh files found at the CANN 8 / CANN 9 locations (named in the fix)."""
    found = f"`. {scripts[0]}`" if scripts else SET_ENV
    if home and exists:
        return Check("toolkit", True, f"${var}={home} (CANN {version or 'unknown'})")
    if home:
        return Check("toolkit", False, f"${var}={home} does not exist",
                     f"source the set_env.sh of an installed toolkit ({found}), or fix the variable")
    return Check("toolkit", False, "ASCEND_TOOLKIT_HOME is not set (set_env.sh not sourced)"
                 + (f"; found {', '.join(scripts)}" if scripts else ""),
                 f"source the toolkit's set_env.sh: {found}")


def render(checks: list[Check]) -> str:
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        lines.append(f"{'ok' if c.ok else 'MISSING' if c.required else 'absent':8} {c.name:{width}}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"{'':8} {'':{width}}  fix: {c.fix}")
    required = [c for c in checks if c.required]
    failed = sum(not c.ok for c in required)
    absent = [c.name for c in checks if not c.required and not c.ok]
    lines.append(("all required checks passed" if absent else "all checks passed") if not failed
                 else f"{failed} of {len(required)} required checks failed")
    if absent:
        lines[-1] += f"; optional, not found: {', '.join(absent)}"
    return "\n".join(lines) + "\n"


def passed(checks: list[Check]) -> bool:
    """Every required check ok (an optional tool missing does not fail doctor)."""
    return all(c.ok for c in checks if c.required)


def run_checks(backend: str, workspace: Path, probes: "Probes", wanted_socs: dict[str, str]) -> list[Check]:
    checks: list[Check] = []
    if backend == "ascend":
        home, var = probes.toolkit_home()
        checks.append(toolkit(home, var, bool(home) and Path(home).is_dir(), probes.cann_version(),
                              probes.set_env_scripts()))
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
    set_env_scripts: Callable[[], list[str]] = lambda: []


def disk_free(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None
