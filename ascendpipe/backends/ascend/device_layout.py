"""A dumped tensor back in the golden's layout: the device's storage formats converted, padding sliced off.

Pure numpy. The device keeps each tensor in its storage format (CANN 900 ``atlasatc_16_0025`` item 8;
``aclFormat`` in the AscendCL API reference, the numbering the dump's ``format`` field carries); msaccucmp
converts the NPU side to the golden's format and slices the padding before comparing (mindstudio-probe
26.2.0 ``msprobe/msaccucmp/conversion/tensor_conversion.py:178-183, 255-295``). The layouts, as CANN
documents them (C0 read from the dumped shape, so fp16's 16 and int8's 32 both work):

- NC1HWC0 ``[N, C1, H, W, C0]``: element (n, c, h, w) at (n, c // C0, h, w, c % C0), C1 = ceil(C / C0);
- NDC1HWC0 ``[N, D, C1, H, W, C0]``: the same with a depth axis (NCDHW golden);
- FRACTAL_Z ``[C1*Kh*Kw, N1, N0, C0]`` (weights ``[Cout, Cin, Kh, Kw]``): (c1, kh, kw) major, then
  Cout in blocks of N0 (16), then Cin's C0;
- FRACTAL_NZ ``[..., N1, M1, M0, N0]`` (a matrix ``[..., M, N]``): column blocks of N0, row blocks of M0;
- NCHW / ND / NCDHW / NC: the golden's own order; NHWC / NDHWC / HWCN: a transpose, where the original
  shape says which way.

Anything else (FRACTAL_Z_3D, C04 weights, shapes that do not fit) gives a reason, ``device format X ...``: the
row then reads "not compared", never a number read in the wrong order. A group conv's weight (the dump's
``sub_format`` carries the group count, msaccucmp ``cmp_utils/common.py:103-113`` ``get_sub_format``) is laid
out per group; no CANN document gives that layout for reading back, and msaccucmp refuses it too (its
``FRACTAL_Z`` converters take no group: ``format_manager.py:110-116`` calls them with one and fails), so any
converted format with ``sub_format`` >= 2 reads "not compared (group conv)", even where the dumped shape would
also fit the plain layout.
"""

from __future__ import annotations

import math

import numpy as np

# the format field's values (aclFormat / GE's Format enum; the dump's OutputFormat uses the same numbers)
FORMATS = {0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 5: "NC1C0HWPAD", 6: "NHWC1C0",
           7: "FSR_NCHW", 8: "FRACTAL_DECONV", 9: "C1HWNC0", 10: "FRACTAL_DECONV_TRANSPOSE",
           11: "FRACTAL_DECONV_SP_STRIDE_TRANS", 12: "NC1HWC0_C04", 13: "FRACTAL_Z_C04", 14: "CHWN",
           15: "FRACTAL_DECONV_SP_STRIDE8_TRANS", 16: "HWCN", 17: "NC1KHKWHWC0", 18: "BN_WEIGHT",
           19: "FILTER_HWCK", 25: "C1HWNCoC0", 26: "MD", 27: "NDHWC", 28: "FRACTAL_ZZ", 29: "FRACTAL_NZ",
           30: "NCDHW", 31: "DHWCN", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D", 34: "CN", 35: "NC", 36: "DHWNC",
           37: "FRACTAL_Z_3D_TRANSPOSE", 38: "FRACTAL_ZN_LSTM", 39: "FRACTAL_Z_G", 47: "NCL"}
PLAIN = {"NCHW", "ND", "NCDHW", "NC", "NCL"}


def format_name(value: int) -> str:
    """GE keeps the sub-format and C0 in the upper bits; the primary format is the low byte
    (graphengine ``GetPrimaryFormat``: ``format & 0xff``)."""
    primary = value & 0xFF
    return FORMATS.get(primary, f"format {primary}")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def to_golden(flat: np.ndarray, fmt: int, shape: list[int], original: list[int],
              sub_format: int = 0) -> tuple[np.ndarray | None, str | None]:
    """(array in the original layout and shape, None), or (None, reason) where it cannot be laid out so.
    ``flat`` may run past the shape (a ``size`` rounded up): the shape's first values are the tensor, as
    msaccucmp reads them (``dump_parse/dump_data_object.py:41-47``)."""
    name = format_name(fmt)
    shape, original = [int(d) for d in shape], [int(d) for d in original]
    count = math.prod(shape)
    if flat.size < count:
        return None, f"device format {name}: {flat.size} values do not fill the dumped shape {shape}"
    stored = flat[:count].reshape(shape)
    groups = max(int(sub_format), (int(fmt) >> 8) & 0xFFFF)  # GE may also carry it in the format's upper bits
    if groups >= 2 and name not in PLAIN:
        return None, f"group conv: device format {name} with sub_format {groups} (groups)"
    convert = _CONVERTERS.get(name)
    if name in PLAIN or (convert is None and not original):
        if name not in PLAIN:
            return None, f"device format {name}"
        out = stored
    elif convert is None:
        return None, f"device format {name}"
    elif not original:
        return None, f"device format {name} without original_shape (the padding cannot be known)"
    else:
        out = convert(stored, original)
        if out is None:
            return None, f"device format {name}: dumped shape {shape} does not hold original shape {original}"
    if original and list(out.shape) != original:
        if out.size != math.prod(original):
            return None, f"device format {name}: dumped shape {shape} does not hold original shape {original}"
        out = out.reshape(original)
    return np.require(out, requirements="C"), None  # a 0-d tensor stays 0-d (ascontiguousarray makes it [1])


def _nc1hwc0(a: np.ndarray, original: list[int]) -> np.ndarray | None:
    if a.ndim != 5:
        return None
    n, c1, h, w, c0 = a.shape
    if len(original) == 4:
        on, c, oh, ow = original
    elif len(original) == 2 and h == w == 1:  # a [N, C] tensor stored 5HD with H = W = 1
        (on, c), oh, ow = original, 1, 1
    else:
        return None
    if (on, oh, ow) != (n, h, w) or _ceil(c, c0) != c1:
        return None
    return a.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :c]


def _ndc1hwc0(a: np.ndarray, original: list[int]) -> np.ndarray | None:
    if a.ndim != 6 or len(original) != 5:
        return None
    n, d, c1, h, w, c0 = a.shape
    on, c, od, oh, ow = original
    if (on, od, oh, ow) != (n, d, h, w) or _ceil(c, c0) != c1:
        return None
    return a.transpose(0, 2, 5, 1, 3, 4).reshape(n, c1 * c0, d, h, w)[:, :c]


def _fractal_z(a: np.ndarray, original: list[int]) -> np.ndarray | None:
    if a.ndim != 4 or len(original) != 4:
        return None
    c1hw, n1, n0, c0 = a.shape
    cout, cin, kh, kw = original
    c1 = _ceil(cin, c0)
    if c1 * kh * kw != c1hw or _ceil(cout, n0) != n1:
        return None  # e.g. a group conv's FRACTAL_Z, laid out per group
    blocks = a.reshape(c1, kh, kw, n1, n0, c0).transpose(3, 4, 0, 5, 1, 2)
    return blocks.reshape(n1 * n0, c1 * c0, kh, kw)[:cout, :cin]


def _fractal_nz(a: np.ndarray, original: list[int]) -> np.ndarray | None:
    matrix = original if len(original) >= 2 else [1] + original
    if a.ndim != len(matrix) + 2:
        return None
    *batch, n1, m1, m0, n0 = a.shape
    *obatch, m, n = matrix
    if list(batch) != list(obatch) or _ceil(m, m0) != m1 or _ceil(n, n0) != n1:
        return None
    k = len(batch)
    axes = list(range(k)) + [k + 1, k + 2, k, k + 3]
    return a.transpose(axes).reshape(*batch, m1 * m0, n1 * n0)[..., :m, :n]


def _channels_last(a: np.ndarray, original: list[int]) -> np.ndarray | None:
    """NHWC / NDHWC: as stored when the original shape is channels-last too, else to channels-first."""
    if list(a.shape) == original:
        return a
    moved = np.moveaxis(a, -1, 1)
    return moved if list(moved.shape) == original else None


def _hwcn(a: np.ndarray, original: list[int]) -> np.ndarray | None:
    if list(a.shape) == original:
        return a
    if a.ndim != 4:
        return None
    moved = a.transpose(3, 2, 0, 1)
    return moved if list(moved.shape) == original else None


_CONVERTERS = {"NC1HWC0": _nc1hwc0, "NC1HWC0_C04": _nc1hwc0, "NDC1HWC0": _ndc1hwc0, "FRACTAL_Z": _fractal_z,
               "FRACTAL_NZ": _fractal_nz, "NHWC": _channels_last, "NDHWC": _channels_last, "HWCN": _hwcn}

