"""export mlflow: every run, param and metric in a local file store; exporting twice adds nothing."""

from __future__ import annotations

import pytest

import ascendpipe
from ascendpipe.explorer.mlflow_export import TAG_RUN, TAG_WORKSPACE, mlflow_key
from ascendpipe.explorer.shape import flat, is_number

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install mlflow-skinny; .ci/run does)")


def exported(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = []
    for exp in client.search_experiments():
        runs += client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if TAG_RUN in r.data.tags]


def test_export_holds_every_param_and_metric_and_is_idempotent(many_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    first = ascendpipe.api.export_mlflow(tracking_uri=uri, workspace=str(many_runs.root))
    records = {r["id"]: r for r in ascendpipe.runs(str(many_runs.root))}
    assert sorted(first["created"]) == sorted(records) and first["skipped"] == []

    runs = exported(uri)
    assert len(runs) == len(records) == 11
    by_id = {int(r.data.tags[TAG_RUN]): r for r in runs}
    assert {r.data.tags[TAG_WORKSPACE] for r in runs} == {first["workspace_id"]}
    for run_id, record in records.items():
        m = by_id[run_id]
        for stage, st in record["stages"].items():
            for k, v in flat(st["params"]).items():
                got = m.data.params[mlflow_key(stage, k)]
                assert got == (v if isinstance(v, str) else __import__("json").dumps(v, sort_keys=True, separators=(",", ":")))
            for k, v in flat(st["metrics"]).items():
                if is_number(v):
                    assert m.data.metrics[mlflow_key(stage, k)] == pytest.approx(v)
            assert m.data.tags[f"ascendpipe.key.{stage.replace('@', '/')}"] == st["key"]
        assert m.info.status == "FINISHED"
    keep = by_id[many_runs.runs[9]["id"]]  # the keep_dtype run: its remedy files and reports are artifacts
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    remedy = [f.path for f in client.list_artifacts(keep.info.run_id, "remedy/convert_at_fp16")]
    # the fp16 variant's fusion switch (the pass off) and the run's keep_dtype list
    assert sorted(remedy) == ["remedy/convert_at_fp16/fusion_switch", "remedy/convert_at_fp16/keep_dtype"]
    reports = {f.path for f in client.list_artifacts(keep.info.run_id, "reports/compare_at_fp16")}
    assert {"reports/compare_at_fp16/report.html", "reports/compare_at_fp16/result.json"} <= reports

    second = ascendpipe.api.export_mlflow(tracking_uri=uri, workspace=str(many_runs.root))
    assert second["created"] == [] and sorted(second["skipped"]) == sorted(records)
    assert len(exported(uri)) == 11

    # an export cut short (run created, never marked complete) is redone, not duplicated
    client.set_tag(keep.info.run_id, "ascendpipe.export", "partial")
    third = ascendpipe.api.export_mlflow([str(many_runs.runs[9]["id"])], tracking_uri=uri, workspace=str(many_runs.root))
    assert third["redone"] == [many_runs.runs[9]["id"]]
    assert len(exported(uri)) == 11

