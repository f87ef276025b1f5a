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


class LazyParams(RecordingParams):
    """Params whose values are rendered when a template first reads them (``resolve(key)``)."""

    def __init__(self, data: dict, accessed: set, resolve):
        super().__init__(data, accessed)
        self._resolve = resolve

    def __getitem__(self, key):
        self._accessed.add(key)
        if not dict.__contains__(self, key):
            raise KeyError(key)
        return self._resolve(key)

    def get(self, key, default=None):
        self._accessed.add(key)
        return self._resolve(key) if dict.__contains__(self, key) else default

    def items(self):
        return [(k, self[k]) for k in dict.keys(self)]

    def values(self):
        return [self[k] for k in dict.keys(self)]


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


# Resource limits: a pipeline template computes a few short strings, so anything near these is a
# mistake or an attack, refused before Python spends the memory or the time (`'a' * 10**12`,
# `7 ** (10**9)`, nested loops). Jinja's sandbox already limits range() to 100000 items.
MAX_OUTPUT = 1 << 20  # characters in one rendered string, or in one value a template builds
MAX_INT_BITS = 1 << 16  # bits of an integer a template computes
MAX_SECONDS = 5.0  # to render one string (enforced in the main thread, where pipelines resolve)


class ShellRaw(str):
    """A value the `| raw` filter marks: pasted into a `run` command as it is, not shell-quoted."""


def _shell_value(value):
    """``finalize`` of the shell environment: every ``{{ value }}`` in a `run` command is one
    shell word (``shlex.quote``), unless marked ``| raw`` (or built by ``| shjoin``)."""
    import shlex

    if isinstance(value, ShellRaw):
        return value
    return shlex.quote(value if isinstance(value, str) else str(value))


def _size(value, limit: int = MAX_OUTPUT) -> int:
    """Roughly how many characters ``value`` prints as; stops counting past ``limit``."""
    total, todo, seen = 0, [value], set()
    while todo and total <= limit:
        item = todo.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, (list, tuple, set, frozenset, dict)):
            if id(item) in seen:
                total += 8
                continue
            seen.add(id(item))
            total += 2 + 2 * len(item)
            todo.extend(item.items() if isinstance(item, dict) else item)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        else:
            total += 16
    return total


def _limit(what: str, size: int) -> None:
    if size > MAX_OUTPUT:
        raise _TemplateUserError(f"{what} would make a value of about {size} characters; a template value is at "
                                 f"most {MAX_OUTPUT}")


def _check_format(fmt) -> None:
    import re

    if isinstance(fmt, str) and (re.search(r"\d{6,}", fmt) or re.search(r"%[-#0 +]*\*", fmt)):
        raise _TemplateUserError("a format width of 100000 or more (or '*') is not allowed in a pipeline template")


def _check_binop(operator: str, left, right) -> None:
    ints = isinstance(left, int) and isinstance(right, int) and not isinstance(left, bool) and not isinstance(right, bool)
    if operator == "**" and ints and right > 0 and abs(left) > 1:
        if abs(left).bit_length() * right > MAX_INT_BITS:
            raise _TemplateUserError(f"{left} ** {right} is too large (a template integer has at most {MAX_INT_BITS} bits)")
    elif operator == "*":
        if ints:
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise _TemplateUserError(f"the product is too large (a template integer has at most {MAX_INT_BITS} bits)")
            return
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and not isinstance(n, bool):
                _limit("repeating a value", _size(seq) * max(n, 0))
    elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        _limit("joining two values", _size(left) + _size(right))
    elif operator == "%" and isinstance(left, str):
        _check_format(left)


def _check_str_call(owner: str, name: str, args, kwargs) -> None:
    if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
        _limit(f"str.{name}", args[0])
    elif name == "expandtabs":
        width = args[0] if args and isinstance(args[0], int) else 8
        _limit("str.expandtabs", len(owner) + owner.count("\t") * width)
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = owner.count(args[0]) if args[0] else len(owner) + 1
        _limit("str.replace", len(owner) + count * max(len(args[1]) - len(args[0]), 0))
    elif name == "join" and args and isinstance(args[0], (list, tuple)):
        _limit("str.join", _size(args[0]) + len(owner) * len(args[0]))
    elif name in ("format", "format_map"):
        _check_format(owner)


_environments: dict = {}


def _env(shell: bool = False):
    """The sandbox (one per flavour): ``shell=True`` quotes every ``{{ value }}`` for /bin/sh."""
    if shell in _environments:
        return _environments[shell]
    import functools

    from jinja2 import StrictUndefined, filters
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    class _Codegen(CodeGenerator):
        # `a ~ b` compiles to a plain join; route it through the size check
        def visit_Concat(self, node, frame):
            self.write("environment.checked_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class _Namespace(Namespace):
        def __setitem__(self, name, value):
            _limit(f"namespace attribute {name}", _size(value))
            super().__setitem__(name, value)

    class _Sandbox(ImmutableSandboxedEnvironment):
        code_generator_class = _Codegen
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def call_binop(self, context, operator, left, right):
            _check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's own signature)
            target = getattr(__obj, "__wrapped__", __obj)
            owner = getattr(target, "__self__", None)
            if isinstance(owner, str):
                _check_str_call(owner, getattr(target, "__name__", ""), args, kwargs)
            return super().call(__context, __obj, *args, **kwargs)

        def checked_concat(self, items):
            parts = [item if isinstance(item, str) else str(item) for item in items]
            _limit("joining strings with ~", sum(map(len, parts)))
            return "".join(parts)

    def guarded(original, check):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            check(*args, **kwargs)
            return original(*args, **kwargs)
        return wrapper

    def check_width(value=None, width=80, *rest, **kw):
        w = width if isinstance(width, int) else len(str(width))
        _limit("padding", _size(value) + max(w, 0) * (str(value).count("\n") + 1 if isinstance(value, str) else 1))

    def check_replace(eval_ctx, s, old="", new="", *rest, **kw):
        if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
            _check_str_call(s, "replace", (old, new), {})

    def check_format(value="", *args, **kwargs):
        _check_format(value)

    def check_join(eval_ctx, value=(), d="", *rest, **kw):
        if isinstance(value, (list, tuple)):
            _limit("join", _size(value) + len(str(d)) * len(value))

    def check_batch(value=(), linecount=1, *rest, **kw):
        if isinstance(linecount, int):
            _limit("batch", linecount)

    env = _Sandbox(undefined=StrictUndefined, keep_trailing_newline=True,
                   finalize=_shell_value if shell else None)
    env.globals.pop("lipsum", None)  # generates text of any size
    env.globals["namespace"] = _Namespace
    env.filters["center"] = guarded(filters.do_center, check_width)
    env.filters["indent"] = guarded(filters.do_indent, check_width)
    env.filters["replace"] = guarded(filters.do_replace, check_replace)
    env.filters["format"] = guarded(filters.do_format, check_format)
    env.filters["join"] = guarded(filters.do_join, check_join)
    env.filters["batch"] = guarded(filters.do_batch, check_batch)
    env.filters["raw"] = lambda value: ShellRaw(value if isinstance(value, str) else str(value))
    env.filters["shjoin"] = _shjoin
    _environments[shell] = env
    return env


def _shjoin(values) -> ShellRaw:
    """``{{ params.flags | shjoin }}``: each item one quoted shell word, joined by spaces."""
    import shlex

    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        values = [values]
    items = [str(v) for v in values]
    _limit("shjoin", sum(map(len, items)))
    return ShellRaw(" ".join(shlex.quote(v) for v in items))


_FORBIDDEN_TAGS = {"Include": "include", "Import": "import", "FromImport": "from ... import", "Extends": "extends"}


class _Deadline:
    """SIGALRM after ``seconds`` raises inside the render (main thread only; elsewhere a no-op)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = False

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            def expire(signum, frame):
                raise _TemplateUserError(f"rendering took longer than {self.seconds:g} s (a loop too large?)")

            self.previous = signal.signal(signal.SIGALRM, expire)
            self.previous_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True
        return self

    def __exit__(self, *exc):
        if self.armed:
            import signal

            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
            if self.previous_timer[0]:
                signal.setitimer(signal.ITIMER_REAL, *self.previous_timer)


def render(text: str, context: dict[str, Any], *, shell: bool = False) -> str:
    """Render one string; raises ``UserError`` (without location: the caller adds it).

    ``shell=True`` (a `run` stage's ``cmd``): every substituted value is shell-quoted."""
    from jinja2 import TemplateError, UndefinedError, nodes
    from jinja2.exceptions import SecurityError

    env = _env(shell)
    try:
        tree = env.parse(text)
        for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
            tag = _FORBIDDEN_TAGS[type(node).__name__]
            raise UserError(f"template error: {{% {tag} %}} is not allowed: a pipeline template is one string "
                            "(share values through params or YAML anchors)")
        template = env.from_string(tree)
        out, size = [], 0
        with _Deadline(MAX_SECONDS):
            for chunk in template.generate(**context):
                size += len(chunk)
                _limit("the rendered text", size)
                out.append(chunk)
        return "".join(out)
    except UserError:
        raise
    except _TemplateUserError as exc:
        raise UserError(f"template error: {exc}") from None
    except UndefinedError as exc:
        raise UserError(f"template error: {exc.message} (available: {_available(context)})") from None
    except SecurityError as exc:
        raise UserError(f"template error: not allowed in a pipeline template: {exc}") from None
    except TemplateError as exc:
        raise UserError(f"template error: {exc.message or exc}") from None
    except RecursionError:
        raise UserError("template error: recursion too deep (a macro calling itself?)") from None
    except MemoryError:
        raise UserError("template error: out of memory rendering it") from None
    except Exception as exc:  # anything a template computes wrongly is the template's error, not a bug
        raise UserError(f"template error: {type(exc).__name__}: {exc}") from None


def _available(context: dict) -> str:
    params = context.get("params") or {}
    names = [f"params.{k}" for k in sorted(dict.keys(params))]
    return ", ".join(names + ["env.<allow-listed>", "stage.name", "stage.variant"]) or "nothing"


def render_tree(value: Any, context: dict, on_error, *, shell: bool = False) -> Any:
    """Render every templated string in a nested structure; ``on_error(path, err)`` re-raises located."""

    def walk(item, path):
        if isinstance(item, str):
            if needs_render(item):
                try:
                    return render(item, context, shell=shell)
                except UserError as err:
                    on_error(path, err)
            return item
        if isinstance(item, dict):
            return {k: walk(v, path + (k,)) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v, path + (i,)) for i, v in enumerate(item)]
        return item

    return walk(value, ())
