"""Ready-to-paste lines that apply a remedy to the convert stage: ``--set`` and YAML.

A plain stage gets ``stages.convert.params.PARAM``; a matrix variant (``convert@fp16``) gets
``stages.convert.matrix.fp16.PARAM``, because the variant's overlay is where its settings live
(the ``--set`` grammar is a dotted path into the pipeline document, the value parsed as YAML; see
``ascendpipe/config/overrides.py``). The ``--set`` line works for a list-form matrix's variant too
(``precision_mode: [force_fp16, ...]`` -> ``matrix.force_fp16``): build turns that matrix into the
named form first. The YAML lines are the named-overlay form (``fp16: {...}``). The ``--set`` argument is
shell-quoted: ``[...]`` is a glob and a space would split it. Pure: yaml is imported only to quote values that need it.
"""

from __future__ import annotations

import json
import shlex


def split_stage(stage: str) -> tuple[str, str | None]:
    """'convert@fp16' -> ('convert', 'fp16'); 'convert' -> ('convert', None)."""
    base, _, variant = stage.partition("@")
    return base, variant or None


def param_path(stage: str, *keys: str) -> list[str]:
    """The document path of a convert param for this stage (plain or matrix variant)."""
    base, variant = split_stage(stage)
    where = ["stages", base, "matrix", variant] if variant else ["stages", base, "params"]
    return where + list(keys)


def _scalar(value) -> str:
    """A YAML flow scalar that parses back to ``value`` (quoted when a plain one would not)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return json.dumps(value)
    import yaml

    text = str(value)
    try:
        plain_ok = text.strip() == text and " " not in text and "," not in text and yaml.safe_load(f"[{text}]") == [text]
    except yaml.YAMLError:
        plain_ok = False
    return text if plain_ok else json.dumps(text)


def flow(value) -> str:
    """``value`` as a compact YAML flow value: ``[/ReduceSum,/Sqrt]``, ``{mean_chn_0: 78}``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(flow(v) for v in value) + "]"
    return _scalar(value)


def set_line(stage: str, keys: list[str] | tuple[str, ...], value) -> str:
    """One ``--set`` option, shell-quoted, e.g. ``--set 'stages.convert.matrix.fp16.keep_dtype=[a,b]'``."""
    return "--set " + shlex.quote(".".join(param_path(stage, *keys)) + "=" + flow(value))


def yaml_lines(stage: str, params: dict) -> str:
    """The pipeline-file lines that set ``params`` for this stage (block style, nested)."""
    import yaml

    class _Indented(yaml.SafeDumper):  # lists indented under their key, as people write them
        def increase_indent(self, flow=False, indentless=False):
            return super().increase_indent(flow, False)

    doc: dict = params
    for key in reversed(param_path(stage)):
        doc = {key: doc}
    return yaml.dump(doc, Dumper=_Indented, sort_keys=False, default_flow_style=False, width=120)
