"""How far long work has got, told by the code doing it to whoever listens.

The code doing the work calls ``report(done, total, unit)`` (cheap when nobody listens: one
attribute read); a listener installed with ``listening(sink)`` on the same thread receives it. The
build listens on each stage's thread and shows the counts of a stage running for more than ~10 s on
the console (``engine.progress``); a standalone command may listen the same way. Work handed to
another thread takes its listener along with ``carry``. Imports nothing of ascendpipe: every layer
may report.
"""

from __future__ import annotations

import threading

_local = threading.local()


def report(done: int, total: int | None, unit: str) -> None:
    """``done`` of ``total`` (None: unknown) ``unit`` (e.g. "tensors compared") so far."""
    sink = getattr(_local, "sink", None)
    if sink is not None:
        try:
            sink(done, total, unit)
        except Exception:  # a listener's failure never stops the work it watches
            pass


class listening:
    """``with listening(sink):`` reports made on this thread go to ``sink(done, total, unit)``."""

    def __init__(self, sink):
        self.sink = sink

    def __enter__(self):
        self._before = getattr(_local, "sink", None)
        _local.sink = self.sink
        return self

    def __exit__(self, *exc):
        _local.sink = self._before
        return False


def carry(fn, label: str | None = None):
    """``fn`` to run on another thread, reporting to this thread's listener (its units prefixed with
    ``label``: two threads counting the same unit stay apart)."""
    sink = getattr(_local, "sink", None)
    if sink is None:
        return fn
    target = sink if not label else (lambda done, total, unit: sink(done, total, f"{label} {unit}"))

    def run(*args, **kwargs):
        with listening(target):
            return fn(*args, **kwargs)

    return run
