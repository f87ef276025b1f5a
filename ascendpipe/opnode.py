"""One graph op as the pure graph walks see it (ATC's fusion-pass matching in ``precision.atc_passes``,
the profile's kernel attribution in ``profiling.attribution``): no onnx import, hashable, comparable."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
