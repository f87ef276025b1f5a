import pytest

from ascendpipe.compare import mapping, order, thresholds as thr
from ascendpipe.errors import UserError


def test_defaults_are_msits_and_overrides_apply_in_order():
    assert thr.resolve() == {"cosine": 0.99, "relative_euclidean": 0.05, "kl": 0.005, "rmse": 1.0, "mean_relative_error": 1.0}
    assert thr.resolve({"cosine": 0.9}, {"cosine": 0.95, "kl": 0.1})["cosine"] == 0.95
    with pytest.raises(UserError, match="unknown compare threshold 'cos'"):
        thr.resolve({"cos": 0.9})
    with pytest.raises(UserError, match="must be a number"):
        thr.resolve({"kl": "high"})


def test_violations_and_the_rmse_fp16_floor():
    ok = {"cosine": 0.995, "relative_euclidean": 0.01, "kl": 0.0, "rmse": 0.5, "mean_rel_error": 0.1, "compared": 4}
    assert thr.violations(ok, thr.resolve()) == []
    bad = dict(ok, cosine=0.9, kl=0.01, relative_euclidean=0.03)
    assert thr.violations(bad, thr.resolve()) == ["CosineSimilarity 0.9 < 0.99", "KullbackLeiblerDivergence 0.01 > 0.005"]
    # KL (softmax at temperature 1) decides only with a relative error beyond 1%: the ReID square in the
    # fp32 control measured KL 0.81 at relative Euclidean distance 0.0021
    assert thr.violations(dict(ok, kl=0.81, relative_euclidean=0.0021), thr.resolve()) == []
    big = dict(ok, rmse=4.7, rmse_fp16_floor=4.6, relative_euclidean=0.03)  # fp16 spacing at 30000 is 16
    assert thr.violations(big, thr.resolve()) == []
    assert thr.violations(dict(big, rmse_fp16_floor=1.0), thr.resolve()) == ["RootMeanSquareError 4.7 > 1"]


def test_rmse_on_large_values_needs_a_relative_error_beyond_one_percent():
    # the ReID square (values near 11000) measured on a build: rmse 5.62, fp16 floor 0.316, relative 0.375%
    square = {"cosine": 0.9999931, "relative_euclidean": 0.00375, "kl": 0.0, "rmse": 5.62, "rmse_fp16_floor": 0.316,
              "mean_rel_error": 0.001, "compared": 2048}
    assert thr.violations(square, thr.resolve()) == []
    assert thr.violations(dict(square, relative_euclidean=0.02), thr.resolve()) == ["RootMeanSquareError 5.62 > 1"]


def _e(name, op, op_type, topo):
    return {"name": name, "op_name": op, "op_type": op_type, "topo_index": topo}


GOLDEN = [_e("x", "x", "Input", -1), _e("c", "conv", "Conv", 0), _e("b", "bn", "BatchNormalization", 1),
          _e("r", "relu", "Relu", 2), _e("p", "pool", "GlobalAveragePool", 3)]


def test_fused_op_maps_back_to_its_last_original_and_one_sided_ops_are_kept():
    target = [_e("x", "x", "Input", -1), _e("fused_out", "F", "FusedConv", 0), _e("extra", "cast", "Cast", 1),
              _e("p", "pool", "GlobalAveragePool", 2)]
    pairs = mapping.pair_tensors(GOLDEN, target, op_map={"F": ["conv", "bn", "relu"]})
    by_target = {p.target["name"]: p for p in pairs if p.target}
    assert by_target["fused_out"].golden["name"] == "r" and by_target["fused_out"].fused
    assert by_target["fused_out"].golden_ops == ["conv", "bn", "relu"]
    assert by_target["p"].golden["name"] == "p" and not by_target["p"].fused
    assert by_target["extra"].side == "target_only"
    golden_only = {p.golden["name"]: p.note for p in pairs if p.side == "golden_only"}
    assert golden_only == {"c": "fused into target op 'F'", "b": "fused into target op 'F'"}
    ordered = [p.target["name"] if p.target else p.golden["name"] for p in order.order_pairs(pairs)]
    assert ordered == ["c", "b", "fused_out", "extra", "p"]  # target-only after the paired op before it


def test_tensor_map_renames_through_fused_map():
    target = [_e("r_new", "F", "FusedConv", 0)]
    pairs = mapping.pair_tensors(GOLDEN, target, tensor_map={"r_new": "r"})
    assert [p.golden["name"] for p in pairs if p.side == "both"] == ["r"]


OM_JSON = {"graph": [{"name": "g", "op": [
    {"name": "conv1_fused", "type": "Conv2D", "attr": [
        {"key": "_datadump_original_op_names", "value": {"list": {"s": ["conv", "bn", "relu"]}}},
        {"key": "pass_name", "value": {"list": {"s": ["ConvBatchnormFusionPass"]}}}]},
    {"name": "pool", "type": "Pooling", "attr": []}]}]}


def test_om_json_original_names_and_passes():
    assert mapping.om_original_op_names(OM_JSON) == {"conv1_fused": ["conv", "bn", "relu"], "pool": ["pool"]}
    assert mapping.om_fusion_passes(OM_JSON) == {"conv1_fused": "ConvBatchnormFusionPass"}
    target = [_e("conv1_fused:0", "conv1_fused", "Conv2D", 0), _e("pool:0", "pool", "Pooling", 1)]
    pairs = mapping.pair_tensors(GOLDEN, target, op_map=mapping.om_original_op_names(OM_JSON))
    assert {p.target["name"]: p.golden["name"] for p in pairs if p.side == "both"} == {"conv1_fused:0": "r", "pool:0": "p"}


def test_failure_strategies():
    rows = [{"op_name": n, "failed": f, "golden_ops": [n]} for n, f in
            [("a", False), ("b", True), ("c", True), ("d", False), ("e", True)]]
    assert order.select_failures(rows, "first-overall") == [1]
    assert order.select_failures(rows, "all") == [1, 2, 4]
    producers = {"b": ["a"], "c": ["b"], "d": ["a"], "e": ["d"]}  # two branches: a-b-c and a-d-e
    assert order.select_failures(rows, "first-per-output", output_ops=["c", "e"], producers=producers) == [1, 4]
    with pytest.raises(UserError, match="unknown compare strategy"):
        order.select_failures(rows, "last")
