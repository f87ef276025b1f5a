"""Fused outputs mapped as msaccucmp maps them (``output_desc``'s _datadump_origin_name /
_datadump_origin_output_index), and hashed long dump names read through mapping.csv."""

import json

import numpy as np

from ascendpipe.backends.ascend import acl_dump, atc
from ascendpipe.backends.ascend.om_facts import fused_map_from_om
from ascendpipe.compare import mapping


def _s(v):
    return {"s": v}


def _desc(origin, index=None):
    attr = [{"key": "_datadump_origin_name", "value": _s(origin)}]
    if index is not None:
        attr.append({"key": "_datadump_origin_output_index", "value": {"i": index}})
    return {"dtype": "DT_FLOAT16", "attr": attr}


def _originals(*names):
    return {"key": "_datadump_original_op_names", "value": {"list": {"s": list(names)}}}


# A split whose two outputs feed two fused kernels. The fused op "mulsub" stands for mul and sub; its
# output is sub's (the last op), but its second output is mul's own output 0, which a "last original
# node" guess would pair with sub's (non-existent) output 1.
OM = {"name": "m", "graph": [{"name": "g", "op": [
    {"name": "x", "type": "Data"},
    {"name": "mulsub", "type": "FusedMulSub", "attr": [_originals("mul", "sub")],
     "output_desc": [_desc("sub", 0), _desc("mul", 0)]},
    {"name": "renamed_relu", "type": "Relu", "attr": [_originals("relu")], "output_desc": [{"attr": []}]},
    {"name": "trans_TransData_1", "type": "TransData"},
    {"name": "lost", "type": "Fused", "attr": [_originals("a", "b")], "output_desc": [{"attr": []}]},
    {"name": "split", "type": "SplitD", "attr": [_originals("split")],
     "output_desc": [_desc("split", 0), _desc("split")]},
]}]}


def test_each_om_output_maps_to_its_origin_as_msaccucmp_reads_it():
    origins = mapping.om_output_origins(OM)
    assert origins[("mulsub", 0)] == ("sub", 0) and origins[("mulsub", 1)] == ("mul", 0)
    assert origins[("renamed_relu", 0)] == ("relu", 0)  # one original, alone: a renamed op
    assert mapping.origin_of(origins, "trans_TransData_1", 3) == (("trans_TransData_1", 3), True)  # its own name
    assert origins[("lost", 0)] is None  # fused, no origin name: msaccucmp compares nothing
    assert origins[("split", 1)] == ("split", 1)  # no index attr: the output's position
    assert mapping.origin_of(origins, "unknown", 0) == (None, False)


def test_pairing_follows_the_origin_not_the_last_original_op():
    golden = [{"name": t, "op_name": op, "op_type": "X", "topo_index": i}
              for i, (t, op) in enumerate([("mul_out", "mul"), ("sub_out", "sub"), ("relu_out", "relu"),
                                           ("a_out", "a"), ("b_out", "b")])]
    target = [{"name": "mulsub:output:0", "op_name": "mulsub"}, {"name": "mulsub:output:1", "op_name": "mulsub"},
              {"name": "renamed_relu:output:0", "op_name": "renamed_relu"}, {"name": "lost:output:0", "op_name": "lost"}]
    pairs = mapping.pair_tensors(golden, target, op_map=mapping.om_original_op_names(OM),
                                 origins=mapping.om_output_origins(OM))
    by_target = {p.target["name"]: p for p in pairs if p.target}
    assert by_target["mulsub:output:0"].golden["name"] == "sub_out"
    assert by_target["mulsub:output:1"].golden["name"] == "mul_out"  # the guess would leave it unpaired
    assert by_target["renamed_relu:output:0"].golden["name"] == "relu_out"
    lost = by_target["lost:output:0"]
    assert lost.golden is None and "_datadump_origin_name" in lost.note
    # without origins (an emulated fused map) the old rule still pairs by the last original op
    guessed = mapping.pair_tensors(golden, target[:2], op_map=mapping.om_original_op_names(OM))
    assert [p.golden["name"] if p.golden else None for p in guessed if p.target] == ["sub_out", None]


def test_fused_map_tensors_come_from_the_origins():
    node_io = {"mul": (["x"], ["mul_out"]), "sub": (["mul_out"], ["sub_out"]), "relu": (["sub_out"], ["relu_out"]),
               "split": (["x"], ["s0", "s1"]), "a": ([], ["a_out"]), "b": (["a_out"], ["b_out"])}
    fused = fused_map_from_om(atc.parse_om_json(OM), node_io, mapping.om_output_origins(OM))
    assert fused["tensors"] == {"mulsub:output:0": "sub_out", "mulsub:output:1": "mul_out",
                                "renamed_relu:output:0": "relu_out", "split:output:0": "s0", "split:output:1": "s1"}
    assert fused["fused"] == {"mulsub": ["mul", "sub"], "lost": ["a", "b"]}
    # an OM JSON without output_desc: a 1:1 op keeps its outputs, a fused op gets none (no guess)
    bare = {"graph": [{"op": [{"name": n, "type": "T", "attr": a} for n, a in (
        ("split", [_originals("split")]), ("mulsub", [_originals("mul", "sub")]))]}]}
    assert fused_map_from_om(atc.parse_om_json(bare), node_io)["tensors"] == {"split:output:0": "s0",
                                                                             "split:output:1": "s1"}


def test_long_dump_names_are_read_through_both_mapping_csv_files(tmp_path):
    long_op = "backbone/" + "very_long_block_name/" * 12 + "conv"
    dump_name = f"Conv2D.{acl_dump.sanitize(long_op)}.3.0.1700000000000123"
    assert len(dump_name) >= 255
    leaf, converted, out = tmp_path / "leaf", tmp_path / "converted", tmp_path / "out"
    for d in (leaf, converted):
        d.mkdir()
    (leaf / "12345678901").write_bytes(b"")  # the device wrote the dump under a digits hash
    (leaf / "mapping.csv").write_text(f"12345678901,{dump_name}\nbroken row without comma\n")
    short = "Add.add_1.4.0.1700000000000200"
    (leaf / short).write_bytes(b"")
    assert [(f.op_name, f.timestamp) for f in acl_dump.dump_files(leaf)] == [
        (acl_dump.sanitize(long_op), 1700000000000123), ("add_1", 1700000000000200)]
    # msaccucmp convert: the hashed dump's outputs, one of them renamed again (its own 255 rule)
    np.save(converted / "12345678901.output.0.npy", np.ones((1, 2), np.float32))  # 26.2's name: no shape
    np.save(converted / "0a1b2c.npy", np.full((1, 2), 2.0, np.float32))
    (converted / "mapping.csv").write_text(f"0a1b2c.npy,{short}.output.0.1x2.npy\n")
    naming = acl_dump.OpNaming.from_om({long_op: "Conv2D", "add_1": "Add"}, {(long_op, 0): "conv_out"})
    index = json.loads(acl_dump.build_index(converted, out, naming, model="m.om", feeds={}, dump_dir=leaf).read_text())
    got = [(t["name"], t["op_name"], t["op_type"], t["max"]) for t in index["tensors"]]
    assert got == [("conv_out", long_op, "Conv2D", 1.0), ("add_1:output:0", "add_1", "Add", 2.0)]
    # without the device's mapping.csv the hashed dump is not an op: it is left out, not misnamed
    bare = json.loads(acl_dump.build_index(converted, tmp_path / "bare", naming, model="m.om", feeds={}).read_text())
    assert [t["op_name"] for t in bare["tensors"]] == ["add_1"]


def test_a_long_op_name_goes_through_the_device_dump_and_msaccucmp_to_its_tensor(tmp_path, monkeypatch):
    """End to end on the CANN doubles: the dump file of an op with a 250-character name is hashed by the
    device (mapping.csv in the dump folder); the index still names its op and ONNX tensor."""
    import onnx

    from ascendpipe.backends.ascend import stages
    from tests.backends.ascend.conftest import _context_factory, _point_at_doubles, build_tiny_model

    _point_at_doubles(monkeypatch)
    model_path = build_tiny_model(tmp_path / "tiny.onnx")
    model = onnx.load(str(model_path))
    long_name = "backbone/" + "stage_block/" * 20 + "conv2"
    next(n for n in model.graph.node if n.name == "conv2").name = long_name
    onnx.save(model, str(model_path))
    factory = _context_factory(tmp_path / "ws")
    make_ctx = next(factory)
    cctx = make_ctx("convert", "convert", {"soc_version": "Ascend310P3"}, inputs={"model": model_path})
    stages.convert(cctx)
    fused = json.loads((cctx.out_dir / "fused_map.json").read_text())
    assert fused["tensors"]["conv1:output:0"] == "r1"  # Conv+Relu: output_desc names relu1's output 0
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32))
    dctx = make_ctx("dump", "dump", {"keep_raw": True}, inputs={"model": cctx.out_dir, "inputs": tmp_path / "x.npy"})
    stages.dump(dctx)
    leaf = next((dctx.out_dir / "npu_dump").glob("*/*/*/*/*"))
    hashed = acl_dump.read_mapping_csv(leaf)
    assert len(hashed) == 1 and all(k.isdigit() and acl_dump.sanitize(long_name) in v for k, v in hashed.items())
    # msaccucmp names its npy after the (short) hashed file: only the device's mapping.csv is needed here
    assert not acl_dump.read_mapping_csv(dctx.out_dir / "converted")
    index = json.loads((dctx.out_dir / "index.json").read_text())
    entry = next(t for t in index["tensors"] if t["op_name"] == long_name)
    assert entry["name"] == "c2" and entry["op_type"] == "Conv2D"
    next(factory, None)
