"""Sandboxed Jinja2 rendering of the strings in a pipeline file.

Every string scalar that holds ``{{`` or ``{%`` is rendered on its own (so an error keeps the
scalar's YAML location). The context is ``params`` (the stage's overlaid params), ``env`` (only the
names the pipeline allow-lists under ``env:``) and ``stage`` (``name``, ``variant``, ``out``).
Undefined names are errors, never empty strings. Which top-level params a stage's templates read is
recorded, so a ``run`` stage is keyed on exactly the params it uses.
"""

from __future__ import annotations

from typing import Any

from ascendpipe.errors import UserError


def needs_render(value: str) -> bool:
    return "{{" in value or "{%" in value


class RecordingParams(dict):
    """A dict that notes which keys a template read (templates reach values via ``__getitem__``)."""

    def __init__(self, data: dict, accessed: set):
        super().__init__(data)
        self._accessed = accessed

    def __getitem__(self, key):
        self._accessed.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._accessed.add(key)
        return super().get(key, default)


class AllowedEnv:
    """``env.X`` for allow-listed X; anything else is a clear error."""

    def __init__(self, allowed: list[str], environ: dict[str, str], used: dict):
        self._allowed = set(allowed)
        self._environ = environ
        self._used = used

    def _lookup(self, name: str) -> str:
        if name not in self._allowed:
            raise _TemplateUserError(f"env.{name} is not allow-listed; add '{name}' to the pipeline's `env:` list")
        if name not in self._environ:
            raise _TemplateUserError(f"environment variable {name} is not set")
        value = self._environ[name]
        self._used[name] = value
        return value

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._lookup(name)

    def __getitem__(self, name: str) -> str:
        return self._lookup(name)


class _TemplateUserError(Exception):
    pass


_environment = None


def _env():
    global _environment
    if _environment is None:
        from jinja2 import StrictUndefined
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        _environment = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
    return _environment


def render(text: str, context: dict[str, Any]) -> str:
    """Render one string; raises ``UserError`` (without location: the caller adds it)."""
    from jinja2 import TemplateError, UndefinedError
    from jinja2.exceptions import SecurityError

    try:
        return _env().from_string(text).render(**context)
    except _TemplateUserError as exc:
        raise UserError(f"template error: {exc}") from None
    except UndefinedError as exc:
        raise UserError(f"template error: {exc.message} (available: {_available(context)})") from None
    except SecurityError as exc:
        raise UserError(f"template error: not allowed in a pipeline template: {exc}") from None
    except TemplateError as exc:
        raise UserError(f"template error: {exc.message or exc}") from None


def _available(context: dict) -> str:
    params = context.get("params") or {}
    names = [f"params.{k}" for k in sorted(dict.keys(params))]
    return ", ".join(names + ["env.<allow-listed>", "stage.name", "stage.variant"]) or "nothing"


def render_tree(value: Any, context: dict, on_error) -> Any:
    """Render every templated string in a nested structure; ``on_error(path, err)`` re-raises located."""

    def walk(item, path):
        if isinstance(item, str):
            if needs_render(item):
                try:
                    return render(item, context)
                except UserError as err:
                    on_error(path, err)
            return item
        if isinstance(item, dict):
            return {k: walk(v, path + (k,)) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v, path + (i,)) for i, v in enumerate(item)]
        return item

    return walk(value, ())
