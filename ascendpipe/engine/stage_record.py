"""One stage's entry in a run record, as the executor and the no-op path both write it.

The database stores it (``store/db.py``: ``record_stage``, ``record_fresh``); ``records.py`` reads it
back into the runs/show/diff JSON. A plain class (a no-op build writes one per stage; dataclasses
would cost it an import).
"""

from __future__ import annotations


class StageRecord:
    __slots__ = ("seq", "name", "kind", "state", "key", "components", "params", "outputs", "metrics", "remedy",
                 "info", "reasons", "duration", "log", "error")

    def __init__(self, seq: int, stage, state: str, *, key=None, components=None, outputs=None, metrics=None,
                 remedy=None, info=None, reasons=None, duration=None, log=None, error=None):
        self.seq = seq  # order within the run
        self.name = stage.name
        self.kind = stage.kind
        self.state = state  # fresh | restored | ran | failed | skipped
        self.params = stage.params
        self.key = key
        self.components = components or {}  # the stage key's components (deps and tools among them)
        self.outputs = outputs
        self.metrics = metrics
        self.remedy = remedy or []  # [{"name", "path", "hash", "content"?}]
        self.info = info
        self.reasons = reasons
        self.duration = round(duration, 4) if duration is not None else None
        self.log = log
        self.error = error

    @classmethod
    def fresh(cls, seq: int, stage, key: str, components: dict, state: dict) -> StageRecord:
        """A stage left as it was: outputs and metrics from its stored state."""
        return cls(seq, stage, "fresh", key=key, components=components, outputs=state["outs"],
                   metrics=state["metrics"])

    @classmethod
    def failure(cls, seq: int, stage, outcome) -> StageRecord:
        return cls(seq, stage, outcome.state, duration=outcome.duration, log=outcome.log, error=outcome.error,
                   reasons=outcome.reasons)

    def row(self) -> dict:
        """The dict ``store.db`` takes."""
        row = {name: getattr(self, name) for name in self.__slots__}
        row["deps"] = self.components.get("deps")
        row["tools"] = self.components.get("tools")
        # remedy file contents go into the blob table; the record keeps name/path/hash
        row["remedy_blobs"] = self.remedy if self.remedy and "content" in self.remedy[0] else []
        return row
