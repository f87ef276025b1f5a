"""One memory allowance shared by dumps made at the same time (pure threading, no onnxruntime).

A compare dumps its target and its golden. Made one after the other, each dump's runs leave the
cores idle while its tensors are written (and the writers idle while it runs); made at once, each
fills the other's gaps. But each dump bounds its memory by running segment by segment
(``segments``), and two at once would hold two segments. So they share a gate: before a run, a
dump holds the bytes its run keeps (the segment's estimate, which its budget was planned with),
and a run that would take the held bytes past ``capacity`` waits until the other's bytes are
released; a run larger than the capacity on its own waits until nothing is held and runs alone, as
it would in a dump made by itself. Runs are let through in the order they asked (first come, first
served), so a large run is not passed over forever by the other dump's small ones.

``crowded()`` tells a run whether another holds bytes beside it: its session then takes one thread,
so two runs at once share the cores rather than contend for them (a run let through alone keeps
onnxruntime's default threads).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager


class GateClosed(Exception):
    """The gate was closed (the compare stopped): a dump still running stops at its next run."""


class MemoryGate:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held = 0
        self._holders = 0
        self._next_ticket = 0
        self._serving = 0
        self._closed = False
        self._gone: set[int] = set()  # tickets done waiting, ahead of or at the one served
        self._changed = threading.Condition()

    def crowded(self) -> bool:
        """Whether another run holds bytes too (asked from inside a ``hold``): two runs share the cores."""
        with self._changed:
            return self._holders > 1

    @contextmanager
    def hold(self, nbytes: int):
        """Hold ``nbytes`` for the length of the block, waiting in turn until they fit (see the module)."""
        with self._changed:
            ticket = self._next_ticket
            self._next_ticket += 1
            try:
                while not self._closed and not (ticket == self._serving and self._fits(nbytes)):
                    self._changed.wait()
                if self._closed:
                    raise GateClosed()
            except BaseException:  # closed, or interrupted while waiting: the turn passes on
                self._pass_turn(ticket)
                raise
            self._pass_turn(ticket)
            self._held += nbytes
            self._holders += 1
        try:
            yield
        finally:
            with self._changed:
                self._held -= nbytes
                self._holders -= 1
                self._changed.notify_all()

    def _pass_turn(self, ticket: int) -> None:
        """``ticket`` is done waiting (served or gone): the next one waiting is served."""
        self._gone.add(ticket)
        while self._serving in self._gone:
            self._gone.discard(self._serving)
            self._serving += 1
        self._changed.notify_all()

    def _fits(self, nbytes: int) -> bool:
        return self._held == 0 or self._held + nbytes <= self.capacity

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop letting runs through: a waiting or later ``hold`` raises ``GateClosed``."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
