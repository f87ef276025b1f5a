"""A sequence output is written as a sequence (``<name>.npz``, items "0", "1", ...: each item as
onnxruntime returned it, never one stacked array), and the summary says so (issue 42)."""

import json

import numpy as np

from ascendpipe.cli.main import main


def _split_to_sequence(path, ragged: bool):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    inits = []
    if ragged:  # items of different lengths: no single array could hold them
        inits.append(helper.make_tensor("split", TensorProto.INT64, [2], [1, 3]))
        nodes.append(helper.make_node("SplitToSequence", ["r", "split"], ["ys"], axis=0))
    else:
        nodes.append(helper.make_node("SplitToSequence", ["r"], ["ys"], axis=0))
    graph = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                              [helper.make_tensor_sequence_value_info("ys", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_sequence_output_is_written_item_by_item(tmp_path, capsys):
    x = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0)
    np.save(tmp_path / "x.npy", x)
    for ragged, sizes in ((False, [1, 1, 1, 1]), (True, [1, 3])):
        model = _split_to_sequence(tmp_path / f"m{int(ragged)}.onnx", ragged)
        out = tmp_path / f"out{int(ragged)}"
        assert main(["infer", "--model", str(model), "--input", str(tmp_path / "x.npy"), "--output", str(out)]) == 0
        entry = json.loads((out / "summary.json").read_text())["outputs"]["ys"]
        assert entry == {"file": "outputs/ys.npz", "kind": "sequence", "length": len(sizes), "dtype": "float32"}
        with np.load(out / entry["file"]) as items:
            assert items.files == [str(i) for i in range(len(sizes))]
            got = [items[str(i)] for i in range(len(sizes))]
        assert [g.shape[0] for g in got] == sizes
        np.testing.assert_array_equal(np.concatenate(got), np.maximum(x, 0))
    capsys.readouterr()
