"""One process per candidate setting, for tune's timing: a session of its own, paused while another runs.

Why a process each, paused (SIGSTOP) between its rounds: onnxruntime's thread pools spin for a while
after a run. Two sessions timed in turn in one process (or two processes left running) leave the
previous one's spinning threads on the cores the next one's run needs; with a 1-thread session
timed after a 2-thread one the 1-thread rounds read 2x their time alone (docs/profile-tune.md). A
stopped process's threads cannot run at all, and the setting is timed as infer runs it (spinning on).

Protocol over the child's stdin/stdout: pickled ``(command, argument)`` requests, pickled
``("ok", value)`` / ``("error", message)`` replies. Pure stdlib on the parent side; the child imports
onnxruntime.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

WARMUP_RUNS = 2  # first runs allocate the arena and pick kernels
CAN_PAUSE = hasattr(signal, "SIGSTOP") and hasattr(signal, "SIGCONT")
QUIET_GAP_S = 0.2  # without SIGSTOP (Windows): let the idle pool stop spinning before the next round


class WorkerError(Exception):
    """The child could not open or run the model with these settings (its first line)."""


class Worker:
    """A child process holding one session of ``model_path`` with ``settings``."""

    def __init__(self, model_path: Path, settings: dict, batches: Sequence[dict]):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the parent's ascendpipe
        self.proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        self.paused = False
        try:
            self._send(("open", (str(model_path), dict(settings), [dict(b) for b in batches])))
            self._reply()
        except BaseException:
            self.close()
            raise

    def _send(self, message) -> None:
        pickle.dump(message, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.flush()

    def _reply(self):
        try:
            status, value = pickle.load(self.proc.stdout)
        except EOFError:
            raise WorkerError(f"the timing process ended (exit {self.proc.wait()})") from None
        if status != "ok":
            raise WorkerError(str(value))
        return value

    def request(self, command: str, argument: Any = None):
        self.resume()
        try:
            self._send((command, argument))
            return self._reply()
        finally:
            self.pause()

    def round_ms(self, iterations: int) -> float:
        """ms per run over ``iterations`` runs after one untimed run (its caches warm again)."""
        return float(self.request("time", iterations))

    def outputs(self) -> list[list]:
        return self.request("outputs")

    def pause(self) -> None:
        if self.proc.poll() is not None:
            return
        if CAN_PAUSE:
            os.kill(self.proc.pid, signal.SIGSTOP)
            os.waitpid(self.proc.pid, os.WUNTRACED)  # returns once it is stopped: none of its threads runs on
            self.paused = True
        else:
            time.sleep(QUIET_GAP_S)

    def resume(self) -> None:
        if self.paused and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            try:
                self._send(("quit", None))
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


# ----------------------------------------------------------------------------- the child

def _serve(inp, out) -> None:
    session, batches = None, []

    def reply(status, value):
        pickle.dump((status, value), out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()

    while True:
        try:
            command, argument = pickle.load(inp)
        except EOFError:
            return
        if command == "quit":
            return
        try:
            if command == "open":
                from ascendpipe.backends.onnxruntime.profile import open_session

                model_path, settings, batches = argument
                from ascendpipe.backends.onnxruntime.session import run_fn

                session = open_session(Path(model_path), settings)
                run = run_fn(session)  # session.run, unless a bfloat16 input or output needs OrtValues
                for i in range(WARMUP_RUNS):
                    run(None, batches[i % len(batches)])
                reply("ok", None)
            elif command == "time":
                run(None, batches[0])
                start = time.perf_counter()
                for i in range(argument):
                    run(None, batches[i % len(batches)])
                reply("ok", 1000.0 * (time.perf_counter() - start) / argument)
            elif command == "outputs":
                reply("ok", [run(None, feeds) for feeds in batches])
            else:
                reply("error", f"unknown command {command!r}")
        except Exception as exc:  # noqa: BLE001 - a setting onnxruntime refuses: its message goes back
            text = str(exc).strip()
            reply("error", text.splitlines()[0][:300] if text else type(exc).__name__)


def _die_with_parent() -> None:
    """Linux: SIGKILL when the parent dies (a stopped child would otherwise wait forever for a SIGCONT
    no one sends; SIGKILL ends a stopped process too)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() == 1:  # the parent died before the call above
            os._exit(1)


if __name__ == "__main__":
    _die_with_parent()
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing printed (by Python or a library) may corrupt the replies
    sys.stdout = sys.stderr
    _serve(sys.stdin.buffer, channel)
