"""docs/kinds.md is generated from the kinds' schemas: out of date is a failure, and every example in
it is a stage the pipeline schema accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendpipe.config import kinds_doc
from ascendpipe.stages.registry import get_kind, kind_names

REPO = Path(__file__).resolve().parents[1]


def test_docs_kinds_md_is_current():
    written = (REPO / "docs" / "kinds.md").read_text(encoding="utf-8")
    assert written == kinds_doc.render(), "docs/kinds.md is out of date: python -m ascendpipe.config.kinds_doc > docs/kinds.md"


def test_every_kind_every_param_and_its_default_is_listed():
    text = kinds_doc.render()
    for name in kind_names():
        kind = get_kind(name)
        section = text.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        for field in kind.input_fields:
            assert f"- `{field}`" in section
        for param, schema in (kind.params_schema.get("properties") or {}).items():
            row = next(line for line in section.splitlines() if line.startswith(f"| `{param}` |"))
            if "default" in schema:
                assert f"`{__import__('json').dumps(schema['default'])}`" in row
        assert "```yaml" in section


@pytest.mark.parametrize("name", sorted(kinds_doc.EXAMPLES))
def test_each_example_passes_the_pipeline_schema(name):
    import jsonschema
    import yaml

    from ascendpipe.config.schema import pipeline_schema

    stages = yaml.safe_load(kinds_doc.EXAMPLES[name])
    (stage,) = stages.values()
    assert stage["kind"] == name
    jsonschema.validate({"params": {"seed": 0}, "stages": stages}, pipeline_schema())


def test_pipelines_md_links_the_reference():
    assert "(kinds.md)" in (REPO / "docs" / "pipelines.md").read_text(encoding="utf-8")
