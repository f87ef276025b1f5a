"""The device's reduced float formats besides fp16: bfloat16 and HF32, and saturation (pure numpy).

- **bfloat16**: fp32's exponent range, 7 explicit mantissa bits; fp32 -> bf16 rounds to nearest
  even (what ATC's vconv f32->bf16 and ``ml_dtypes`` do; tests hold this to ``ml_dtypes``).
- **HF32**: fp32's range, 11 explicit mantissa bits on Atlas A2/A3 (10 on Ascend 950): an fp32 cube
  input rounded in L0A/L0B before the multiply-add, the result written as fp32 (GE ``--allow_hf32``
  docs; Ascend C ``asc_enable_hf32`` / ``HF32.md``). Default rounding: nearest, ties to even
  (Ascend C ``SetHF32`` transMode 0).

Both are roundings of fp32 to fewer mantissa bits with fp32's exponent: ``round_mantissa`` does it
the way the emulated ONNX model does it (``rounding.py`` writes the same arithmetic as graph nodes,
because ONNX has no bit cast): the unit in the first place (Rump's ufp: ``|q - (1 - 2^-24) q|`` with
``q = (2^23 + 1) |x|``, exact in fp32), then ``(x + C) - C`` with ``C = 1.5 * 2^(23 - m) * ufp``,
whose fp32 addition rounds to nearest even on the ``2^-m * ufp`` grid. Subnormals keep fp32's
subnormal exponent (the grid ``2^(-126 - m)``, as dropping the low mantissa bits of the fp32 pattern
does); a value past the format's largest finite rounds to inf; inf and NaN pass unchanged.
"""

from __future__ import annotations

import numpy as np

FP16_MAX = 65504.0
FP32_MAX = float(np.finfo(np.float32).max)
BF16_MANTISSA = 7
from ascendpipe.precision.chips import HF32_MANTISSA  # noqa: E402 (11 on Atlas A2/A3; 10 on Ascend 950)


def format_max(fmt: str, mantissa: int | None = None) -> float:
    """The largest finite value of ``fmt`` ('float16', 'bfloat16', 'hf32', 'float32')."""
    if fmt == "float16":
        return FP16_MAX
    if fmt == "float32":
        return FP32_MAX
    bits = mantissa if mantissa is not None else (BF16_MANTISSA if fmt == "bfloat16" else HF32_MANTISSA)
    return float((2.0 - 2.0 ** -bits) * 2.0 ** 127)


def mantissa_bits(fmt: str, hf32_bits: int = HF32_MANTISSA) -> int:
    return BF16_MANTISSA if fmt == "bfloat16" else hf32_bits


# the constants of the ufp rounding (also the initializers rounding.py writes)
UFP_BIG = 2.0 ** 64  # above it the value is scaled down by 2^-32 first: (2^23 + 1) * |x| must not overflow
UFP_DOWN, UFP_UP = 2.0 ** -32, 2.0 ** 32
UFP_PHI = 2.0 ** 23 + 1
UFP_ONE_MINUS_U = 1.0 - 2.0 ** -24
FP32_MIN_NORMAL = 2.0 ** -126


def magic_factor(mantissa: int) -> float:
    """C / ufp(x): the constant whose fp32 ulp is the m-bit grid of x's binade."""
    return 1.5 * 2.0 ** (23 - mantissa)


def round_mantissa(values: np.ndarray, mantissa: int) -> np.ndarray:
    """fp32 ``values`` rounded to ``mantissa`` explicit bits (nearest even), fp32's exponent range."""
    f = np.float32
    x = np.asarray(values, dtype=np.float32)
    with np.errstate(all="ignore"):
        a = np.abs(x)
        big = a > f(UFP_BIG)
        xs = x * np.where(big, f(UFP_DOWN), f(1.0)).astype(np.float32)
        q = np.abs(xs) * f(UFP_PHI)
        ufp = np.maximum(np.abs(q - q * f(UFP_ONE_MINUS_U)), f(FP32_MIN_NORMAL))
        c = ufp * f(magic_factor(mantissa))
        y = ((xs + c) - c) * np.where(big, f(UFP_UP), f(1.0)).astype(np.float32)
        y = np.where(y == 0, x * f(0.0), y)  # a value rounded to 0 keeps its sign
        return np.where(a > f(FP32_MAX), x, y).astype(np.float32)


def round_bf16(values: np.ndarray) -> np.ndarray:
    """fp32 values as bf16 holds them (nearest even), returned as fp32."""
    return round_mantissa(values, BF16_MANTISSA)


def round_hf32(values: np.ndarray, mantissa: int = HF32_MANTISSA) -> np.ndarray:
    """fp32 values as the cube reads them in HF32 (nearest even), returned as fp32."""
    return round_mantissa(values, mantissa)


def round_to(values: np.ndarray, fmt: str, hf32_bits: int = HF32_MANTISSA) -> np.ndarray:
    """``values`` rounded to ``fmt`` ('float16', 'bfloat16', 'hf32'), as fp32."""
    if fmt == "float16":
        from ascendpipe.precision.fp16 import round_fp16

        return round_fp16(values)
    return round_mantissa(values, mantissa_bits(fmt, hf32_bits))


def saturate(values: np.ndarray, fmt: str, hf32_bits: int = HF32_MANTISSA) -> np.ndarray:
    """Saturation mode: NaN becomes 0 and anything past ``fmt``'s largest finite (inf too) its max."""
    x = np.asarray(values, dtype=np.float32)
    top = np.float32(format_max(fmt, mantissa_bits(fmt, hf32_bits) if fmt in ("bfloat16", "hf32") else None))
    return np.clip(np.where(np.isnan(x), np.float32(0.0), x), -top, top).astype(np.float32)
