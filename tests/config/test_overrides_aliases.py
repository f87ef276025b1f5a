"""--set on a stage whose params are a YAML alias changes that stage only."""

from ascendpipe.config.pipeline import load_pipeline

PIPELINE = """\
stages:
  a: {kind: run, cmd: "echo {{ params.n }} > data/a", outs: [data/a], params: &common {n: 1}}
  b: {kind: run, cmd: "echo {{ params.n }} > data/b", outs: [data/b], params: *common}
"""


def test_set_on_an_aliased_params_block_changes_one_stage(tmp_path):
    (tmp_path / "p.yaml").write_text(PIPELINE)
    plain = load_pipeline(tmp_path / "p.yaml")
    assert plain.stages["a"].params["n"] == 1 and plain.stages["b"].params["n"] == 1
    changed = load_pipeline(tmp_path / "p.yaml", overrides=["stages.a.params.n=5"])
    assert changed.stages["a"].params["n"] == 5
    assert changed.stages["b"].params["n"] == 1
    assert changed.stages["b"].cmd == "echo 1 > data/b"
