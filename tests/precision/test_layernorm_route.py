"""The static LayerNorm kernel's hand-over to the dynamic template on 910/310P (precision/layernorm_route.py),
worked out by hand from layer_norm_unify.py for a few shapes."""

from ascendpipe.precision.layernorm_route import core_count, takes_template


def test_early_exits():
    assert takes_template([4, 32], 0, "high_performance")  # every axis reduced (L108-110)
    assert takes_template([1, 64, 100], 2, "high_performance")  # 100 is no multiple of 16 (L115-119)
    assert takes_template([2, 197, 768], 2, "high_performance")  # ViT's 197 tokens: penultimate dim misaligned


def test_tiling_single_core_cases():
    # [1, 16, 64]: 16 rows, aligned by 16 -> one block for the cores: one core, the template
    assert takes_template([1, 16, 64], 2, "high_performance", cores=8)
    # [1, 128, 768]: 8 blocks of 16 rows over 8 cores: the static kernel
    assert not takes_template([1, 128, 768], 2, "high_performance", cores=8)
    assert not takes_template([8, 512, 768], 2, "high_performance", cores=32)


def test_core_counts():
    assert core_count("Ascend310P3", "310P") == 8 and core_count("Ascend910ProB", "training") == 30
    assert core_count("Ascend910A", "training") == 32
