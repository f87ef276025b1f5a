"""msaccucmp's cells computed block by block are the same text as over the whole tensors."""

import numpy as np
import pytest

from ascendpipe.compare import msaccucmp


def whole(golden, target):
    saved = msaccucmp._use_blocks
    msaccucmp._use_blocks = lambda *a: False
    try:
        return msaccucmp.cells(golden, target, target_file="t.npy", golden_file="g.npy")
    finally:
        msaccucmp._use_blocks = saved


def cases():
    rng = np.random.default_rng(11)
    for n in (1_001, 4_099, 20_000, 65_537):
        g = (rng.standard_normal(n) * 3).astype(np.float32)
        yield f"fp16 target {n}", g, (g + rng.standard_normal(n).astype(np.float32) * 0.01).astype(np.float16)
        yield f"fp32 target {n}", g, g * np.float32(1.001) + np.float32(1e-3)
    g = (rng.standard_normal(30_000) * 100).astype(np.float32)
    g[::7] = 0  # relative error masked where the golden is ~0
    yield "golden zeros", g, g + np.float32(0.5)
    t = g.astype(np.float16)
    t[123] = np.inf
    yield "target inf", g, t
    t = g.copy()
    t[5000] = np.nan
    yield "target nan", g, t
    yield "constant tensors", np.full(9_000, 2.5, np.float32), np.full(9_000, 2.5, np.float16)
    yield "all zero target", g, np.zeros(30_000, np.float16)
    yield "both zero", np.zeros(9_000, np.float32), np.zeros(9_000, np.float32)
    yield "tiny norms", np.full(9_000, 1e-30, np.float32), np.full(9_000, 2e-30, np.float32)
    big = (rng.standard_normal(9_000) * 3e19).astype(np.float32)  # squares overflow float32
    yield "float32 overflow", big, big * np.float32(1.01)
    yield "fp16 golden", g.astype(np.float16), (g * 1.01).astype(np.float16)


@pytest.mark.parametrize("name, golden, target", list(cases()), ids=[c[0] for c in cases()])
def test_blocked_cells_equal_whole_tensor_cells(monkeypatch, name, golden, target):
    monkeypatch.setattr(msaccucmp, "BLOCK", 1000)
    assert msaccucmp._use_blocks(target, golden, target.shape)
    assert msaccucmp.cells(golden, target, target_file="t.npy", golden_file="g.npy") == whole(golden, target)


def test_blocked_cells_at_the_default_block_size():
    rng = np.random.default_rng(5)
    g = rng.standard_normal(300_001).astype(np.float32)
    t = (g + rng.standard_normal(g.size).astype(np.float32) * 0.02).astype(np.float16)
    assert msaccucmp._use_blocks(t, g, t.shape)
    cells, messages = msaccucmp.cells(g, t)
    assert (cells, messages) == whole(g, t)
    assert float(cells["CosineSimilarity"]) > 0.999 and messages == []
