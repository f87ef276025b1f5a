"""attribution.attribute_kernels on hand-made graph pairs (model, what onnxruntime ran)."""

from ascendpipe.profiling.attribution import Node, Source, attribute_kernels, expand

# x -> Shape -> Gather -> Concat -> Reshape(x, ...) -> MatMul -> Add -> y: torch's shape arithmetic
MODEL = [Node("shape", "Shape", ("x",), ("s",)), Node("gather", "Gather", ("s", "i0"), ("g",)),
         Node("concat", "Concat", ("g", "c"), ("shp",)), Node("reshape", "Reshape", ("x", "shp"), ("r",)),
         Node("mm", "MatMul", ("r", "w"), ("m",)), Node("add", "Add", ("m", "b"), ("y",))]
WEIGHTS = {"i0", "c", "w", "b"}


def test_folded_shape_arithmetic_is_no_source_and_helpers_serve_the_fused_kernel():
    kernels = [Node("reshape", "Reshape", ("x", "reshape_new_shape"), ("r",)),
               Node("gemm_input_reshape", "Reshape", ("r", "gis"), ("gi",)),
               Node("mm/MatMulAddFusion", "Gemm", ("gi", "w", "b"), ("go",)),
               Node("gemm_output_reshape", "Reshape", ("go", "gos"), ("y",))]
    got = attribute_kernels(MODEL, WEIGHTS, kernels, {"x", "reshape_new_shape", "gis", "gos", "w", "b"})
    assert got["reshape"] == Source(("reshape",), "reshape", "Reshape")  # not shape/gather/concat: folded
    fused = Source(("mm", "add"), "mm", "MatMul")
    assert got["mm/MatMulAddFusion"] == fused  # named after the MatMul it starts from
    assert got["gemm_output_reshape"].nodes == got["gemm_input_reshape"].nodes == ("mm", "add")


def test_a_shape_op_that_still_runs_is_its_own_source():
    kernels = [Node("shape", "Shape", ("x",), ("s",)), Node("gather", "Gather", ("s", "i0"), ("g",)),
               Node("concat", "Concat", ("g", "c"), ("shp",)), Node("reshape", "Reshape", ("x", "shp"), ("r",)),
               Node("mm", "MatMul", ("r", "w"), ("m",)), Node("add", "Add", ("m", "b"), ("y",))]
    got = attribute_kernels(MODEL, WEIGHTS, kernels, {"x"} | WEIGHTS)
    assert {k: s.nodes for k, s in got.items()} == {n.name: (n.name,) for n in MODEL}


def test_a_region_without_an_anchor_is_typed_by_its_ops_and_fused_maps_expand():
    model = [Node("div", "Div", ("x", "k"), ("d",)), Node("erf", "Erf", ("d",), ("e",)),
             Node("add1", "Add", ("e", "one"), ("a",)), Node("mul", "Mul", ("x", "a"), ("y",))]
    got = attribute_kernels(model, {"k", "one"}, [Node("MyFusedThing", "Custom", ("x",), ("y",))], {"x"})
    assert got["MyFusedThing"] == Source(("div", "erf", "add1", "mul"), "mul", "Div+Erf+Add+Mul")
    assert expand(Source(("conv", "relu"), "conv", "Conv"), {"conv": ["conv", "bn"]}) == ("conv", "bn", "relu")
