"""Atomic writes for the profiling outputs (one implementation: ``ascendpipe.fsutil``)."""

from __future__ import annotations

from ascendpipe.fsutil import write_json_atomic, write_text_atomic

__all__ = ["write_text_atomic", "write_json_atomic"]
