"""msaccucmp as the oracle for device dumps: its own header reading and its own format conversion, bit for bit.

The reference is mindstudio-probe's msaccucmp (``msprobe/msaccucmp``), run in-process on the double's dump
files (tests/backends/ascend/doubles/pylib/_dump_double.py, protobuf's encoding of the published schema):

- header: ``dump_parse/big_dump_data.py`` ``BigDumpDataParser.parse`` (the header length, then each tensor's
  ``size`` bytes: inputs, outputs, buffers, workspaces). Its protobuf step runs in CANN's
  ``libascend_dump_parser.so`` (``_parse_dump_to_json``, not in the wheel); protobuf's own JSON of the header
  (``json_format.MessageToDict``) stands in for it, so everything after it is msaccucmp's Python;
- tensors: ``dump_parse/dump_utils.py`` ``convert_dump_data`` (bytes to arrays by shape and dtype), then
  ``conversion/shape_format_conversion.py`` ``FormatConversionMain._convert_format_for_one_tensor`` (what
  ``msaccucmp convert -f <format>`` runs per tensor: the builtin converter, then the padding sliced off).

Skips with its reason when mindstudio-probe is not installed (``pip install --no-deps mindstudio-probe``).
"""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.backends.ascend.acl_dump import device_tensor
from ascendpipe.backends.ascend.dump_data import read_dump_bytes
from tests.backends.ascend.conftest import PYLIB

sys.path.insert(0, str(PYLIB))
import _dump_double as dd  # noqa: E402

RNG = np.random.default_rng(39)


@pytest.fixture(scope="module")
def msaccucmp():
    spec = importlib.util.find_spec("msprobe")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mindstudio-probe is not installed (pip install --no-deps mindstudio-probe, as .ci/run does)")
    root = Path(list(spec.submodule_search_locations)[0]) / "msaccucmp"
    if not (root / "conversion" / "shape_format_conversion.py").is_file():
        pytest.skip(f"this mindstudio-probe has no msaccucmp/conversion ({root})")
    sys.path.insert(0, str(root))  # msaccucmp imports its modules top-level (`from cmp_utils import ...`)
    try:
        from conversion.shape_format_conversion import FormatConversionMain
        from dump_parse import big_dump_data
        from dump_parse.dump_utils import convert_dump_data
        from format_manager.format_manager import FormatManager
        from cmp_utils.constant.const_manager import ConstManager
        from cmp_utils.constant.compare_error import CompareError
    except Exception as exc:  # noqa: BLE001 - any import failure of the reference is a reason to skip
        sys.path.remove(str(root))
        pytest.skip(f"msaccucmp does not import here: {exc}")
    yield {"FormatConversionMain": FormatConversionMain, "big_dump_data": big_dump_data,
           "convert_dump_data": convert_dump_data, "FormatManager": FormatManager, "ConstManager": ConstManager,
           "CompareError": CompareError}
    sys.path.remove(str(root))


def _msaccucmp_parse(ref, path: Path):
    """msaccucmp's BigDumpDataParser on ``path``, its C protobuf step replaced by protobuf's JSON of the header."""
    from google.protobuf import json_format

    parser = ref["big_dump_data"].BigDumpDataParser(str(path))

    def to_json():
        raw = path.read_bytes()
        (length,) = struct.unpack_from("<Q", raw)
        msg = dd._dump_class()()
        msg.ParseFromString(raw[8:8 + length])
        parser.dump_json_data = json_format.MessageToDict(msg, preserving_proto_field_name=True,
                                                          use_integers_for_enums=True)

    parser._parse_dump_to_json = to_json
    return parser.parse()


def _msaccucmp_convert(ref, tensor, format_to: str):
    """``msaccucmp convert -f format_to`` on one tensor: the array it would save."""
    main = ref["FormatConversionMain"].__new__(ref["FormatConversionMain"])
    main.manager = ref["FormatManager"]("")
    main.manager.check_arguments_valid()
    main.attr = {"output_file_type": "npy"}
    main.one_file_info = None
    main.format_to = ref["ConstManager"].STRING_TO_FORMAT_MAP[format_to]
    saved = {}
    main._save_to_file = lambda output_format, array, *rest: saved.update(array=array, format=output_format)
    main._convert_format_for_one_tensor(tensor, 0, "output", "dump", "op")
    return saved["array"], saved["format"]


def _fields(stored: np.ndarray, fmt: str, original_shape, *, dtype_name=None) -> dict:
    name = dtype_name or str(stored.dtype)
    if name == "bfloat16":
        data = (np.ascontiguousarray(stored, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        data = np.ascontiguousarray(stored).tobytes()
    return {"data_type": dd.DATA_TYPE[name], "format": dd.FORMAT[fmt], "shape": list(stored.shape),
            "original_shape": list(original_shape), "size": len(data), "data": data}


def _padded(array: np.ndarray, fmt: str, fill: float) -> np.ndarray:
    """The device layout with ``fill`` (NaN, inf) in the padding, where the double writes zeros."""
    stored = dd.storage(array, fmt).copy()
    holds = dd.storage(np.ones(array.shape, np.float32), fmt).astype(bool)
    stored[~holds] = fill
    return stored


def _x(shape, dtype="float32", scale=3.0):
    if np.dtype(dtype).kind == "f":
        return (RNG.standard_normal(shape) * scale).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return RNG.random(shape) > 0.5
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)


def _case(array, fmt, format_to, *, dtype_name=None, fill=None):
    stored = _padded(array, fmt, fill) if fill is not None else dd.storage(array, fmt)
    return _fields(stored, fmt, array.shape, dtype_name=dtype_name), format_to, array


def _cases():
    cases = {}
    for c in (3, 8, 16, 17, 33, 64):
        cases[f"NC1HWC0 C={c} float32"] = _case(_x((2, c, 3, 5)), "NC1HWC0", "NCHW")
    cases["NC1HWC0 C=17 float16"] = _case(_x((1, 17, 4, 4), "float16"), "NC1HWC0", "NCHW")
    cases["NC1HWC0 C=40 int8 (C0 = 32)"] = _case(_x((2, 40, 3, 3), "int8"), "NC1HWC0", "NCHW")
    cases["NC1HWC0 C=17 bfloat16"] = _case(_x((1, 17, 2, 3)), "NC1HWC0", "NCHW", dtype_name="bfloat16")
    cases["NC1HWC0 C=17 NaN in the padding"] = _case(_x((1, 17, 2, 3)), "NC1HWC0", "NCHW", fill=np.nan)
    cases["NC1HWC0 C=33 inf in the padding"] = _case(_x((2, 33, 2, 2), "float16"), "NC1HWC0", "NCHW", fill=np.inf)
    cases["NDC1HWC0 C=20"] = _case(_x((1, 20, 2, 3, 3)), "NDC1HWC0", "NCDHW")
    cases["NDC1HWC0 C=20 NaN in the padding"] = _case(_x((2, 20, 2, 2, 3)), "NDC1HWC0", "NCDHW", fill=np.nan)
    cases["FRACTAL_Z 20x33x3x3 float16"] = _case(_x((20, 33, 3, 3), "float16"), "FRACTAL_Z", "NCHW")
    cases["FRACTAL_Z 16x16x1x1 float32"] = _case(_x((16, 16, 1, 1)), "FRACTAL_Z", "NCHW")
    cases["FRACTAL_Z 8x3x3x3 inf in the padding"] = _case(_x((8, 3, 3, 3)), "FRACTAL_Z", "NCHW", fill=-np.inf)
    cases["FRACTAL_NZ 20x33"] = _case(_x((20, 33)), "FRACTAL_NZ", "ND")
    cases["FRACTAL_NZ 1x20 float16"] = _case(_x((1, 20), "float16"), "FRACTAL_NZ", "ND")
    cases["FRACTAL_NZ batched 2x20x33"] = _case(_x((2, 20, 33)), "FRACTAL_NZ", "ND")
    cases["FRACTAL_NZ batched 3x5x17 NaN in the padding"] = _case(_x((3, 5, 17)), "FRACTAL_NZ", "ND", fill=np.nan)
    x = _x((2, 5, 3, 4))
    cases["NHWC, NCHW original"] = (_fields(x.transpose(0, 2, 3, 1), "NHWC", x.shape), "NCHW", x)
    w = _x((6, 5, 3, 2))
    cases["HWCN, NCHW original"] = (_fields(w.transpose(2, 3, 1, 0), "HWCN", w.shape), "NCHW", w)
    for dtype in ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "int64", "uint32",
                  "uint64", "bool"):
        cases[f"ND {dtype}"] = _case(_x((3, 7), dtype), "ND", "ND")
    cases["ND bfloat16"] = _case(_x((3, 7)), "ND", "ND", dtype_name="bfloat16")
    cases["ND 0-d"] = _case(np.array(2.5, np.float32), "ND", "ND")
    cases["NCHW 4-D"] = _case(_x((1, 3, 2, 2)), "NCHW", "NCHW")
    return cases


CASES = _cases()


def _bf16_bits(array):
    return (np.ascontiguousarray(array, dtype=np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)


def _write(tmp_path, name, raw):
    path = tmp_path / name
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_each_layout_converts_to_msaccucmps_bits(msaccucmp, tmp_path, case):
    fields, format_to, source = CASES[case]
    raw = dd.encode("op", [fields])
    theirs_record = msaccucmp["convert_dump_data"](_msaccucmp_parse(msaccucmp, _write(tmp_path, "Op.op.1.0.1700000000000001", raw)))
    theirs, _ = _msaccucmp_convert(msaccucmp, theirs_record.output_data[0], format_to)
    ours, reason = device_tensor(read_dump_bytes(raw).outputs[0])
    assert reason is None
    assert ours.shape == theirs.shape == source.shape
    # msaccucmp widens bfloat16 to float32 (dump_data_object.py:48-49), as we do
    assert ours.dtype == theirs.dtype
    assert ours.tobytes() == np.ascontiguousarray(theirs).tobytes()  # identical bits, NaN payloads included
    expected = _bf16_bits(source) if fields["data_type"] == dd.DATA_TYPE["bfloat16"] else source
    assert ours.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_an_empty_tensor_is_empty_on_both_sides(msaccucmp, tmp_path):
    raw = dd.encode("op", [dd.tensor_fields(np.zeros((0, 5), np.float32), "ND")])
    theirs_record = msaccucmp["convert_dump_data"](_msaccucmp_parse(msaccucmp, _write(tmp_path, "Op.op.1.0.1700000000000001", raw)))
    theirs, _ = _msaccucmp_convert(msaccucmp, theirs_record.output_data[0], "ND")
    ours, reason = device_tensor(read_dump_bytes(raw).outputs[0])
    # msaccucmp builds an empty tensor with np.array([]) (dump_data_object.py:38-39): float64, where we keep
    # the dumped dtype; no value differs, there being none
    assert reason is None and ours.shape == theirs.shape == (0, 5) and ours.size == theirs.size == 0
    assert ours.dtype == np.float32


def test_the_header_reads_as_msaccucmp_reads_it(msaccucmp, tmp_path):
    y = _x((1, 17, 2, 3))
    w = _x((20, 3, 3, 3), "float16")
    outputs = [dd.tensor_fields(y, "NC1HWC0", original_op=("relu8", 0)), dd.tensor_fields(_x((5, 20)), "FRACTAL_NZ")]
    inputs = [dd.tensor_fields(w, "FRACTAL_Z", sub_format=2)]
    raw = dd.encode("conv8", outputs, inputs, dump_time=1700000000123456, buffers=[b"\x07" * 16])
    theirs = _msaccucmp_parse(msaccucmp, _write(tmp_path, "Conv2D.conv8.1.0.1700000000000001", raw))
    ours = read_dump_bytes(raw)
    assert (ours.op_name, ours.version, ours.dump_time) == (theirs.op_name, theirs.version, int(theirs.dump_time))
    for mine, their in zip(ours.inputs + ours.outputs, list(theirs.input) + list(theirs.output)):
        assert (mine.data_type, mine.format, mine.shape, mine.original_shape, mine.size, mine.sub_format) == (
            their.data_type, their.format, their.shape.dim, their.original_shape.dim, int(their.size), their.sub_format)
        assert mine.data == their.data
    assert (ours.outputs[0].original_op.name, ours.outputs[0].original_op.output_index) == (
        theirs.output[0].original_op.name, theirs.output[0].original_op.output_index) == ("relu8", 0)
    assert ours.buffer_sizes == [int(b.size) for b in theirs.buffer] == [16] and theirs.buffer[0].data == b"\x07" * 16


def test_a_size_past_the_end_is_refused_by_both(msaccucmp, tmp_path):
    from ascendpipe.backends.ascend.dump_data import DumpFormatError

    raw = dd.encode("op", [dd.tensor_fields(_x((1, 16, 2, 2)), "NC1HWC0")])[:-4]
    with pytest.raises(msaccucmp["CompareError"]):
        _msaccucmp_parse(msaccucmp, _write(tmp_path, "Op.op.1.0.1700000000000001", raw))
    with pytest.raises(DumpFormatError, match=r"output\[0\]\.size"):
        read_dump_bytes(raw)


def test_a_group_conv_weight_msaccucmp_refuses_too(msaccucmp, tmp_path):
    w = _x((32, 8, 3, 3), "float16")
    raw = dd.encode("conv", [dd.tensor_fields(w, "FRACTAL_Z", sub_format=2)])
    record = msaccucmp["convert_dump_data"](_msaccucmp_parse(msaccucmp, _write(tmp_path, "Conv2D.conv.1.0.1700000000000001", raw)))
    # its FRACTAL_Z converters take no group argument: format_manager.py:110-116 fails them with one
    with pytest.raises(msaccucmp["CompareError"]):
        _msaccucmp_convert(msaccucmp, record.output_data[0], "NCHW")
    _, reason = device_tensor(read_dump_bytes(raw).outputs[0])
    assert reason.startswith("group conv")


def test_where_msaccucmp_refuses_and_we_are_right(msaccucmp, tmp_path):
    """An NHWC tensor with an NHWC original shape, and NC1HWC0 holding a [N, C] tensor: msaccucmp's convert
    does not hand back the golden's values in the golden's shape; ours does, checked against the source."""
    x = _x((2, 3, 4, 5))  # already NHWC: the original shape is channels-last too
    raw = dd.encode("op", [_fields(x, "NHWC", x.shape)])
    record = msaccucmp["convert_dump_data"](_msaccucmp_parse(msaccucmp, _write(tmp_path, "A.op.1.0.1700000000000001", raw)))
    theirs, _ = _msaccucmp_convert(msaccucmp, record.output_data[0], "NCHW")
    ours, reason = device_tensor(read_dump_bytes(raw).outputs[0])
    assert reason is None and ours.shape == x.shape and ours.tobytes() == x.tobytes()
    assert theirs.shape != x.shape  # moved to NCHW's axes: not the golden's layout

    nc = _x((2, 20))
    stored = dd.storage(nc.reshape(2, 20, 1, 1), "NC1HWC0")
    raw = dd.encode("op", [_fields(stored, "NC1HWC0", nc.shape)])
    record = msaccucmp["convert_dump_data"](_msaccucmp_parse(msaccucmp, _write(tmp_path, "B.op.1.0.1700000000000001", raw)))
    with pytest.raises(msaccucmp["CompareError"]):  # "Not supported from NC1HWC0 to ND" (format_manager.py:105-107)
        _msaccucmp_convert(msaccucmp, record.output_data[0], "ND")
    ours, reason = device_tensor(read_dump_bytes(raw).outputs[0])
    assert reason is None and ours.shape == nc.shape and ours.tobytes() == nc.tobytes()


def test_fractal_nz_with_two_batch_dims_same_values_msaccucmp_folds_the_batch(msaccucmp, tmp_path):
    """[2, 3, M, N]: msaccucmp's converter folds the batch dims into one (convert_FRACTAL_NZ_to_ND.py:34-39),
    its slice to the original shape then fails and it saves [6, M, N]: the same values, in another shape."""
    x = _x((2, 3, 5, 17))
    raw = dd.encode("op", [dd.tensor_fields(x, "FRACTAL_NZ")])
    record = msaccucmp["convert_dump_data"](_msaccucmp_parse(msaccucmp, _write(tmp_path, "C.op.1.0.1700000000000001", raw)))
    theirs, _ = _msaccucmp_convert(msaccucmp, record.output_data[0], "ND")
    ours, reason = device_tensor(read_dump_bytes(raw).outputs[0])
    assert reason is None and ours.shape == x.shape and ours.tobytes() == x.tobytes()
    assert theirs.shape == (6, 5, 17) and np.ascontiguousarray(theirs).tobytes() == ours.tobytes()
