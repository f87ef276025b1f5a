"""``ascendpipe export mlflow``: each recorded run as one MLflow run.

Params are ``STAGE.PARAM`` and metrics ``STAGE.METRIC`` (``@`` in a stage name, which MLflow keys
do not allow, becomes ``/``: ``convert/fp16.precision_mode``); tags carry the workspace id, the run
id, and each stage's key, state and tool versions; remedy files, the run record and each stage's
reports (HTML pages, compare results, metrics) are artifacts. Exporting is idempotent: each MLflow run
is tagged with the ascendpipe run id and workspace id, looked up first, and skipped when complete (an
export that was interrupted half-way is deleted and redone).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from datetime import datetime

from ascendpipe.errors import UserError

TAG_WORKSPACE = "ascendpipe.workspace_id"
TAG_RUN = "ascendpipe.run_id"
TAG_EXPORT = "ascendpipe.export"  # "complete" once everything is logged
REPORT_NAMES = ("result.json", "result.csv", "metrics.json", "convert.json", "precision_plan.json", "op_summary.csv", "op_statistic.csv")
MAX_PARAM_VALUE = 6000  # MLflow's limit on a param value
_KEY_BAD = re.compile(r"[^\w./\- :]")


def mlflow_key(stage: str, name: str) -> str:
    return _KEY_BAD.sub("_", f"{stage.replace('@', '/')}.{name}")[:250]


def param_value(v) -> str:
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 20] + "...(truncated)"


def run_content(run: dict) -> dict:
    """Pure: what one ascendpipe run becomes in MLflow: params, metrics, tags."""
    from ascendpipe.explorer.shape import flat, is_number

    params, metrics, tags = {}, {}, {}
    for name, st in run["stages"].items():
        for k, v in flat(st.get("params")).items():
            params[mlflow_key(name, k)] = param_value(v)
        if st.get("state") in ("ran", "restored", "fresh"):
            for k, v in flat(st.get("metrics")).items():
                if is_number(v):
                    metrics[mlflow_key(name, k)] = float(v)
        tags[f"ascendpipe.state.{mlflow_key(name, '')[:-1]}"] = st.get("state") or ""
        if st.get("key"):
            tags[f"ascendpipe.key.{mlflow_key(name, '')[:-1]}"] = st["key"]
        if st.get("tools"):
            tags[f"ascendpipe.tools.{mlflow_key(name, '')[:-1]}"] = json.dumps(st["tools"], sort_keys=True)
        ff = (st.get("info") or {}).get("first_failure")
        if isinstance(ff, dict) and ff.get("op_name"):
            tags[f"ascendpipe.first_failure.{mlflow_key(name, '')[:-1]}"] = ff["op_name"]
    tags.update({
        TAG_RUN: str(run["id"]), "ascendpipe.pipeline": run.get("pipeline") or "", "ascendpipe.backend": run.get("backend") or "",
        "ascendpipe.state": run.get("state") or "", "ascendpipe.argv": " ".join(run.get("argv") or [])[:5000],
        "ascendpipe.version": run.get("version") or "", "mlflow.runName": f"run {run['id']}",
    })
    return {"params": params, "metrics": metrics, "tags": tags}


def _ms(text: str | None) -> int | None:
    try:
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp() * 1000) if text else None
    except ValueError:
        return None


# ascendpipe is installed from its clone, not an index, so the hint names the package itself (the
# `mlflow` extra of pyproject.toml is the same requirement: `pip install -e '.[mlflow]'` in the clone)
MISSING = "exporting to MLflow needs the mlflow package: pip install mlflow-skinny (or a full mlflow)"


def require_mlflow() -> None:
    """A located one-line error when the mlflow extra is absent, before anything else is touched."""
    try:
        import mlflow.entities  # noqa: F401  (the first mlflow module export() needs)
        import mlflow.tracking  # noqa: F401
    except ImportError:
        raise UserError(MISSING) from None


def _client(tracking_uri: str | None):
    require_mlflow()
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri and (uri.startswith("file:") or "://" not in uri):
        # a file store is what the user asked for; MLflow 3 refuses it unless opted in
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        return MlflowClient(tracking_uri=uri), uri
    except Exception as exc:  # MLflow raises its own types for bad URIs and missing backends
        raise _store_error(uri, exc) from None


def _store_error(uri: str | None, exc: Exception) -> UserError:
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return UserError(f"cannot use the MLflow tracking store {uri or '(MLflow default)'}: {first}",
                     hint="give --tracking-uri file:///PATH/mlruns or http://HOST:5000, or set MLFLOW_TRACKING_URI")


def _experiment(client, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    return client.create_experiment(name)


def _existing(client, experiment_id: str, workspace_id: str) -> dict[str, list]:
    """ascendpipe run id -> MLflow runs already tagged with it (this workspace only)."""
    found: dict[str, list] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=f"tags.`{TAG_WORKSPACE}` = '{workspace_id}'",
                                  max_results=1000, page_token=token)
        for r in page:
            found.setdefault(r.data.tags.get(TAG_RUN), []).append(r)
        token = getattr(page, "token", None)
        if not token:
            return found


def _artifacts(run: dict, objects, folder: str) -> list[str]:
    """Write the run's remedy files, record and reports under ``folder``; notes on what is gone."""
    from ascendpipe.explorer.collect import output_files, read_output_file

    notes = []
    with open(os.path.join(folder, "ascendpipe_run.json"), "w", encoding="utf-8") as f:
        json.dump(run, f, indent=2, default=str)
    for name, st in run["stages"].items():
        safe = name.replace("@", "_at_").replace("/", "_")
        for rf in st.get("remedy_files") or []:
            if rf.get("content") is None:
                continue
            path = os.path.join(folder, "remedy", safe, os.path.basename(rf["name"]))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(rf["content"])
        if st.get("state") not in ("ran", "restored", "fresh"):
            continue
        for out, digest in (st.get("outputs") or {}).items():
            files = output_files(objects, digest)
            if files is None:
                if not objects.has(digest) and digest.endswith(".dir"):
                    notes.append(f"{name}: {out}")
                continue
            for rel in files:
                if "/" in rel or not (rel.endswith(".html") or rel in REPORT_NAMES):
                    continue
                data = read_output_file(objects, digest, rel)
                if data is None:
                    notes.append(f"{name}: {out}/{rel}")
                    continue
                path = os.path.join(folder, "reports", safe, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
    return notes


def export(db, objects, workspace: str, runs: list[dict], *, tracking_uri: str | None = None, experiment: str | None = None) -> dict:
    client, uri = _client(tracking_uri)  # says how to install mlflow before any mlflow import
    from mlflow.entities import Metric, Param, RunTag

    workspace_id = db.workspace_id()
    by_experiment: dict[str, str] = {}
    existing_by_exp: dict[str, dict] = {}
    from ascendpipe.explorer.shape import fill_from_same_key

    fill_from_same_key(runs)
    created, skipped, redone, notes = [], [], [], []
    for run in sorted(runs, key=lambda r: r["id"]):
        if run.get("state") == "running":
            notes.append(f"run {run['id']} is still running (or was killed): not exported")
            continue
        name = experiment or f"ascendpipe/{os.path.basename(workspace.rstrip('/'))}/{os.path.splitext(os.path.basename(run['pipeline']))[0]}"
        if name not in by_experiment:
            try:  # the first calls that reach the store: an unreachable server or bad store fails here
                by_experiment[name] = _experiment(client, name)
                existing_by_exp[name] = _existing(client, by_experiment[name], workspace_id)
            except Exception as exc:
                raise _store_error(uri, exc) from None
        exp_id = by_experiment[name]
        previous = existing_by_exp[name].get(str(run["id"]), [])
        complete = [r for r in previous if r.data.tags.get(TAG_EXPORT) == "complete"]
        if complete:
            skipped.append(run["id"])
            continue
        for r in previous:  # a half-done export: redo it whole
            client.delete_run(r.info.run_id)
        content = run_content(run)
        tags = {**content["tags"], TAG_WORKSPACE: workspace_id, "ascendpipe.workspace": workspace}
        mrun = client.create_run(exp_id, start_time=_ms(run.get("started")), tags=tags, run_name=f"run {run['id']}")
        rid = mrun.info.run_id
        ts = _ms(run.get("finished")) or _ms(run.get("started")) or 0
        params = [Param(k, v) for k, v in sorted(content["params"].items())]
        metrics = [Metric(k, v, ts, 0) for k, v in sorted(content["metrics"].items()) if math.isfinite(v)]
        for i in range(0, len(params), 100):  # MLflow's batch limits: 100 params, 1000 metrics
            client.log_batch(rid, params=params[i:i + 100])
        for i in range(0, len(metrics), 1000):
            client.log_batch(rid, metrics=metrics[i:i + 1000])
        with tempfile.TemporaryDirectory(prefix="ascendpipe-mlflow-") as folder:
            gone = _artifacts(run, objects, folder)
            client.log_artifacts(rid, folder)
        if gone:
            client.set_tag(rid, "ascendpipe.missing_reports", "; ".join(gone)[:5000])
            notes.append(f"run {run['id']}: reports no longer in the cache (garbage-collected): {', '.join(gone[:3])}")
        client.set_terminated(rid, "FAILED" if run.get("state") == "failed" else "FINISHED", end_time=_ms(run.get("finished")))
        client.set_tag(rid, TAG_EXPORT, "complete")
        (redone if previous else created).append(run["id"])
    return {"tracking_uri": uri, "experiments": by_experiment, "workspace_id": workspace_id,
            "created": created, "redone": redone, "skipped": skipped, "notes": notes}
