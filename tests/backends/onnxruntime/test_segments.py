"""The dump's partition into segments (pure logic over NodeProtos)."""

from onnx import TensorProto, helper

from ascendpipe.backends.onnxruntime.segments import node_reads, plan_segments


def _plan(nodes, sizes, budget, crossable=None, inputs=("x",), inits=None, outputs=()):
    return plan_segments(nodes, sizes, set(sizes) if crossable is None else crossable, budget,
                         graph_inputs=list(inputs), initializers=inits or {}, graph_outputs=set(outputs))


def _chain():
    return [helper.make_node("Relu", ["x"], ["a"], name="n0"),
            helper.make_node("Neg", ["a"], ["b"], name="n1"),
            helper.make_node("Add", ["a", "b"], ["c"], name="n2"),
            helper.make_node("Exp", ["c"], ["d"], name="n3")]


def test_segments_fill_the_budget_and_carry_what_later_segments_read():
    segments = _plan(_chain(), {"a": 10, "b": 10, "c": 10, "d": 10}, 20, outputs=["d"])
    assert [s.nodes for s in segments] == [[0, 1], [2, 3]]
    assert segments[0].inputs == ["x"] and segments[0].outputs == ["a", "b"]
    assert segments[1].inputs == ["a", "b"] and segments[1].outputs == ["c", "d"]
    assert segments[1].releases == ["a", "b"]  # read by no later segment
    assert [s.nodes for s in _plan(_chain(), {"a": 10, "b": 10, "c": 10, "d": 10}, None)] == [[0, 1, 2, 3]]


def test_a_tensor_that_is_not_dumped_never_crosses_a_cut():
    # b is emulation-internal (not crossable): no cut between n1 and n2, so n1..n2 stay together
    sizes = {"a": 10, "c": 10, "d": 10}
    segments = _plan(_chain(), sizes, 10)
    assert [s.nodes for s in segments] == [[0], [1, 2], [3]]
    assert segments[1].inputs == ["a"] and segments[1].outputs == ["c"]  # b stays inside
    # nothing may be cut at all: one run, over budget
    assert [s.nodes for s in _plan(_chain(), {"d": 10}, 1, crossable=set())] == [[0, 1, 2, 3]]


def test_constants_are_copied_into_each_segment_that_reads_them():
    nodes = [helper.make_node("Constant", [], ["k"], name="k", value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
             helper.make_node("Mul", ["x", "k"], ["a"], name="n1"),
             helper.make_node("Add", ["a", "k"], ["b"], name="n2")]
    segments = _plan(nodes, {"a": 10, "b": 10}, 10)
    assert [s.nodes for s in segments] == [[0, 1], [0, 2]]
    assert segments[1].inputs == ["a"] and segments[0].outputs == ["a"]  # k is never fed nor returned


def test_weights_count_toward_the_budget_and_are_listed_per_segment():
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="n0"),
             helper.make_node("MatMul", ["a", "w2"], ["b"], name="n1")]
    segments = _plan(nodes, {"a": 4, "b": 4}, 20, inits={"w1": 10, "w2": 10})
    assert [(s.nodes, s.initializers) for s in segments] == [([0], ["w1"]), ([1], ["w2"])]
    # weights count twice (sub-model bytes and the session's copy): 2 x (4 + 2 x 10) = 48
    assert [s.nodes for s in _plan(nodes, {"a": 4, "b": 4}, 47, inits={"w1": 10, "w2": 10})] == [[0], [1]]
    assert [s.nodes for s in _plan(nodes, {"a": 4, "b": 4}, 48, inits={"w1": 10, "w2": 10})] == [[0, 1]]


def test_a_body_reading_an_outer_tensor_makes_it_an_input_of_the_if_segment():
    then = helper.make_graph([helper.make_node("Add", ["h", "x"], ["t"], name="t")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["g"], ["e"], name="e")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Mul", ["x", "x"], ["h"], name="square"),
             helper.make_node("Relu", ["x"], ["g"], name="relu"),
             helper.make_node("Greater", ["x", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other)]
    assert node_reads(nodes[3]) == ["cond", "g", "h", "x"]  # (make_node orders attributes: else first)
    segments = _plan(nodes, {"h": 8, "g": 8, "cond": 1, "y": 8}, 8, inits={"zero": 4})
    last = segments[-1]
    assert last.nodes == [3] and set(last.inputs) == {"cond", "h", "x", "g"}
    # h read only inside the body: it is still carried out of its segment
    assert "h" in segments[0].outputs


def test_only_the_output_read_later_is_carried_from_a_two_output_node():
    nodes = [helper.make_node("Split", ["x"], ["p", "q"], name="split", axis=0, num_outputs=2),
             helper.make_node("Relu", ["p"], ["rp"], name="n1"),
             helper.make_node("Neg", ["q"], ["nq"], name="n2")]
    segments = _plan(nodes, {"p": None, "q": 8, "rp": 8, "nq": 8}, 16, crossable={"q", "rp", "nq"})
    # p's size is unknown (it may not cross): no cut after Split; after Relu only q crosses
    assert [s.nodes for s in segments] == [[0, 1], [2]]
    assert segments[1].inputs == ["q"] and segments[0].outputs == ["p", "q", "rp"]


def test_a_segment_fed_nothing_joins_the_next():
    # n0 computes from a weight only (onnxruntime would fold that segment to nothing and refuse it)
    nodes = [helper.make_node("Neg", ["w"], ["nw"], name="n0"),
             helper.make_node("Mul", ["x", "nw"], ["a"], name="n1"),
             helper.make_node("Relu", ["a"], ["b"], name="n2")]
    segments = _plan(nodes, {"nw": 8, "a": 8, "b": 8}, 8, inits={"w": 0})
    assert [s.nodes for s in segments] == [[0, 1], [2]]
    assert segments[0].inputs == ["x"] and segments[0].initializers == ["w"]
