"""Running the CANN tools: argv lists only (never a shell string), output to the stage log.

The runner is injected so that tests can record the argv (``RecordingRunner``) or run the test
doubles, and a real board runs ``SubprocessRunner``.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol, TextIO

from ascendpipe.errors import StageFailed


class Runner(Protocol):
    def run(self, argv: list[str], *, cwd: Path, env: Mapping[str, str] | None, log: TextIO,
            ok_codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess: ...


def tool_label(argv: list[str]) -> str:
    """The tool a command runs, for messages: 'atc', 'python3 -m ais_bench', 'msaccucmp.py'."""
    name = Path(argv[0]).name
    if name.startswith("python") and len(argv) > 2 and argv[1] == "-m":
        return f"{name} -m {argv[2]}"
    if name.startswith("python") and len(argv) > 1:
        return Path(argv[1]).name
    return name


@dataclass
class SubprocessRunner:
    """Runs a tool; stdout and stderr go to the stage log; an unexpected exit is StageFailed."""

    stage: str
    log_path: str | None = None

    def run(self, argv, *, cwd, env, log, ok_codes=(0,)):
        argv = [str(a) for a in argv]
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        merged = dict(os.environ) if env is None else dict(env)
        try:
            proc = subprocess.run(argv, cwd=str(cwd), env=merged, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace")
        except OSError as exc:
            raise StageFailed(self.stage, f"{tool_label(argv)} could not start: {exc}", self.log_path) from None
        log.write(proc.stdout)
        log.flush()
        if proc.returncode not in ok_codes:
            last = proc.stdout.strip().splitlines()[-1:] or [""]
            raise StageFailed(self.stage, f"{tool_label(argv)} exited with {proc.returncode}: {last[0][:200]}",
                              self.log_path)
        return proc


@dataclass
class RecordingRunner:
    """Records every argv; runs it through ``delegate`` when given (e.g. the test doubles)."""

    delegate: Runner | None = None
    calls: list[list[str]] = field(default_factory=list)
    on_call: Callable[[list[str], Path], None] | None = None  # fakes outputs when not delegating

    def run(self, argv, *, cwd, env, log, ok_codes=(0,)):
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        if self.delegate is not None:
            return self.delegate.run(argv, cwd=cwd, env=env, log=log, ok_codes=ok_codes)
        if self.on_call is not None:
            self.on_call(argv, Path(cwd))
        return subprocess.CompletedProcess(argv, 0, "", "")

    def tools(self) -> list[str]:
        return [tool_label(a) for a in self.calls]


def runner_for(ctx) -> Runner:
    """The runner a stage uses: the injected one (``ctx.run_command``) or a real subprocess runner,
    behind the tools' path check (tool_paths.py), so no tool is handed a path it would refuse."""
    injected = getattr(ctx, "run_command", None)
    if injected is not None and hasattr(injected, "run"):
        inner = injected
    elif callable(injected):
        inner = _CallableRunner(injected)
    else:
        inner = SubprocessRunner(stage=ctx.name, log_path=getattr(ctx.log, "name", None))
    return PathCheckedRunner(inner, ctx.name)


@dataclass
class PathCheckedRunner:
    """Checks every path an argv (and TUNE_BANK_PATH) hands the tool before running it."""

    inner: Runner
    stage: str

    def run(self, argv, *, cwd, env, log, ok_codes=(0,)):
        from ascendpipe.backends.ascend.tool_paths import check_argv, check_path
        from ascendpipe.errors import Location

        argv = [str(a) for a in argv]
        check_argv(argv, location=Location(stage=self.stage))
        if env and env.get("TUNE_BANK_PATH"):
            check_path(env["TUNE_BANK_PATH"], tool=tool_label(argv), what="TUNE_BANK_PATH",
                       location=Location(stage=self.stage))
        return self.inner.run(argv, cwd=cwd, env=env, log=log, ok_codes=ok_codes)

    def __getattr__(self, name):  # calls/tools() of a RecordingRunner stay reachable
        return getattr(self.inner, name)


@dataclass
class _CallableRunner:
    fn: Callable

    def run(self, argv, *, cwd, env, log, ok_codes=(0,)):
        return self.fn(argv, cwd=cwd, env=env, log=log, ok_codes=ok_codes)
