import pytest


@pytest.fixture
def no_cann(monkeypatch):
    """No CANN install is seen, whatever this machine has: the published lists are used."""
    from ascendpipe import versions

    for var in ("ASCEND_OPP_PATH", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(versions, "OPS_INFO_HOMES", ())
