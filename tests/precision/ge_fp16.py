"""An independent port of GE's host fp32 -> fp16 conversion, bit by bit, as an oracle for
``ascendpipe.precision.fp16.host_fp16`` (which uses numpy's cast and masks instead).

hicann/ge ffdcbc9f ``base/common/fp16_t/fp16_t.cc``: ``TagFp16::operator=(const float32_t)``
L723-779, ``Fp16IsRoundOne`` L33-48, ``Fp16NormalizeVal`` L54-65. Typed in from the C++ here, per
element, with the same integer steps.
"""

from __future__ import annotations

import struct

import numpy as np


def _round_one(man: int, trunc_len: int) -> bool:
    shift_out = trunc_len - 2
    mask0, mask1 = 0x4 << shift_out, 0x2 << shift_out
    mask2 = mask1 - 1
    last_bit, trunc_high, trunc_left = bool(man & mask0), bool(man & mask1), bool(man & mask2)
    return trunc_high and (trunc_left or last_bit)


def ge_fp16_bits(value: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", np.float32(value)))[0]
    s_ret = (bits & 0x80000000) >> 31
    e_f = (bits & 0x7F800000) >> 23
    m_f = bits & 0x007FFFFF
    if e_f > 0x8F:
        e_ret, m_ret = 0x1F - 1, 0x3FF
    elif e_f <= 0x70:
        e_ret = 0
        if e_f >= 0x67:
            m_f |= 0x800000
            m_tmp = m_f << (e_f - 0x67)
            m_ret = (m_tmp >> 23) + (1 if _round_one(m_tmp, 23) else 0)
        elif e_f == 0x66 and m_f > 0:
            m_ret = 1
        else:
            m_ret = 0
    else:
        e_ret = e_f - 0x70
        m_ret = (m_f >> 13) + (1 if _round_one(m_f, 13) else 0)
        if m_ret & 0x400:
            e_ret += 1
    if e_ret >= 0x1F:  # Fp16NormalizeVal
        e_ret, m_ret = 0x1F, 0x3FF
    elif e_ret == 0 and m_ret == 0x400:
        e_ret, m_ret = 1, 0
    return (s_ret << 15) | (e_ret << 10) | (m_ret & 0x3FF)


def ge_fp16(values) -> np.ndarray:
    flat = np.asarray(values, np.float32).reshape(-1)
    out = np.array([ge_fp16_bits(v) for v in flat], np.uint16).view(np.float16).astype(np.float32)
    return out.reshape(np.shape(values))
