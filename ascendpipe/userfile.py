"""Reading a user's data file field by field: every value checked before it is used, every problem
one ``UserError`` naming the file and the field (``labels.json: annotations[3].bbox: "abc" is not a
list of 4 numbers``). A leaf module (standard library and ``errors`` only): ground truth, letterbox
metadata, tune banks and the other readers of user files share it.
"""

from __future__ import annotations

import math

from ascendpipe.errors import UserError


def fail(file, field: str | None, problem: str) -> UserError:
    """``FILE: FIELD: problem`` (the field left out when the file as a whole is wrong)."""
    return UserError(f"{file}: {field}: {problem}" if field else f"{file}: {problem}")


def shown(value, limit: int = 40) -> str:
    """A value as the message quotes it (JSON-like, cut short)."""
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_text(path, what: str = "file") -> str:
    """A text file's content; a missing, unreadable, binary or non-UTF-8 file is one located line."""
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        raise UserError(f"{path}: the {what} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not the {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not a text file (byte {exc.start} is not UTF-8); give the {what} as text") from None


# JSON a user gives (labels, COCO, tune banks, the remote configuration, fusion switches...) nests a
# few levels (COCO: 4, a keypoint list 5); a file nested deeper than this is refused before anything
# walks it: Python's own recursion stops near 1000 levels, inside json's parser or, for a file just
# under that, inside whatever reads the value next (a RecursionError traceback)
MAX_JSON_DEPTH = 64
# memory a parsed JSON file takes, per byte of its text (the text, its str, the objects): measured with
# json.loads on CPython 3.11, 2.8x for COCO annotations, 5.3x for lists of integers; 8x leaves room
JSON_MEMORY_PER_BYTE = 8


def json_depth(value, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep ``value`` nests (a scalar 0, ``[]`` 1), counted up to ``limit + 1`` at most: level by
    level without recursion (a quarter of json.loads' own time on a 150 MB COCO file)."""
    containers = (dict, list)
    level = [value] if type(value) in containers else []
    depth = 0
    while level and depth <= limit:
        depth += 1
        following: list = []
        for node in level:
            following += [c for c in (node.values() if type(node) is dict else node) if type(c) in containers]
        level = following
    return depth


def parse_json(text: str, label, what: str = "file", *, deep: str | None = None):
    """``text`` as JSON, ``label`` naming where it came from (a path); malformed or nested past
    MAX_JSON_DEPTH is one located line (``deep``: what that line adds, else what the file should be)."""
    import json

    if not text.strip():
        raise UserError(f"{label}: the {what} is empty; expected JSON")
    too_deep = False
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        cut = " (the file ends early: cut short?)" if exc.pos >= len(text.rstrip()) else ""
        raise UserError(f"{label}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}{cut}") from None
    except RecursionError:  # past the interpreter's own limit (about 1000 levels)
        too_deep, value = True, None
    if too_deep or json_depth(value) > MAX_JSON_DEPTH:
        raise UserError(f"{label}: JSON nested deeper than it can be read (arrays or objects inside each other "
                        f"more than {MAX_JSON_DEPTH} levels deep): {deep or f'not a {what}'}")
    return value


def load_json(path, what: str = "file"):
    """A JSON file's value; an empty, cut-short, malformed, absurdly nested file, or one too large for
    this machine's memory, is one located line."""
    import os

    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0  # read_text says why
    if size:
        from ascendpipe.hostmemory import check_fits

        check_fits(size * JSON_MEMORY_PER_BYTE, f"{path}: reading the {what} ({size} bytes of JSON, about "
                   f"{JSON_MEMORY_PER_BYTE}x that once parsed)", hint=f"give a smaller {what}")
    return parse_json(read_text(path, what), path, what)


def number(value, file, field: str, *, minimum: float | None = None, above: float | None = None,
           integer: bool = False, maximum: float | None = None):
    """``value`` if it is a finite number (never a bool or text) within the bounds given, else one line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(file, field, f"{shown(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise fail(file, field, f"{value} where a finite number belongs")
    if integer and value != int(value):
        raise fail(file, field, f"{shown(value)} is not a whole number")
    if minimum is not None and value < minimum:
        raise fail(file, field, f"{shown(value)} is below {minimum:g}")
    if above is not None and not value > above:
        raise fail(file, field, f"{shown(value)} must be above {above:g}")
    if maximum is not None and value > maximum:
        raise fail(file, field, f"{shown(value)} is above {maximum:g}")
    return int(value) if integer else value


def numbers(value, file, field: str, count: int, **bounds) -> list:
    """A list of exactly ``count`` numbers (each checked as ``number``)."""
    if not isinstance(value, (list, tuple)) or len(value) != count:
        raise fail(file, field, f"{shown(value)} is not a list of {count} numbers")
    return [number(v, file, f"{field}[{i}]", **bounds) for i, v in enumerate(value)]


def mapping(value, file, field: str | None) -> dict:
    if not isinstance(value, dict):
        raise fail(file, field, f"expected an object, got {shown(value)}")
    return value


def listing(value, file, field: str | None) -> list:
    if not isinstance(value, list):
        raise fail(file, field, f"expected a list, got {shown(value)}")
    return value
