"""export mlflow without the extra installed: one clear line saying how to get it."""

from __future__ import annotations

import pytest


def test_without_mlflow_the_error_says_how_to_install(monkeypatch):
    import sys

    from ascendpipe.errors import UserError
    from ascendpipe.explorer.mlflow_export import _client

    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    with pytest.raises(UserError, match=r"pip install 'ascendpipe\[mlflow\]'"):
        _client("file:///nowhere")
