"""A stage's ``resources:`` as a scale-out executor reserves them. Pure.

``{NPU: 1, CPU: 2, memory: 4GB}`` -> ``{"NPU": 1, "CPU": 2, "memory": 4000000000}``. Memory takes
bytes or a size with a unit: decimal ``KB MB GB TB`` (also ``K M G T``) or binary ``KiB MiB GiB TiB``.
"""

from __future__ import annotations

import re

from ascendpipe.errors import UserError

_UNITS = {
    "": 1, "B": 1,
    "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9, "T": 10**12, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*$")


def parse_size(value) -> int:
    """Bytes from an int or a string like ``4GB``, ``512MiB``, ``1.5G``; ``UserError`` otherwise."""
    if isinstance(value, bool):
        raise UserError(f"memory: expected a size such as 4GB, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UserError(f"memory: {value} is negative")
        return value
    match = _SIZE.match(str(value))
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS:
        raise UserError(f"memory: '{value}' is not a size; write bytes or e.g. 4GB, 512MiB")
    return int(float(match.group(1)) * _UNITS[unit])


def normalize(resources: dict | None) -> dict:
    """Numbers as given (NPU, CPU, custom), memory in bytes; zero entries dropped."""
    out: dict = {}
    for name, value in (resources or {}).items():
        if name == "memory":
            size = parse_size(value)
            if size:
                out["memory"] = size
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UserError(f"{name}: expected a non-negative number, got {value!r}")
        if value:
            out[str(name)] = value
    return out
