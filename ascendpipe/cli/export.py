"""ascendpipe export"""

from __future__ import annotations

from ascendpipe.cli.common import print_json

HELP = "export recorded runs to another tracker (mlflow)"
DESCRIPTION = (
    "Export runs as MLflow runs: params and metrics per stage, remedy files and reports as artifacts, "
    "stage keys as tags. Idempotent: a run already exported from this workspace is skipped. "
    "Needs MLflow's tracking client: pip install mlflow-skinny."
)


def add_arguments(p) -> None:
    p.add_argument("target", choices=["mlflow"], help="where to export (mlflow)")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run ids, 'latest' or 'latest~N'; default: every run")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (file:///path, sqlite:///mlflow.db, http://host:5000); "
                                          "default: $MLFLOW_TRACKING_URI, else MLflow's default")
    p.add_argument("--experiment", help="MLflow experiment name (default: ascendpipe/WORKSPACE/PIPELINE)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-C", "--workspace", default=None)


def main(args) -> int:
    from ascendpipe.api import export_mlflow
    from ascendpipe.explorer.mlflow_export import require_mlflow

    # the user's own arguments are checked first (a store over the records is wrong with or without
    # mlflow installed); then the extra, before the workspace's records are read
    _refuse_store_over_records(args.tracking_uri, args.workspace)
    require_mlflow()
    result = export_mlflow(args.runs, tracking_uri=args.tracking_uri, experiment=args.experiment, workspace=args.workspace)
    if args.json:
        print_json(result)
        return 0
    for note in result["notes"]:
        print(f"note: {note}")
    experiments = ", ".join(result["experiments"]) or "-"
    print(f"mlflow {result['tracking_uri'] or '(default)'} experiment(s) {experiments}: {len(result['created'])} run(s) exported, "
          f"{len(result['skipped'])} already there" + (f", {len(result['redone'])} redone (an earlier export was cut short)" if result["redone"] else ""))
    return 0


def _refuse_store_over_records(uri: str | None, workspace: str | None) -> None:
    """A local MLflow store (``file:``, ``sqlite:``) never lands in the records or the cache it reads."""
    import os
    from urllib.parse import unquote, urlparse

    if not uri:
        return
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]  # sqlite:///rel.db, sqlite:////abs.db
    elif uri.startswith("file:"):
        path = unquote(urlparse(uri).path)
    else:
        return
    from ascendpipe.api import _workspace_root
    from ascendpipe.cli import guard
    from ascendpipe.engine.workspace import Workspace

    from ascendpipe.errors import UserError

    try:
        root = _workspace_root(workspace)
    except UserError:
        return  # no workspace, no records to protect: the export itself says so, after the extra's check
    state = {"the records folder": os.path.relpath(os.path.join(root, ".ascendpipe")),
             "the cache folder": os.path.relpath(Workspace(root).cache_root)}
    guard.refuse_output_over_inputs(path, state, flag="--tracking-uri", shown=uri,
                                    instead="keep the MLflow store elsewhere")
