"""What the console a stream goes to can show, decided in one place for every printer (the build's
lines and status line, compare's table, infer's bar). A leaf module (standard library only).

- Colour (ANSI SGR codes): on a terminal only, never where ``NO_COLOR`` is set to a non-empty value
  ("when present and not an empty string (regardless of its value), prevents the addition of ANSI
  color", https://no-color.org), and never where ``TERM=dumb`` (a terminal that interprets no escape
  sequence: Emacs' shell, a CI log viewer; ncurses' terminfo entry ``dumb`` has no capabilities).
- Lines redrawn in place (``\\r`` status lines, progress bars): on a terminal that is not ``dumb``.
  Where ``NO_COLOR`` is set they are still drawn, with ``\\r`` and spaces alone: the erase-line code
  (``\\033[K``) is an escape sequence too, and such a user asked for none.
"""

from __future__ import annotations

import os


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, a closed file, a terminal gone
        return False


def dumb() -> bool:
    return os.environ.get("TERM", "").strip().lower() == "dumb"


def no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


def colour(stream) -> bool:
    """ANSI colours on ``stream`` (see the module's docstring)."""
    return is_terminal(stream) and not no_color() and not dumb()


def redraws(stream) -> bool:
    """Lines redrawn in place with ``\\r`` (a status line, a progress bar) on ``stream``."""
    return is_terminal(stream) and not dumb()


def escapes(stream) -> bool:
    """Escape sequences other than colour (``\\033[K``, erase to the end of the line) on ``stream``."""
    return redraws(stream) and not no_color()
