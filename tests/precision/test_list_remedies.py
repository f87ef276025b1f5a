"""keep_dtype / modify_mixlist / customize_dtypes matched as ATC matches them (pure: given node types)."""

from __future__ import annotations

import pytest

from ascendpipe.errors import UserError
from ascendpipe.precision import lists, remedy
from ascendpipe.precision.list_remedies import NodeTypes, resolve


@pytest.fixture
def lists310p(no_cann):
    return lists.for_soc("Ascend310P3")


# a decomposed LayerNorm that a graph fusion made one LayerNorm kernel of: the fused node exists only after
# the parser (ATC's LayerNormONNXFusionPass runs in FE's graph fusion); its originals are parse-time nodes
PARSED = [NodeTypes("mean", "ReduceMean", "ReduceMean", "ReduceMeanD"), NodeTypes("pow", "Pow", "Pow", "Pow"),
          NodeTypes("sm", "Softmax", "SoftmaxV2", "SoftmaxV2")]
FUSED = [NodeTypes("ln", "LayerNorm", "LayerNorm", "LayerNorm"), NodeTypes("sm", "Softmax", "SoftmaxV2", "SoftmaxV2"),
         *(NodeTypes(n.name, n.op_type, n.parse_type, n.kernel_type, fused_into="ln") for n in PARSED[:2])]


def test_keep_optype_is_matched_on_the_parsed_graph(lists310p):
    found = resolve(lists310p, FUSED, ["OpType::LayerNorm", "OpType::Pow", "OpType::Softmax"], None, [],
                    parsed=PARSED)
    assert found.lists.keep_types == {"Pow", "Softmax"}  # LayerNorm is made later: atc keeps nothing by it
    assert any("OpType::LayerNorm' matches no op" in w for w in found.warnings)
    assert found.keep_written == ["OpType::LayerNorm", "OpType::Pow", "OpType::SoftmaxV2"]
    assert found.translated == {"OpType::Softmax": "OpType::SoftmaxV2"}


def test_mixlist_and_customize_name_kernel_types(lists310p):
    custom = remedy.parse_customize_dtypes("OpType::LayerNorm:InputDtype:float,OutputDtype:float\n"
                                           "pow::InputDtype:float\n")
    found = resolve(lists310p, FUSED, [], {"black-list": {"to-add": ["Softmax", "LayerNorm"]}}, custom, parsed=PARSED)
    assert {"SoftmaxV2", "LayerNorm"} <= found.lists.black
    assert found.mixlist_written == {"black-list": {"to-add": ["SoftmaxV2", "LayerNorm"]}}
    assert found.lists.custom["ln"][:2] == ("float32", "float32")
    assert "pow" not in found.lists.custom  # merged into the fused kernel: the setting takes no effect
    assert any("merged into 'ln'" in w for w in found.warnings)


def test_repeated_customize_lines_keep_the_first(lists310p):
    custom = remedy.parse_customize_dtypes("sm::InputDtype:float\nsm::InputDtype:float16\n")
    found = resolve(lists310p, PARSED, [], None, custom)
    assert found.lists.custom["sm"][0] == "float32" and any("repeats 'sm'" in w for w in found.warnings)


def test_names_not_in_the_model_are_located_errors(lists310p):
    with pytest.raises(UserError, match=r"keep_dtype names op 'mena' \(did you mean 'mean'\?\)"):
        resolve(lists310p, PARSED, ["mena"], None, [])
    with pytest.raises(UserError, match="not in PascalCase"):
        resolve(lists310p, PARSED, ["OpType::layer_norm"], None, [])
