"""Per-stage `resources:` and the remote URL choice: pure, no Ray or S3 needed."""

from __future__ import annotations

import json

import pytest

import ascendpipe
from ascendpipe.config.resources import normalize, parse_size
from ascendpipe.errors import UserError
from ascendpipe.store.remote import entry_path, object_path, remote_url, split_url


@pytest.mark.parametrize("text, expected", [
    (1024, 1024), ("4GB", 4 * 10**9), ("4G", 4 * 10**9), ("512MiB", 512 * 2**20), ("1.5 GiB", int(1.5 * 2**30)),
    ("64mb", 64 * 10**6), ("100", 100), ("2TB", 2 * 10**12),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["4 parsecs", "GB", "-1GB", True, -5])
def test_bad_sizes_are_user_errors(bad):
    with pytest.raises(UserError, match="memory"):
        parse_size(bad)


def test_normalize_keeps_counts_and_drops_zeros():
    assert normalize({"NPU": 1, "CPU": 2, "memory": "4GB", "GPU": 0, "fast_disk": 0.5}) == {
        "NPU": 1, "CPU": 2, "memory": 4 * 10**9, "fast_disk": 0.5,
    }


def _ws(tmp_path, resources: str):
    (tmp_path / ".ascendpipe").mkdir()
    (tmp_path / "pipeline.yaml").write_text(
        "stages:\n"
        "  tune:\n"
        "    kind: run\n"
        "    cmd: echo hi > out.txt\n"
        "    outs: [out.txt]\n"
        f"    resources: {resources}\n"
    )
    return str(tmp_path / "pipeline.yaml")


def test_resources_resolve_onto_the_stage(tmp_path):
    pipeline = ascendpipe.load(_ws(tmp_path, "{NPU: 1, CPU: 2, memory: 4GB}"))
    assert pipeline.stages["tune"].resources == {"NPU": 1, "CPU": 2, "memory": 4 * 10**9}


def test_a_bad_memory_size_points_at_its_line(tmp_path):
    with pytest.raises(UserError) as err:
        ascendpipe.load(_ws(tmp_path, "{NPU: 1, memory: lots}"))
    assert "pipeline.yaml:6:" in str(err.value)
    assert "resources.memory: 'lots' is not a size" in str(err.value)


def test_a_negative_count_is_a_schema_error(tmp_path):
    with pytest.raises(UserError, match="pipeline.yaml:6:.*-1 violates minimum 0"):
        ascendpipe.load(_ws(tmp_path, "{NPU: -1}"))


def test_resources_are_not_part_of_the_key(tmp_path):
    path = _ws(tmp_path, "{CPU: 1}")
    run = ascendpipe.build(path, quiet=True)
    assert run["stages"]["tune"]["state"] == "ran"
    text = open(path).read().replace("{CPU: 1}", "{CPU: 4, NPU: 1}")
    open(path, "w").write(text)
    assert ascendpipe.build(path, quiet=True)["stages"]["tune"]["state"] == "fresh"


def test_remote_layout_matches_the_local_cache():
    digest = "ab" + "c" * 62
    assert object_path(digest) == f"objects/ab/{'c' * 62}"
    assert object_path(digest + ".dir") == f"objects/ab/{'c' * 62}.dir"
    assert entry_path(digest) == f"runs/ab/{'c' * 62}.json"
    assert split_url("s3://bucket/some/prefix/") == ("s3", "bucket/some/prefix")
    assert split_url("/srv/cache") == ("file", "/srv/cache")
    with pytest.raises(UserError, match="names no bucket"):
        split_url("s3://")


def test_which_remote_a_command_uses(tmp_path):
    (tmp_path / ".ascendpipe").mkdir()
    assert remote_url(None, "s3://from-pipeline/p", str(tmp_path)) == "s3://from-pipeline/p"
    (tmp_path / ".ascendpipe/config.json").write_text(json.dumps({"remote": "s3://local-override/p"}))
    assert remote_url(None, "s3://from-pipeline/p", str(tmp_path)) == "s3://local-override/p"
    assert remote_url("s3://flag/p", "s3://from-pipeline/p", str(tmp_path)) == "s3://flag/p"
    (tmp_path / ".ascendpipe/config.json").write_text("{not json")
    with pytest.raises(UserError, match="config.json is not JSON"):
        remote_url(None, None, str(tmp_path))
