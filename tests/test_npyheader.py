""".npy headers read without Python's compiler give numpy's own answer, and other headers still read."""

import ast
import io

import numpy as np
import pytest

from ascendpipe import npyheader
from ascendpipe.npyheader import read_array_header

ARRAYS = [
    np.float32(3.5).reshape(()),  # 0-d
    np.arange(5, dtype=np.float16),
    np.zeros((1, 16, 368, 368), np.float32),
    np.ones((2, 3), ">f8"),  # big-endian
    np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
    np.array([True, False]),
    np.array(["ab", "c"]),  # unicode '<U2'
    np.zeros((0, 4), np.uint8),
    np.zeros((7,) * 6, np.int8),
]


def _numpy_reader(data: bytes):
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return version, reader(stream), stream.tell()


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_numpy_written_headers_read_as_numpy_reads_them_without_compiling(array, version, monkeypatch):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version)
    data = buffer.getvalue()
    _, want, offset = _numpy_reader(data)

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled")

    monkeypatch.setattr(ast, "literal_eval", no_compile)  # numpy's reader uses it: ours must not
    stream = io.BytesIO(data)
    got = read_array_header(stream, np.lib.format.read_magic(stream))
    assert got == want and stream.tell() == offset
    assert all(type(d) is int for d in got[0])


def test_another_writers_header_and_a_structured_dtype_go_to_numpys_reader():
    spaced = "{'descr':'<f4','fortran_order':False,'shape':(2,3)}"  # valid, but not numpy's spacing
    header = spaced + " " * (64 - 10 - len(spaced) - 1) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(24)
    stream = io.BytesIO(data)
    assert read_array_header(stream, np.lib.format.read_magic(stream)) == ((2, 3), False, np.dtype("<f4"))
    assert stream.tell() == len(data) - 24
    buffer = io.BytesIO()
    structured = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])
    np.lib.format.write_array(buffer, structured)
    stream = io.BytesIO(buffer.getvalue())
    assert read_array_header(stream, np.lib.format.read_magic(stream)) == ((3,), False, structured.dtype)


def test_a_damaged_header_is_refused_as_numpy_refuses_it():
    data = b"\x93NUMPY\x01\x00" + (20).to_bytes(2, "little") + b"{'descr': '<f4', 'fo"
    stream = io.BytesIO(data)
    with pytest.raises(ValueError, match="Cannot parse header"):  # numpy's tokenizer raises TokenError here
        read_array_header(stream, np.lib.format.read_magic(stream))
    assert npyheader._NUMPY_READER.acquire(blocking=False)  # the lock was let go after the failure
    npyheader._NUMPY_READER.release()
