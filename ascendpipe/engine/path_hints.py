"""Messages for a path that does not exist: the names that do exist where it was looked for, and the
close one (``data/imgz`` -> ``data/imgs``)."""

from __future__ import annotations

import difflib
import os


def close_names(wanted: str, folder: str, limit: int = 8) -> tuple[str | None, list[str]]:
    """(the entry of ``folder`` closest to ``wanted``'s name or None, up to ``limit`` entries)."""
    try:
        names = sorted(n for n in os.listdir(folder) if not n.startswith(".tmp-"))
    except OSError:
        return None, []
    close = difflib.get_close_matches(wanted, names, n=1)
    return (close[0] if close else None), names[:limit] + (["..."] if len(names) > limit else [])


def missing_inside(dep: str, out: str, producer: str, abs_out: str) -> str:
    """``input 'data/imgz' does not exist: stage 'prep' built data/ without it (did you mean
    'data/imgs'?; data/ holds: imgs, labels.txt)``, looking in the deepest folder that exists."""
    rel = dep[len(out.rstrip("/")) + 1:].split("/")
    folder, shown = abs_out, out.rstrip("/")
    while len(rel) > 1 and os.path.isdir(os.path.join(folder, rel[0])):
        folder, shown = os.path.join(folder, rel[0]), f"{shown}/{rel[0]}"
        rel = rel[1:]
    close, names = close_names(rel[0], folder)
    hint = f"did you mean '{shown}/{close}'?; " if close else ""
    holds = ", ".join(names) if names else "nothing"
    return (f"input '{dep}' does not exist: stage '{producer}' is built and its output {out} has no such path "
            f"({hint}{shown}/ holds: {holds})")
