"""Matrix expansion: a stage's own variants, and how variants fan out to the stages that use them.

A stage's ``matrix`` is either ``NAME: {params overlay}`` for every entry (named variants) or
``PARAM: [values]`` for every entry (their product, named ``v1-v2``). A variant's *origin* maps each
matrix stage it descends from to the key chosen there: infer@fp16 has origin {convert: fp16}. A
stage naming several fanned-out stages gets one variant per consistent combination, so
eval(query=infer_q, gallery=infer_g) pairs infer_q@fp16 with infer_g@fp16 instead of forming their
product. Pure: the caller hands in the raw stages and each kind's input fields.
"""

from __future__ import annotations

import itertools

from ascendpipe.config import schema as schema_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from ascendpipe.config.yamlmarks import Marks

# (variant key or None, params overlay, YAML path of the overlay)
OwnVariant = tuple
# (variant name or None, params overlay, YAML path of the overlay, origin)
Variant = tuple


def own_variants(base: str, raw: dict, marks: Marks) -> list[OwnVariant]:
    """A stage's own variants from its ``matrix`` ([(None, {}, ())] without one). Variant names are
    checked against ``paths.VARIANT_NAME`` (they become folder names) and must not collide as strings."""
    from ascendpipe.config.paths import variant_name_problem
    from ascendpipe.errors import UserError

    matrix = raw.get("matrix")
    if not matrix:
        return [(None, {}, ())]
    where = ("stages", base, "matrix")
    values = list(matrix.values())
    if all(isinstance(v, dict) for v in values):
        seen: dict[str, object] = {}
        for name in matrix:
            text = str(name)
            problem = variant_name_problem(text)
            if problem:
                raise UserError(problem, marks.key_location(where + (name,), stage=base))
            if text in seen:
                raise UserError(f"variant names {seen[text]!r} and {name!r} are the same name '{text}'",
                                marks.key_location(where + (name,), stage=base))
            seen[text] = name
        return [(str(name), dict(overlay), where + (name,)) for name, overlay in matrix.items()]
    if all(isinstance(v, list) and v for v in values):
        for key, items in matrix.items():
            seen = {}
            for index, item in enumerate(items):
                here = marks.location(where + (key, index), stage=base)
                if isinstance(item, (dict, list)) or item is None:
                    raise UserError(f"matrix value of '{key}' must be a number or a short string (it names a "
                                    f"variant), got {type(item).__name__ if item is not None else 'null'}", here)
                text = str(item)
                problem = variant_name_problem(text)
                if problem:
                    raise UserError(f"{problem}; for another value, use named variants: matrix: {{NAME: {{{key}: ...}}}}",
                                    here)
                if text in seen:
                    raise UserError(f"matrix values {seen[text]!r} and {item!r} of '{key}' give the same variant "
                                    f"name '{text}'", here)
                seen[text] = item
        keys = list(matrix)
        variants = [("-".join(str(v) for v in combo), dict(zip(keys, combo)), where)
                    for combo in itertools.product(*values)]
        _unique([v[0] for v in variants], marks.location(where, stage=base))
        return variants
    raise schema_mod.located_error(
        marks, where, "a matrix is either NAME: {params overlay} for every entry, or PARAM: [values] for every entry",
        stage=base)


def _unique(names, location) -> None:
    from ascendpipe.errors import UserError

    seen = set()
    for name in names:
        if name in seen:
            raise UserError(f"two variants are both named '{name}' (names are joined with '-'); rename one", location)
        seen.add(name)


class Expansion:
    """Every stage's variants, its own matrix combined with those of the stages it reads."""

    def __init__(self, raw_stages: dict[str, dict], marks: Marks, input_fields: Callable[[str], tuple]):
        self.raw_stages = raw_stages
        self.marks = marks
        self.input_fields = input_fields  # stage base name -> its kind's input fields
        self.order = list(raw_stages)
        self.own = {base: own_variants(base, raw, marks) for base, raw in raw_stages.items()}
        self._cache: dict[str, list[Variant]] = {}

    def variants(self, base: str) -> list[Variant]:
        """(variant name, params overlay, YAML path of the overlay, origin) for each variant of ``base``."""
        if base in self._cache:
            return self._cache[base]
        self._cache[base] = [(None, {}, (), {})]  # guards against reference cycles; check_graph reports them
        combos: list[dict] = [{}]
        for ref in self._referenced(base):
            grown = []
            for combo in combos:
                for _, _, _, origin in self.variants(ref):
                    if all(combo.get(k, v) == v for k, v in origin.items()):
                        merged = {**combo, **origin}
                        if merged not in grown:
                            grown.append(merged)
            combos = grown
        result = []
        for combo in combos:
            for key, overlay, where in self.own[base]:
                origin = {**combo, base: key} if key is not None else dict(combo)
                result.append((self.variant_name(origin), overlay, where, origin))
        _unique([v[0] for v in result], self.marks.location(("stages", base), stage=base))
        self._cache[base] = result
        return result

    def variant_name(self, origin: dict) -> str | None:
        keys = [origin[b] for b in sorted(origin, key=self.order.index)]
        return "-".join(keys) or None

    def has_variants(self, base: str) -> bool:
        return any(v[0] is not None for v in self.variants(base))

    def _referenced(self, base: str) -> list[str]:
        raw, names = self.raw_stages[base], []
        for fieldname in self.input_fields(base):
            value = raw.get(fieldname)
            if isinstance(value, str) and value in self.raw_stages and self.has_variants(value) and value not in names:
                names.append(value)
        return names
