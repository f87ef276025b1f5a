"""ATC's ``--input_shape`` grammar, ``name:d1,d2,...;name2:...``, read and written in one place
(the convert params, the ATC and AOE argv, msit's ``-is``). Pure."""

from __future__ import annotations

from ascendpipe.errors import Location, UserError


def parse_input_shape(text: str, where: Location | None = None) -> dict[str, list[int]]:
    """``name:1,3,224,224;name2:...`` -> {name: dims}. A name may hold ':' (``ns/x:0:1,2``): the dims
    follow the last one. -1 marks a dynamic dim, as ATC takes it."""
    where = where or Location(field="input_shape")
    shapes: dict[str, list[int]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, dims = part.rpartition(":")
        try:
            values = [int(d) for d in dims.split(",")]
        except ValueError:
            values = None
        if not sep or not name or values is None:
            raise UserError(f"input_shape entry '{part}' is not 'name:d1,d2,...' (e.g. input:1,3,224,224)", where)
        shapes[name] = values
    return shapes


def format_input_shape(shape: dict[str, list[int]] | str) -> str:
    """``{"x": [1,3,224,224]}`` -> ``x:1,3,224,224`` (``;`` between inputs); a string is checked and kept."""
    if isinstance(shape, str):
        parse_input_shape(shape)
        return shape
    parts = []
    for name, dims in shape.items():
        if not all(isinstance(d, int) for d in dims):
            raise UserError(f"input_shape of '{name}' must be a list of integers, got {dims}",
                            Location(field="input_shape"))
        parts.append(f"{name}:{','.join(str(d) for d in dims)}")
    return ";".join(parts)
