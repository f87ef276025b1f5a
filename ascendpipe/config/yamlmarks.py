"""Safe YAML loading that remembers where every value came from.

Errors about a pipeline must name ``file:line:column``. PyYAML's composed nodes carry start marks;
we construct plain Python data with the safe constructor and keep a side table from the path of
each value (a tuple of keys and indices) to its mark.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendpipe.errors import Location, UserError

Path_ = tuple  # ('stages', 'convert', 'params', 'precision_mode')


@dataclass
class Marks:
    file: str
    table: dict[tuple, tuple[int, int]]  # path -> (line, column), 1-based

    def location(self, path: tuple, **extra) -> Location:
        """The nearest known mark at or above ``path``."""
        probe = tuple(path)
        while probe and probe not in self.table:
            probe = probe[:-1]
        line, col = self.table.get(probe, (None, None))
        return Location(file=self.file, line=line, column=col, **extra)


def load_yaml(text: str, filename: str) -> tuple[object, Marks]:
    import yaml

    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Marks(filename, {})
        table: dict[tuple, tuple[int, int]] = {}
        _walk(loader, node, (), table, filename)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(file=filename, line=mark.line + 1 if mark else None, column=mark.column + 1 if mark else None)
        raise UserError(f"invalid YAML: {exc.problem or exc.context}", loc) from None
    except yaml.YAMLError as exc:
        raise UserError(f"invalid YAML: {exc}", Location(file=filename)) from None
    finally:
        loader.dispose()
    return data, Marks(filename, table)


def _walk(loader, node, path: tuple, table: dict, filename: str) -> None:
    import yaml

    table[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, (list, dict)):
                raise UserError(
                    "mapping keys must be plain scalars",
                    Location(filename, key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                )
            if key in seen:
                raise UserError(
                    f"duplicate key '{key}' (first at line {seen[key]})",
                    Location(filename, key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                )
            seen[key] = key_node.start_mark.line + 1
            _walk(loader, value_node, path + (key,), table, filename)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(loader, item, path + (index,), table, filename)
