"""Pure parts: QDQ nodes mapped back to original ops, per-layer loss ranking, the skip_layers advice."""

from __future__ import annotations

from types import SimpleNamespace

from ascendpipe.compare.quant_advice import quantization_losses, skip_layers_advice
from ascendpipe.compare.mapping import qdq_map
from ascendpipe.fix.search import KEEP, Candidate, Result, advised, search


def node(name, op_type, inputs, outputs):
    return SimpleNamespace(name=name, op_type=op_type, input=inputs, output=outputs)


# the shape onnxruntime's static QDQ gives conv1 -> relu1 -> conv2 (activation and weight DQ pairs)
QDQ_NODES = [
    node("w1_DequantizeLinear", "DequantizeLinear", ["w1_q", "w1_s", "w1_z"], ["w1_DequantizeLinear_Output"]),
    node("x_QuantizeLinear", "QuantizeLinear", ["x", "x_s", "x_z"], ["x_QuantizeLinear_Output"]),
    node("x_DequantizeLinear", "DequantizeLinear", ["x_QuantizeLinear_Output", "x_s", "x_z"], ["x_DequantizeLinear_Output"]),
    node("conv1", "Conv", ["x_DequantizeLinear_Output", "w1_DequantizeLinear_Output"], ["c1"]),
    node("relu1", "Relu", ["c1"], ["r1"]),
    node("r1_QuantizeLinear", "QuantizeLinear", ["r1", "r1_s", "r1_z"], ["r1_QuantizeLinear_Output"]),
    node("r1_DequantizeLinear", "DequantizeLinear", ["r1_QuantizeLinear_Output", "r1_s", "r1_z"], ["r1_DequantizeLinear_Output"]),
    node("conv2", "Conv", ["r1_DequantizeLinear_Output", "w2"], ["c2"]),
    node("conv3", "Conv", ["c2", "w3"], ["c3"]),  # kept in float
]


def test_qdq_nodes_serve_the_op_they_feed_and_their_tensors_are_internal():
    m = qdq_map(QDQ_NODES, original_tensors={"c1", "r1", "c2", "c3"})
    assert m["qdq_nodes"] == {"w1_DequantizeLinear": "conv1", "x_QuantizeLinear": "conv1",
                              "x_DequantizeLinear": "conv1", "r1_QuantizeLinear": "conv2",
                              "r1_DequantizeLinear": "conv2"}
    assert m["quantized_layers"] == ["conv1", "conv2"]
    assert set(m["internal_tensors"]) == {"w1_DequantizeLinear_Output", "x_QuantizeLinear_Output",
                                          "x_DequantizeLinear_Output", "r1_QuantizeLinear_Output",
                                          "r1_DequantizeLinear_Output"}
    assert m["tensor_producer"] == {}


def test_a_dequantize_output_with_an_original_name_stands_for_the_op_it_dequantizes():
    # AMCT-style: the dequantized value carries the layer's original output name
    nodes = [node("q", "AscendQuant", ["x"], ["xq"]), node("conv1", "Conv", ["xq", "w"], ["acc"]),
             node("dq", "AscendDequant", ["acc", "s"], ["c1"]), node("relu1", "Relu", ["c1"], ["r1"])]
    m = qdq_map(nodes, original_tensors={"c1", "r1"})
    assert m["tensor_producer"] == {"c1": {"op_name": "conv1", "op_type": "Conv"}}
    assert "xq" in m["internal_tensors"] and "c1" not in m["internal_tensors"]
    assert m["quantized_layers"] == ["conv1"]


def row(op, cosine, golden_ops=None):
    return {"op_name": op, "golden_op": op, "golden_ops": golden_ops or [op], "side": "both", "cosine": cosine}


PRODUCERS = {"conv1": [], "relu1": ["conv1"], "conv2": ["relu1"], "relu2": ["conv2"], "fc": ["relu2"]}


def test_the_layer_that_loses_most_is_the_one_whose_own_loss_is_largest():
    rows = [row("conv1", 0.9999), row("relu1", 0.9999), row("conv2", 0.60), row("relu2", 0.62), row("fc", 0.55)]
    ranked = quantization_losses(rows, ["conv1", "conv2", "fc"], PRODUCERS)
    assert [r["layer"] for r in ranked] == ["conv2", "fc", "conv1"]
    assert abs(ranked[0]["local_loss"] - (0.40 - 0.0001)) < 1e-9
    assert abs(ranked[1]["local_loss"] - (0.45 - 0.38)) < 1e-9  # fc's own share, not what it inherits


def test_a_collapsed_output_counts_as_lost():
    ranked = quantization_losses([row("conv1", 0.999), row("relu1", 0.999), row("conv2", float("nan"))],
                                 ["conv1", "conv2"], PRODUCERS)
    assert ranked[0]["layer"] == "conv2" and ranked[0]["loss"] == 1.0


def test_advice_keeps_the_lossiest_in_float_matrix_aware_and_carries_the_stage_list():
    ranked = [{"layer": "conv2", "local_loss": 0.4}, {"layer": "fc", "local_loss": 0.3},
              {"layer": "conv1", "local_loss": 0.01}]
    item = skip_layers_advice(ranked, "quantize@int8", existing=["head"])
    assert item["kind"] == "skip_layers" and item["added"] == ["conv2", "fc"]
    assert item["layers"] == ["head", "conv2", "fc"]
    assert item["set"] == "--set 'stages.quantize.matrix.int8.skip_layers=[head,conv2,fc]'"
    assert skip_layers_advice([{"layer": "a", "local_loss": 0.0}]) is None


class FakeQuantEvaluator:
    """Top-1 drops by 0.3 while `bad` is int8; the advice names the lossiest layer not yet kept."""

    def __init__(self, layers, bad):
        self.layers, self.bad, self.calls = layers, bad, 0

    def evaluate(self, remedy):
        self.calls += 1
        kept = {c.name for c in remedy}
        metric = 0.9 - 0.3 * len(self.bad - kept)
        ranked = [{"layer": l, "local_loss": 0.5 if l in self.bad else 0.001} for l in self.layers if l not in kept]
        advice = skip_layers_advice(sorted(ranked, key=lambda r: -r["local_loss"]), existing=sorted(kept))
        return Result(metric >= 0.89, metric, failure={"advice": [advice]} if advice else None, ops=self.layers)


def test_fix_search_reads_skip_layers_advice_and_keeps_only_the_sensitive_layer():
    assert advised({"advice": [{"kind": "skip_layers", "added": ["conv7"]}]}) == [Candidate(KEEP, "conv7")]
    layers = [f"conv{i}" for i in range(12)]
    evaluator = FakeQuantEvaluator(layers, {"conv9"})
    outcome = search(evaluator)
    assert outcome.passed and outcome.minimal
    assert [c.name for c in outcome.remedy] == ["conv9"]
    assert evaluator.calls == 2  # baseline, then the advised layer (its removal is the baseline again)
