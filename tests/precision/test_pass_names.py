"""ATC's fusion pass names: the registry extracted from canndev and GE, what may be switched off, and
what the emulation says of a switched pass it does not model."""

from __future__ import annotations

import pytest

from ascendpipe.errors import UserError
from ascendpipe.precision import atc_passes, pass_names


@pytest.mark.parametrize("name, section, where", [
    ("GroupNormFusionPass", "GraphFusion",
     "canndev ops/built-in/fusion_pass/graph_fusion/ai_core/group_norm_fusion_pass.cc:233"),
    ("LayerNormONNXFusionPass", "GraphFusion", "layer_norm_onnx_fusion_pass.cc:804"),
    ("GeluONNXFusionPass", "GraphFusion", "gelu_onnx_fusion_pass.cc:298"),
    ("TbeConvDoubleInFusionPass", "UBFusion", "tbe_conv_double_in_fusion_pass.cc:217"),
    ("TbeReduceElemwiseFusionPass", "UBFusion", "hicann/ge compiler/engines/nn_engine/fusion/graph_optimizer/"
                                                "fusion_common/fusion_pass_name.h:66"),
])
def test_registered_names_with_their_source(name, section, where):
    found = pass_names.lookup(name)
    assert found.section == section and where in found.source and found.can_switch_off
    assert atc_passes.is_known(name) and atc_passes.section_of(name) == section


def test_ges_never_closed_passes():
    for name in ("AABiasaddConvFusion", "ConstToAttrReduceSumFusion", "BatchNormBnInferFusionPass", "ConstToAttrPass"):
        assert not atc_passes.switchable(name), name
        assert pass_names.lookup(name).can_switch_off is False
    assert "fusion_pass_util.h" in atc_passes.unswitchable_message("ConstToAttrReduceSumFusion")
    assert atc_passes.switchable("GroupNormFusionPass") and atc_passes.switchable("TbeReduceElemwiseFusionPass")


def test_switch_checks(tmp_path):
    from ascendpipe.backends.onnxruntime.fusion import check_rules

    check_rules({"GroupNormFusionPass": "off", "ALL": "off", "SoftmaxFusionPass": "on"})
    with pytest.raises(UserError, match=r"'GroupNormFusonPass'.*did you mean 'GroupNormFusionPass'"):
        check_rules({"GroupNormFusonPass": "off"})
    with pytest.raises(UserError, match="cannot be switched off"):
        check_rules({"BatchNormBnInferFusionPass": "off"})
    unmodelled = atc_passes.not_modelled({"GroupNormFusionPass": "off", "TbeReduceElemwiseFusionPass": "off",
                                          "ALL": "on", "SoftmaxFusionPass": "off"})
    assert set(unmodelled) == {"GroupNormFusionPass", "SoftmaxFusionPass"}
    assert "group_norm_fusion_pass.cc" in unmodelled["GroupNormFusionPass"]["source"]
