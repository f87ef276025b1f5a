"""export mlflow without the extra installed: one clear line saying how to get it."""

from __future__ import annotations

import pytest


def test_without_mlflow_the_error_says_how_to_install(monkeypatch):
    import sys

    from ascendpipe.errors import UserError
    from ascendpipe.explorer.mlflow_export import _client

    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    with pytest.raises(UserError, match=r"pip install mlflow-skinny"):
        _client("file:///nowhere")


def test_cli_without_mlflow_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    """`mlflow.entities` was imported before the check: a traceback and exit 3 (issue 23 item 1)."""
    import sys

    from ascendpipe.cli.main import main

    for name in ("mlflow", "mlflow.entities", "mlflow.tracking"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.chdir(tmp_path)
    code = main(["export", "mlflow", "--tracking-uri", f"file://{tmp_path}/mlruns"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == ["ascendpipe: error: exporting to MLflow needs the mlflow package: pip install mlflow-skinny (or a full mlflow)"]
    assert not (tmp_path / ".ascendpipe").exists()  # nothing written where the user stood
