"""Safe YAML loading that remembers where every value came from.

Errors about a pipeline must name ``file:line:column``. PyYAML's composed nodes carry start marks;
we construct plain Python data with the safe constructor and keep a side table from the path of
each value (a tuple of keys and indices) to its mark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascendpipe.errors import Location, UserError

Path_ = tuple  # ('stages', 'convert', 'params', 'precision_mode')


@dataclass
class Marks:
    file: str
    table: dict[tuple, tuple[int, int]]  # path -> (line, column) of the value, 1-based
    keys: dict[tuple, tuple[int, int, str]] = field(default_factory=dict)  # path -> the key's (line, column, text)
    # path -> the source text of a scalar YAML 1.1 read as a boolean (`off`, `yes`): to say "quote it"
    bools: dict[tuple, str] = field(default_factory=dict)
    # path -> where a --set (or overrides-file line) replaced the value: it is blamed, not the YAML line
    overrides: dict[tuple, Location] = field(default_factory=dict)

    def overridden(self, path: tuple) -> Location | None:
        path = tuple(path)
        for i in range(len(path), 0, -1):
            if path[:i] in self.overrides:
                return self.overrides[path[:i]]
        return None

    def location(self, path: tuple, **extra) -> Location:
        """The nearest known mark at or above ``path`` (the --set argument when one replaced it)."""
        over = self.overridden(path)
        if over is not None:
            return Location(file=over.file, line=over.line, column=over.column, **extra)
        probe = tuple(path)
        while probe and probe not in self.table:
            probe = probe[:-1]
        line, col = self.table.get(probe, (None, None))
        return Location(file=self.file, line=line, column=col, **extra)

    def key_location(self, path: tuple, **extra) -> Location:
        """Where the mapping key ending ``path`` is written (the value's mark when unknown)."""
        path = tuple(path)
        if path in self.keys and self.overridden(path) is None:
            line, col, _ = self.keys[path]
            return Location(file=self.file, line=line, column=col, **extra)
        return self.location(path, **extra)

    def key_text(self, path: tuple) -> str | None:
        entry = self.keys.get(tuple(path))
        return entry[2] if entry else None


# Limits that turn hostile or broken input into one located error instead of a hang or a crash.
# Real pipelines are far inside them (a few KB, nesting under 10, a few thousand values).
MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64  # nested mappings/sequences
MAX_VALUES = 200_000  # values in the document with every alias expanded (alias bombs)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def decode(data: bytes, filename: str) -> str:
    """Pipeline file bytes -> text: UTF-8 (a BOM is dropped), at most ``MAX_BYTES``."""
    if len(data) > MAX_BYTES:
        line = data[:MAX_BYTES].count(b"\n") + 1
        raise UserError(f"the file is {_size(len(data))}; a pipeline file is at most {_size(MAX_BYTES)} "
                        "(keep data in files the stages read)", Location(filename, line, 1))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start
        line = data[:start].count(b"\n") + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise UserError(f"byte 0x{data[start]:02x} is not UTF-8: save the file as UTF-8",
                        Location(filename, line, column)) from None


def load_yaml(text: str, filename: str) -> tuple[object, Marks]:
    import yaml

    if len(text) > MAX_BYTES:
        raise UserError(f"the document is longer than {_size(MAX_BYTES)}", Location(filename, 1, 1))
    loader_cls = _loader_class()
    try:
        _check_shape(loader_cls, text, filename)
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None, Marks(filename, {})
            marks = Marks(filename, {})
            _walk(loader, node, (), marks, filename)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(file=filename, line=mark.line + 1 if mark else None, column=mark.column + 1 if mark else None)
        problem = " ".join(str(exc.problem or exc.context).split())
        raise UserError(f"invalid YAML: {problem}", loc) from None
    except yaml.YAMLError as exc:
        # a reader error (a control character, say) carries a character position, not a mark
        position = getattr(exc, "position", None)
        loc = Location(file=filename)
        if isinstance(position, int) and 0 <= position <= len(text):
            loc = Location(filename, text.count("\n", 0, position) + 1, position - (text.rfind("\n", 0, position) + 1) + 1)
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        raise UserError(f"invalid YAML: {reason}", loc) from None
    return data, marks


_LOADER = None


def _loader_class():
    """The safe loader (libyaml's where present), its constructors' own crashes on malformed tagged
    values (``!!timestamp ''``, ``!!binary`` junk) turned into errors at the value's mark."""
    global _LOADER
    if _LOADER is None:
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class Loader(base):
            def construct_object(self, node, deep=False):
                try:
                    return super().construct_object(node, deep=deep)
                except yaml.YAMLError:
                    raise
                except (ValueError, TypeError, AttributeError, KeyError, OverflowError, IndexError) as exc:
                    kind = node.tag.rpartition(":")[2] or node.tag
                    raise yaml.constructor.ConstructorError(
                        None, None, f"cannot read this {kind} value ({exc})", node.start_mark) from None

        _LOADER = Loader
    return _LOADER


def _check_shape(loader_cls, text: str, filename: str) -> None:
    """One pass over the parse events (no objects built) that refuses, at the offending mark, what
    would make composing or walking the document blow up: nesting deeper than ``MAX_DEPTH``, an alias
    inside the collection it names (a recursive structure) and more than ``MAX_VALUES`` values once
    aliases are expanded."""
    loader = loader_cls(text)

    def where(event) -> Location:
        return Location(filename, event.start_mark.line + 1, event.start_mark.column + 1)

    try:
        count = 0  # values so far, aliases expanded
        stack: list[tuple[str | None, int]] = []  # open collections: (anchor, count at start)
        open_anchors: set[str] = set()
        sizes: dict[str, int] = {}  # anchor -> values in what it names, aliases expanded
        while loader.check_event():
            event = loader.get_event()
            name = type(event).__name__
            if name in ("MappingStartEvent", "SequenceStartEvent"):
                count += 1
                stack.append((event.anchor, count))
                if len(stack) > MAX_DEPTH:
                    raise UserError(f"nesting deeper than {MAX_DEPTH} levels", where(event))
                if event.anchor:
                    open_anchors.add(event.anchor)
            elif name in ("MappingEndEvent", "SequenceEndEvent"):
                anchor, start = stack.pop()
                if anchor:
                    sizes[anchor] = count - start + 1
                    open_anchors.discard(anchor)
            elif name == "ScalarEvent":
                count += 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif name == "AliasEvent":
                if event.anchor in open_anchors:
                    raise UserError(f"alias *{event.anchor} is inside the value &{event.anchor} names: "
                                    "a recursive structure cannot be a pipeline", where(event))
                count += sizes.get(event.anchor, 1)  # an undefined alias: the composer says so, located
            if count > MAX_VALUES:
                raise UserError(f"the document expands to more than {MAX_VALUES} values once its aliases are "
                                "expanded (an alias bomb?)", where(event))
    finally:
        loader.dispose()


def _walk(loader, node, path: tuple, marks: Marks, filename: str) -> None:
    import yaml

    marks.table[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        own = [pair for pair in node.value if pair[0].tag != "tag:yaml.org,2002:merge"]
        for key_node, _ in own:  # duplicates among the keys written here (a merge key's may be overridden)
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise UserError(
                    f"mapping keys must be plain scalars, not {type(key).__name__}",
                    Location(filename, key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                )
            if key in seen:
                raise UserError(
                    f"duplicate key '{key}' (first at line {seen[key]})",
                    Location(filename, key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                )
            seen[key] = key_node.start_mark.line + 1
        if len(own) != len(node.value):
            # YAML merge keys (`<<: *base`): the safe loader's own flattening, so the data and the
            # marks agree; merged pairs come first, so a key written here overrides a merged one
            loader.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise UserError(
                    f"mapping keys must be plain scalars, not {type(key).__name__}",
                    Location(filename, key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                )
            marks.keys[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1,
                                         str(key_node.value))
            _walk(loader, value_node, path + (key,), marks, filename)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(loader, item, path + (index,), marks, filename)
    elif node.tag == "tag:yaml.org,2002:bool":
        marks.bools[path] = str(node.value)
