"""The probes ``ascendpipe doctor --backend ascend`` runs: the toolkit home, each tool and its version,
the board's chips (``npu-smi info``). Facts only; ``ascendpipe.doctor`` judges them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ascendpipe.backends.ascend.toolkit import HOME_VARS, cann_version, discover
from ascendpipe.errors import UserError

TOOLS = ("atc", "aoe", "msprof")
_AIS_PROBE = ("import importlib.util, importlib.metadata as m\n"
              "spec = importlib.util.find_spec('ais_bench')\n"
              "v = ''\n"
              "try:\n    v = m.version('ais_bench')\nexcept Exception:\n    pass\n"
              "print((spec.origin or '') if spec else '', v, sep='\\n')")


def attach(probes, env: dict) -> None:
    from ascendpipe.doctor import ToolFact

    tk = discover(env)

    def toolkit_home():
        for var in HOME_VARS:
            if env.get(var):
                return env[var], var
        return None, None

    def tools():
        facts = [ToolFact(t, str(tk.find(t)) if tk.find(t) else None, tk.tool_version(t) if tk.find(t) else None)
                 for t in TOOLS]
        try:
            facts.append(ToolFact("msaccucmp.py", str(tk.msaccucmp()), None))
        except UserError:
            facts.append(ToolFact("msaccucmp.py", None, None))
        facts.append(_ais_bench(tk, env, ToolFact))
        msit = shutil.which("msit", path=env.get("PATH", ""))
        version = probes.package_version("msit") if msit else None
        facts.append(ToolFact("msit", msit, version))
        return facts

    def npu_chips():
        from ascendpipe.doctor import parse_npu_smi

        exe = shutil.which("npu-smi", path=env.get("PATH", ""))
        if not exe:
            return None, None
        try:
            done = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=30, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, str(exc)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            return None, said[-1] if said else f"exit {done.returncode}"
        return parse_npu_smi(done.stdout), None

    def set_env_scripts():
        from ascendpipe.doctor import SET_ENV_SCRIPTS

        return [path for path in SET_ENV_SCRIPTS if Path(path).is_file()]

    probes.toolkit_home = toolkit_home
    probes.set_env_scripts = set_env_scripts
    probes.cann_version = lambda: cann_version(Path(toolkit_home()[0])) if toolkit_home()[0] else None
    probes.tools = tools
    probes.npu_chips = npu_chips


def _ais_bench(tk, env: dict, ToolFact):
    """ais_bench runs as ``python3 -m ais_bench``: importable by the python3 the toolkit or PATH gives."""
    python = tk.find("python3")
    if python is None:
        return ToolFact("ais_bench", None, None)
    try:
        done = subprocess.run([str(python), "-c", _AIS_PROBE], capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return ToolFact("ais_bench", None, None)
    lines = done.stdout.splitlines() if done.returncode == 0 else []
    origin = lines[0].strip() if lines else ""
    version = lines[1].strip() if len(lines) > 1 and lines[1].strip() else None
    return ToolFact("ais_bench", f"{python} -m ais_bench ({origin})" if origin else None, version)
