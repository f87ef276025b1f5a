"""How fix fits a terminal: whether a stream is one, its width, a remedy set in a given width."""

from __future__ import annotations

import os


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def terminal_width(stream=None, default: int = 120) -> int:
    """The terminal's width (COLUMNS first, as the shell says), ``default`` off a terminal."""
    import shutil

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 20:
        return int(columns)
    if stream is not None and not is_terminal(stream):
        return default
    return max(40, shutil.get_terminal_size((default, 24)).columns)


def remedy_text(names: list[str], width: int) -> str:
    """A remedy set in at most ``width`` characters (the full set is in fix.json): as it is where it fits;
    else grouped, the same ops of repeated blocks once with their count
    (``/model/layers.*/input_layernorm/{Pow,ReduceMean} ×32``); else cut after the groups that fit, with the
    count of remedies left out (``/ReduceSum, /Sqrt, ... (+37 more)``)."""
    full = ", ".join(names)
    if len(full) <= width or not names:
        return full
    for brief in (False, True):  # the ops of a scope listed, else counted ({4 ops})
        groups = _grouped(names, brief)
        text = ", ".join(label for label, _n in groups)
        if len(text) <= width:
            return text
    shown, used = [], 0
    for i, (label, _n) in enumerate(groups):
        left = sum(n for _label, n in groups[i + 1:])
        tail = f", ... (+{left} more)" if left else ""
        piece = (", " if shown else "") + label
        if used + len(piece) + len(tail) > width:
            break
        shown.append(label)
        used += len(piece)
    left = sum(n for _label, n in groups[len(shown):])
    if not shown:  # not even the first group fits: cut it, or say how many
        label = groups[0][0]
        tail = f", ... (+{left - groups[0][1]} more)" if left > groups[0][1] else ""
        room = width - len(tail) - 1
        return label[:room] + "…" + tail if room >= 8 else f"{len(names)} remedies"[:width]
    return ", ".join(shown) + f", ... (+{left} more)"


def _grouped(names: list[str], brief: bool = False) -> list[tuple[str, int]]:
    """(label, how many remedies it stands for): the same op in repeated blocks as ``pattern ×N`` (scope
    numbers as ``*``), the ops of one scope pattern with the same count as ``scope/{a,b}``; in first-seen order."""
    from ascendpipe.fix.causes import block_pattern

    by_pattern: dict[str, list[str]] = {}
    for name in names:
        pattern = block_pattern(name)
        by_pattern.setdefault(pattern.replace("#", "*") if pattern else name, []).append(name)
    merged: dict[tuple[str, str, int], list[str]] = {}
    for key, members in by_pattern.items():
        sep = "/" if "/" in key else "."
        scope, _, leaf = key.rpartition(sep) if len(members) > 1 and sep in key else ("", "", key)
        merged.setdefault((scope, sep, len(members)), []).append(leaf if scope else key)
    out = []
    for (scope, sep, n), leaves in merged.items():
        if not scope:
            out += [(leaf, 1) for leaf in leaves]
            continue
        if len(leaves) == 1:
            body = leaves[0]
        else:
            body = "{" + (f"{len(leaves)} ops" if brief else ",".join(leaves)) + "}"
        out.append((f"{scope}{sep}{body} ×{n}", n * len(leaves)))
    return out
