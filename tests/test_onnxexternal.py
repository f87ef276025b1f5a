"""The strict reader of ONNX external data (onnxexternal.references, onnxrefs.external_tensors): each
hostile or careless reference is one located line naming the tensor, the field and the model, before
any byte of it is read; what onnxruntime reads, it reads the same bytes of."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ascendpipe import onnxexternal
from ascendpipe.errors import UserError
from tests import externaldata
from tests.externaldata import CASES, W, make_case, model_with


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_bad_reference_is_one_line_naming_the_tensor_the_field_and_the_model(tmp_path, case):
    model = make_case(case, tmp_path)
    with pytest.raises(UserError) as err:
        onnxexternal.references(model)
    line = str(err.value)
    assert "\n" not in line and len(line) < 400
    sits = " (node 'const_w' attribute)" if case == "constant_attribute" else ""
    assert line.startswith(f"{model}: tensor 'W'{sits}: external data ")  # the model, then the tensor
    assert CASES[case] in line
    assert err.value.location.file == str(model) and err.value.location.field.startswith("external_data")


def test_onnxruntime_refuses_what_the_reader_refuses(tmp_path):
    """The reader's rules are onnxruntime's (1.32): every case it refuses, onnxruntime refuses too, or
    reads outside the model's folder (the link cases) or a file it must not (a FIFO, left out here:
    onnxruntime would block on it). Stricter in one case: a location holding a NUL byte, which
    onnxruntime cuts there (C strings) and reads another file than the one written."""
    import onnxruntime as ort

    looser = {"symlink_outside", "symlinked_folder"}  # onnxruntime refuses these too, by its own path check
    for case in sorted(set(CASES) - {"fifo", "nul"}):
        model = make_case(case, tmp_path / case)
        with pytest.raises(Exception) as err:  # noqa: PT011 - onnxruntime's own exception types
            ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        if case in looser:
            assert "escapes model directory" in str(err.value)


def test_a_good_reference_reads_the_bytes_onnxruntime_reads(tmp_path):
    import onnxruntime as ort

    model = model_with(tmp_path / "m")
    (ref,) = onnxexternal.references(model)
    assert (ref.tensor, ref.location, ref.offset, ref.length) == ("W", "w.bin", 4096, 1024)
    assert ref.path == os.path.realpath(tmp_path / "m" / "w.bin") and ref.where == "initializer"
    x = np.ones((1, 16), np.float32)
    y = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, x @ W)


def test_a_missing_length_is_the_tensors_own_size_and_a_longer_file_is_fine(tmp_path):
    """onnxruntime reads dims x dtype bytes where no length is given; a file past that holds other
    weights. Over a 64 GiB sparse file the read stays the tensor's 1 KB (it was a MemoryError)."""
    model = model_with(tmp_path / "m", [("location", "w.bin"), ("offset", "4096")])
    with open(tmp_path / "m" / "w.bin", "r+b") as handle:
        handle.truncate(64 << 30)
    (ref,) = onnxexternal.references(model)
    assert ref.length == 1024
    import onnx

    tensor = onnx.load(str(model), load_external_data=False).graph.initializer[0]
    assert np.frombuffer(onnxexternal.read_bytes(tensor, tmp_path / "m"), np.float32).tolist() == W.ravel().tolist()


def test_links_inside_the_folder_are_followed_and_those_leaving_it_refused(tmp_path):
    model = model_with(tmp_path / "m")
    os.rename(tmp_path / "m" / "w.bin", tmp_path / "m" / "real.bin")
    os.symlink("real.bin", tmp_path / "m" / "w.bin")  # inside: onnxruntime reads it too
    (ref,) = onnxexternal.references(model)
    assert ref.path == os.path.realpath(tmp_path / "m" / "real.bin")
    os.link(tmp_path / "m" / "real.bin", tmp_path / "m" / "hard.bin")  # a hard link: onnxruntime reads it
    externaldata.with_location(tmp_path / "m", "hard.bin")
    assert onnxexternal.references(model)[0].location == "hard.bin"


def test_tensors_in_bodies_and_constants_and_several_files_are_all_found(tmp_path):
    """The wire walk finds every external tensor onnx's _get_all_tensors finds: initializers of If
    bodies and node attributes (Constant's value), each with where it sits."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import _get_all_tensors

    from ascendpipe.onnxrefs import external_tensors

    value = numpy_helper.from_array(np.ones(300, np.float32), "c")
    body = helper.make_graph([helper.make_node("Constant", [], ["k"], value=value, name="kc")], "body", [],
                             [helper.make_tensor_value_info("k", TensorProto.FLOAT, [300])])
    graph = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body, name="iff")],
                              "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [300])],
                              [numpy_helper.from_array(np.zeros(400, np.float32), "unused")])
    (tmp_path / "m").mkdir()
    onnx.save_model(helper.make_model(graph), str(tmp_path / "m" / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=False, size_threshold=0, convert_attribute=True)
    found = external_tensors((tmp_path / "m" / "m.onnx").read_bytes())
    theirs = [t for t in _get_all_tensors(onnx.load(str(tmp_path / "m" / "m.onnx"), load_external_data=False))
              if t.data_location == TensorProto.EXTERNAL]
    assert sorted(t.name for t in found) == sorted(t.name for t in theirs) == ["c", "c", "unused"]
    assert {t.where for t in found} == {"initializer", "node 'kc' attribute"}
    refs = onnxexternal.references(tmp_path / "m" / "m.onnx")
    assert {r.location for r in refs} == {"c", "unused"} and {r.length for r in refs} == {1200, 1600}


def test_a_file_that_is_not_protobuf_is_left_to_the_callers_parser(tmp_path):
    (tmp_path / "x.onnx").write_bytes(b"\xff\xff\xff\xff not a model")
    assert onnxexternal.references(tmp_path / "x.onnx") == []
    (tmp_path / "e.onnx").write_bytes(b"")
    assert onnxexternal.references(tmp_path / "e.onnx") == []


def test_the_reader_reads_no_byte_of_a_refused_file(tmp_path):
    """A FIFO is refused from its stat: opening it would block until a writer came (and reading a
    device never ends)."""
    model = make_case("fifo", tmp_path)
    with pytest.raises(UserError, match="not a regular file"):
        onnxexternal.references(model)  # returns at once: a blocked open would hang the test


def test_place_file_links_only_where_asked_and_never_changes_the_source(tmp_path):
    source = tmp_path / "a.bin"
    source.write_bytes(b"x" * 5000)
    how = onnxexternal.place_file(source, tmp_path / "copy" / "a.bin")
    assert how in ("copied", "reflinked") and os.stat(tmp_path / "copy" / "a.bin").st_nlink == 1
    how = onnxexternal.place_file(source, tmp_path / "linked" / "a.bin", link=True)
    if how == "linked":
        assert os.path.samefile(source, tmp_path / "linked" / "a.bin")
    again = onnxexternal.place_file(source, tmp_path / "linked" / "a.bin", link=True)  # the same link again
    assert again == how and sorted(os.listdir(tmp_path / "linked")) == ["a.bin"]  # no temp link left
    assert source.read_bytes() == b"x" * 5000


def test_memory_is_checked_before_a_big_read(tmp_path, monkeypatch):
    monkeypatch.setattr(onnxexternal, "available_memory", lambda: 999)
    with pytest.raises(UserError, match=r"needs 1\.02 KB of memory and 999 B is available"):
        onnxexternal.check_memory(1024, "tensor 'W'", Path("m.onnx"))
