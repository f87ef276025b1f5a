"""ATC's ``--input_shape`` grammar, read and written in one place (the convert params, the ATC and AOE argv,
msit's ``-is``). Pure.

``name:d1,d2,...;name2:...`` where a dim is a number, ``-1`` (dynamic: with a gear option, or unbounded
in a range model), or a range ``lo~hi`` (``hi`` may be ``-1``); ``name:`` is a scalar input (no dims).
Source: CANN ATC ``--input_shape`` (hiascend 850 ``atlasatcparam_16_0016``; ranges: graph dev guide
``atlasag_25_0050``: "动态维度有shape范围的用波浪号“~”表示,固定维度用固定数字表示,无限定范围的用-1表示").
A name may hold ':' (``ns/x:0:1,2``): the dims follow the last one.
"""

from __future__ import annotations

import re

from ascendpipe.errors import Location, UserError

_RANGE = re.compile(r"^(\d+)~(-1|\d+)$")


def _dim(text: str):
    text = text.strip()
    if re.fullmatch(r"-1|\d+", text):
        return int(text)
    m = _RANGE.match(text)
    if m and (m.group(2) == "-1" or int(m.group(1)) <= int(m.group(2))):
        return f"{m.group(1)}~{m.group(2)}"
    return None


def parse_input_shape(text: str, where: Location | None = None) -> dict[str, list]:
    """``name:1,3,224,224;name2:...`` -> {name: dims}: ints (``-1`` dynamic) and ``'lo~hi'`` ranges;
    ``name:`` -> [] (a scalar)."""
    where = where or Location(field="input_shape")
    shapes: dict[str, list] = {}
    for part in filter(None, (p.strip() for p in str(text).split(";"))):
        name, sep, dims = part.rpartition(":")
        values = [] if not dims.strip() else [_dim(d) for d in dims.split(",")]
        if not sep or not name or any(v is None for v in values):
            raise UserError(f"input_shape entry '{part}' is not 'name:d1,d2,...' with each dim a number, -1 or "
                            f"a range lo~hi ('name:' for a scalar; e.g. input:1,3,224,224)", where)
        if name in shapes:
            raise UserError(f"input_shape names '{name}' twice", where)
        shapes[name] = values
    return shapes


def format_input_shape(shape: dict[str, list] | str) -> str:
    """``{"x": [1,3,224,224]}`` -> ``x:1,3,224,224`` (``;`` between inputs); a string is checked and kept."""
    if isinstance(shape, str):
        parse_input_shape(shape)
        return shape
    parts = []
    for name, dims in shape.items():
        if not all((isinstance(d, int) and d >= -1) or (isinstance(d, str) and _dim(d) is not None) for d in dims):
            raise UserError(f"input_shape of '{name}' must be a list of integers (-1 dynamic) or 'lo~hi' ranges, "
                            f"got {dims}", Location(field="input_shape"))
        parts.append(f"{name}:{','.join(str(d) for d in dims)}")
    return ";".join(parts)


def is_fixed(dims: list) -> bool:
    """Every dim a fixed size (no -1, no range)."""
    return all(isinstance(d, int) and d >= 0 for d in dims)


def dim_range(dim) -> tuple[int, int | None]:
    """(lo, hi) a dim accepts; hi None is unbounded. A fixed dim is (d, d); -1 is (1, None)."""
    if isinstance(dim, int):
        return (1, None) if dim < 0 else (dim, dim)
    lo, _, hi = dim.partition("~")
    return int(lo), (None if hi == "-1" else int(hi))


def has_range(shape: dict[str, list]) -> bool:
    return any(isinstance(d, str) for dims in shape.values() for d in dims)
