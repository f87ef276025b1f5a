"""The three kinds of failure, and how each is shown.

- ``UserError``: bad input (pipeline file, flags, models, data). Carries a location and is printed as
  one line, ``LOCATION: message``, exit code 2, no traceback.
- ``StageFailed``: a stage ran and failed. Carries the stage name and its log path; exit code 1.
- anything else is a bug in ascendpipe and is shown with its traceback.
"""

from __future__ import annotations

_LOCATION_PARTS = ("file", "line", "column", "stage", "field", "op")


class Location:
    """Where a user error comes from. Every part is optional; ``str()`` joins what is known.

    (A plain class, not a dataclass: ``dataclasses`` costs a no-op build ~10 ms of imports.)
    """

    __slots__ = _LOCATION_PARTS

    def __init__(self, file=None, line=None, column=None, stage=None, field=None, op=None):
        self.file = file  # as the user named it
        self.line = line  # 1-based
        self.column = column  # 1-based
        self.stage = stage
        self.field = field
        self.op = op

    def parts(self) -> dict:
        return {k: getattr(self, k) for k in _LOCATION_PARTS}

    def __eq__(self, other):
        return isinstance(other, Location) and self.parts() == other.parts()

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.parts().items() if v is not None)
        return f"Location({inner})"

    def __str__(self) -> str:
        parts = []
        if self.file:
            where = self.file
            if self.line:
                where += f":{self.line}"
                if self.column:
                    where += f":{self.column}"
            parts.append(where)
        if self.stage:
            parts.append(f"stage '{self.stage}'")
        if self.op:
            parts.append(f"op '{self.op}'")
        return ": ".join(parts)


class UserError(Exception):
    """A problem in what the user gave us. ``str(err)`` is the one line we print."""

    exit_code = 2

    def __init__(self, message: str, location: Location | None = None, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.location = location or Location()
        self.hint = hint

    def with_location(self, **parts) -> "UserError":
        """A copy with location parts filled in where this error did not know them yet."""
        merged = self.location.parts()
        for key, value in parts.items():
            if merged.get(key) is None:
                merged[key] = value
        copy = UserError(self.message, Location(**merged), hint=self.hint)
        copy.__class__ = type(self)  # a subclass keeps its kind and exit code (busy database: 1)
        copy.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("location",)})
        copy.location = Location(**merged)
        return copy

    def __str__(self) -> str:
        where = str(self.location)
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class StageFailed(Exception):
    """A stage's action failed; the log says why."""

    exit_code = 1

    def __init__(self, stage: str, message: str, log_path: str | None = None):
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.log_path = log_path

    def __str__(self) -> str:
        text = f"stage '{self.stage}' failed: {self.message}"
        if self.log_path:
            text += f" (log: {self.log_path})"
        return text


def few(items, limit: int = 5, *, show=str, sep: str = ", ") -> str:
    """A list as a message names it: the first ``limit`` items (each through ``show``) and how many more,
    ``a, b, c, d, e and 99995 more (100000 in all)``. A line naming what a file lists (100,000 unknown
    keep_dtype names) stays a line."""
    items = list(items)
    if len(items) <= limit + 1:  # "and 1 more" would be longer than the item
        return sep.join(show(i) for i in items)
    return f"{sep.join(show(i) for i in items[:limit])} and {len(items) - limit} more ({len(items)} in all)"
