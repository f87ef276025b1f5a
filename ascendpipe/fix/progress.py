"""fix's progress: one line per attempt as it ends, for someone watching a terminal.

As the build decides (``engine.progress``: a status line only on a terminal), so fix: on a terminal each
attempt prints ``attempt 3  grow  133 remedies  ...`` when it starts and its verdict when it ends, with
the counts the work reports while it runs (``ascendpipe.ticker``: tensors dumped, compared); off a
terminal (a pipe, a file, CI) it prints nothing until the table at the end. The search's ``watch``.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ascendpipe.fix.core import Attempt
from ascendpipe.fix.search import metric_text
from ascendpipe.fix.terminal import is_terminal, remedy_text, terminal_width  # noqa: F401

TICK_SECONDS = 1.0


class AttemptLines:
    """The search's watch: prints each attempt on ``stream`` (see the module docstring)."""

    def __init__(self, stream, metric_name: str, *, width: int | None = None):
        self.stream, self.metric_name = stream, metric_name
        self.width = width or terminal_width(stream)
        self._lock = threading.Lock()
        self._head = ""
        self._last_tick = 0.0
        # a terminal that redraws (not TERM=dumb): the line as the attempt starts, its counts, then the verdict
        self.live = is_terminal(stream) and os.environ.get("TERM") != "dumb"

    def started(self, number: int, phase: str, remedy) -> None:
        size = f"{len(remedy)} remed{'y' if len(remedy) == 1 else 'ies'}" if remedy else "no remedy"
        head = f"  attempt {number:>2}  {phase:<8}  {size}: "
        head += remedy_text([str(c) for c in remedy], max(24, self.width - len(head) - 48)) if remedy else "(none)"
        with self._lock:
            self._head = head
            if self.live:
                self._write(head + " ...")

    def tick(self, done: int, total: int | None, unit: str) -> None:
        """A count from the work running the attempt (``ascendpipe.ticker``): shown at most once a second."""
        now = time.monotonic()
        if now - self._last_tick < TICK_SECONDS or not self._head or not self.live:
            return
        self._last_tick = now
        told = f"{done}/{total} {unit}" if total else f"{done} {unit}"
        with self._lock:
            self._write("\r\033[K" + _cut(f"{self._head} ... {told}", self.width))

    def ended(self, attempt: Attempt) -> None:
        r = attempt.result
        value = "-" if r.metric is None else metric_text(r.metric)
        verdict = "target met" if r.passed else "target not met"
        took = "resumed from the journal" if r.resumed else (f"{r.seconds:.1f}s" if r.seconds is not None else "")
        tail = f"  {self.metric_name} {value}, {verdict}" + (f"; {took}" if took else "")
        note = r.note if not r.passed and r.note else ""
        with self._lock:
            line = _cut(self._head + tail + (f"; {note}" if note else ""), self.width)
            self._write(("\r\033[K" if self.live else "") + line + "\n")
            self._head = ""

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a watcher that went away never stops the search
            pass


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


class listening_to:
    """``with listening_to(lines):`` the counts the work reports on this thread go to ``lines.tick``."""

    def __init__(self, lines: AttemptLines | None):
        self.lines = lines
        self._inner = None

    def __enter__(self):
        if self.lines is not None:
            from ascendpipe.ticker import listening

            self._inner = listening(self.lines.tick)
            self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        if self._inner is not None:
            self._inner.__exit__(*exc)
        return False


def watch_for(json_output: bool, metric_name: str, stream=None) -> AttemptLines | None:
    """The lines for whoever watches: stdout on a terminal (stderr when stdout carries ``--json``); None
    off a terminal."""
    if stream is not None:
        return AttemptLines(stream, metric_name)
    out = sys.stderr if json_output else sys.stdout
    return AttemptLines(out, metric_name) if is_terminal(out) else None
