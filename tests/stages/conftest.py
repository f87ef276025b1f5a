import io
from pathlib import Path

import pytest

from ascendpipe.stages.base import StageContext, Upstream


@pytest.fixture
def make_ctx(tmp_path):
    def make(kind, params, inputs, upstream=None, name=None):
        out = tmp_path / f"out_{kind}_{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        return StageContext(name=name or kind, kind=kind, workspace=tmp_path, out_dir=out, final_out_dir=out,
                            params=params, inputs={k: Path(v) for k, v in inputs.items()},
                            upstream=upstream or {}, backend="onnxruntime", log=io.StringIO())
    return make
