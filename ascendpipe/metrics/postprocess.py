"""Load a user function named ``path/to/module.py:function`` (post-processing, model factories).

Errors are one-line ``UserError``s saying which file and function, and what went wrong, so a typo
in a pipeline never shows a traceback.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

from ascendpipe.errors import Location, UserError


def split_spec(spec: str, location: Location | None = None) -> tuple[str, str]:
    """``'models/net.py:build'`` -> ``('models/net.py', 'build')``."""
    path, sep, func = str(spec).rpartition(":")
    if not sep or not path or not func or not path.endswith(".py"):
        raise UserError(f"'{spec}' should name a Python file and a function, like 'models/net.py:build'", location)
    return path, func


def load_user_function(spec: str, workspace: Path, location: Location | None = None) -> Callable:
    """Import the file (relative to ``workspace``) under a private module name and return the function."""
    rel, func_name = split_spec(spec, location)
    path = Path(rel) if Path(rel).is_absolute() else Path(workspace) / rel
    if not path.is_file():
        raise UserError(f"'{rel}' (from '{spec}') does not exist", location)
    module_name = "ascendpipe_user_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    # the file's own folder first, so it can import its siblings (e.g. a shared model module)
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        module_spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UserError(f"'{rel}' line {exc.lineno}: syntax error: {exc.msg}", location) from None
    except ImportError as exc:
        raise UserError(f"'{rel}' could not be imported: {exc}", location) from None
    except Exception as exc:  # user code failing at import is the user's to fix; say what it raised
        raise UserError(f"'{rel}' failed while importing: {type(exc).__name__}: {exc}", location) from None
    finally:
        sys.path.remove(str(path.parent.resolve()))
    func = getattr(module, func_name, None)
    if func is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise UserError(f"'{rel}' has no function '{func_name}' (it has: {', '.join(names) or 'none'})", location)
    if not callable(func):
        raise UserError(f"'{rel}:{func_name}' is not callable", location)
    return func
