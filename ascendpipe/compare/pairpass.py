"""One pair of float16/float32 tensors, read block by block: msaccucmp's cells and the decision's sums together.

``msaccucmp.cells`` and ``metrics.tensor_metrics`` each read a pair in its own passes; the runner needs
both, so for a pair of float16/float32 tensors larger than a block this module computes both from the
same float32 blocks (``pair_pass``), in three passes that share every intermediate the two want:

- pass A: msaccucmp's float32 sums (t*t, g*g, (t-g)^2, |t-g|, the relative error) and extremes; the
  decision's float64 sums of g, t, g*g, t*t, (t-g)^2 (sum g*t follows from them: ``_Pair.metrics``),
  its softmax sums and fp16's rounding error of the golden;
- pass B (needs pass A's norms, extremes and RMS): msaccucmp's cosine and min-max pdf sums (a pair up
  to PDF_WHOLE elements keeps its pdfs for pass C); the decision's significant relative error;
- pass C (needs pass B's pdf sums): msaccucmp's KL.

msaccucmp's cells are exact: every element gets the operations ``msaccucmp`` performs, in the same
dtype, and each sum is numpy's pairwise sum rebuilt from the blocks' (``numpy_sums``), so the text is
the same (tests/compare/test_msaccucmp_blocked.py, test_pairpass.py). Some are done with cheaper
operations proven to give the same bits or the same text:
- the mask |g| > 2^-52 is compared in float32 (2^-52 is a float32 value: one answer in either dtype),
  and where(mask, r, 0) is r * mask over quotients t / (g + (|g| <= 2^-52)), all finite (r >= 0: the
  same +0.0 or r; a block holding inf or NaN is redone with where);
- np.mean and np.std (StandardDeviation, ``"%.3f"``) come from the decision's float64 sums when an
  error bound proves the same text (``mean_std_text``); else numpy's buffered sum (``_BufferedSum``)
  and (x - mean)^2 are summed as numpy does, in passes of their own.

The decision's values (``metrics``' formulas) take float64 sums of float64 products of the exact
float32 values as ``metrics`` does, except three, each from float32 elements with a relative error of
at most 2^-24 and float32 sums within a block: fp16's rounding error of the golden (its Veltkamp
split is exact in float32; its square rounds), the significant elements' relative error |t - g| / |g|,
and the softmax's exponentials (float32 in ``metrics`` too). msit's own absolute and relative errors
are not computed (``NOT_COMPUTED``): the runner reads msaccucmp's cells for those. None moves a
decision (tests/compare/test_pairpass.py compares every value with ``tensor_metrics``).

A float16 side up to WIDEN_WHOLE elements is widened once into a per-thread array, a larger one
block by block; so a pair costs its two source arrays (memory maps, whose pages the runner may hand
back as a pass moves on: ``drop``), a few blocks of scratch and the arrays kept per thread.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ascendpipe.compare import metrics as M
from ascendpipe.compare import msaccucmp_text as C
from ascendpipe.compare import numpy_sums

F32, F64 = np.float32, np.float64
DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
_ONE = F32(1.0)
_MSACCUCMP_EPS = F32(C.EPS)  # 2^-52 is a float32: |g| > it in float32 is |g| > EPS in float64
_METRICS_EPS = F32(M.EPS)  # float32's eps
_SPLIT = F32(2**13 + 1)  # Veltkamp in float32: x * (2^(24-11) + 1) splits off the leading 11 bits
_FP16_MAX = F32(M.FP16_MAX)
_MIN_NORMAL = F32(2.0**-14)  # fp16's smallest normal (mechanism.FP16_MIN_NORMAL)
# elements per block (numpy_sums' leaves up to this size; msaccucmp.cells passes its own): larger
# blocks than msaccucmp's 64Ki run from L2 less but make fewer numpy calls (~70 per block and pass
# set); measured on the 736 detector's dumps, 256Ki is 10% faster than 64Ki single-threaded (1.72 -> 1.54 s)
# and 30% on two threads (1.62 -> 1.11 s)
BLOCK = 1 << 18
PDF_WHOLE = 1 << 21  # elements: a pair up to this size keeps msaccucmp's two pdfs (16 MB) for its KL pass
WIDEN_WHOLE = 1 << 23  # elements: a float16 side up to 32 MB as float32 is widened once, a larger one per block


def supported(golden: np.ndarray, target: np.ndarray) -> bool:
    return golden.dtype in DTYPES and target.dtype in DTYPES and golden.size == target.size


class _Work:
    """Per-thread scratch blocks: float32 x6, float64 x4, bool x2, and constant blocks: np.maximum with
    a scalar runs a scalar loop (measured 0.68 ns per element, 0.23 with an array of the same value)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.f32 = [np.empty(size, F32) for _ in range(6)]
        self.f64 = [np.empty(size, F64) for _ in range(4)]
        self.masks = [np.empty(size, bool) for _ in range(2)]
        self.kl_floor = np.full(size, C.KL_FLOOR, F32)
        self.floor = np.empty(size, F32)


_LOCAL = threading.local()


def release() -> None:
    """Drop this thread's kept arrays (widened sides, pdfs, scratch): a compare ends with them."""
    for name in ("wide", "work"):
        if hasattr(_LOCAL, name):
            delattr(_LOCAL, name)


def _wide(side: str, n: int) -> np.ndarray:
    """This thread's float32 array for a widened ``side``, at least ``n`` long (grown, never shrunk)."""
    arrays = getattr(_LOCAL, "wide", None)
    if arrays is None:
        arrays = _LOCAL.wide = {}
    if side not in arrays or arrays[side].size < n:
        arrays[side] = None  # the old one goes first
        arrays[side] = np.empty(n, F32)
    return arrays[side][:n]


def _work(size: int) -> _Work:
    work = getattr(_LOCAL, "work", None)
    if work is None or work.size < size:
        work = _LOCAL.work = _Work(size)
    return work


class _BufferedSum:
    """``np.add.reduce(x, dtype=float64)`` of a float32 array fed in consecutive pieces, with the same
    bits: numpy casts such a reduction through buffers of ``np.getbufsize()`` elements and adds each
    buffer's pairwise sum to the running total in order (measured; tests/compare/test_pairpass.py)."""

    def __init__(self) -> None:
        self.size = np.getbufsize()
        self.total = F64(0.0)
        self.carry = np.empty(self.size, F64)
        self.filled = 0

    def feed(self, x: np.ndarray) -> None:
        """``x``: the next piece, float32 or its exact float64 copy."""
        i, n = 0, x.size
        if self.filled:
            take = min(self.size - self.filled, n)
            self.carry[self.filled : self.filled + take] = x[:take]
            self.filled += take
            i = take
            if self.filled == self.size:
                self.total = self.total + np.add.reduce(self.carry, dtype=F64)
                self.filled = 0
        while n - i >= self.size:
            self.total = self.total + np.add.reduce(x[i : i + self.size], dtype=F64)
            i += self.size
        if i < n:
            self.carry[: n - i] = x[i:]
            self.filled = n - i

    def result(self) -> np.float64:
        if self.filled:
            self.total = self.total + np.add.reduce(self.carry[: self.filled], dtype=F64)
            self.filled = 0
        return self.total


_HALF_BITS = np.int32(0x8FFFE000 - (1 << 32))  # a float16's sign, shifted 13 up, and its 15 other bits
_HALF_SCALE = F32(2.0**112)  # 2^(127 - 15): a float16 exponent's bias to float32's


def widen_into(half: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``half`` (float16) as float32 into ``out``: the same values as numpy's cast, ~4x faster (numpy's
    float16 cast is a scalar loop). The float16 bits, sign-extended to 32 and shifted 13 up, are a
    float32 2^112 times too small whose mantissa and exponent are the float16's (subnormals included,
    as float32 holds them as normals); the product by 2^112 is exact. inf and NaN come out >= 2^16 and
    are cast by numpy instead (every float16 is checked in tests/compare/test_pairpass.py)."""
    if half.shape != out.shape:
        # a 0-d tensor made contiguous comes as shape (1,): the mask below is taken on ``out``, so
        # both must have one shape (a (1,) ``half`` under a 0-d mask is (1, 1): numpy refuses it)
        half = half.reshape(out.shape)
    bits = out.view(np.int32)
    np.copyto(bits, half.view(np.int16))  # sign-extends: the sign lands on bit 31 after the shift
    np.left_shift(bits, 13, out=bits)
    np.bitwise_and(bits, _HALF_BITS, out=bits)
    np.multiply(out, _HALF_SCALE, out=out)
    if out.size and (out.max() >= 65536 or out.min() <= -65536):
        np.copyto(out, half, where=np.abs(out) >= 65536)
    return out


def _f64_sum(x: np.ndarray, w64: np.ndarray) -> float:
    """sum(x) of a float32 block in float64, by numpy's pairwise sum (``w64``: float64 scratch)."""
    np.copyto(w64, x)
    return float(np.add.reduce(w64))


class _Pair:
    def __init__(self, golden: np.ndarray, target: np.ndarray, decision: bool, block: int, drop=None) -> None:
        self.block = block
        # plain arrays (a memory map's slices are Python-level subclasses: ~10 us each)
        self.g_src, self.t_src = np.asarray(golden).reshape(-1), np.asarray(target).reshape(-1)
        self.n = self.t_src.size
        self.spans = numpy_sums.leaves(self.n, block)
        self.decision = decision
        self.drop = drop
        self.counts = dict.fromkeys(M._COUNT_KEYS, 0)
        self.flushed = 0
        # a float16 side small enough is widened once (each pass reads it again), into a per-thread
        # array kept for the next pair (its pages are touched once); a larger one block by block
        for side in ("t_src", "g_src"):
            source = getattr(self, side)
            if source.dtype != F32 and self.n <= WIDEN_WHOLE:
                setattr(self, side, widen_into(source, _wide(side, self.n)))

    def blocks(self):
        """(t, g, work, n) per span: float32 views of the sources (or widened into scratch)."""
        w = _work(max(b - a for a, b in self.spans))
        for start, stop in self.spans:
            n = stop - start
            t, g = self.t_src[start:stop], self.g_src[start:stop]
            if t.dtype != F32:
                t = widen_into(t, w.f32[4][:n])
            if g.dtype != F32:
                g = widen_into(g, w.f32[5][:n])
            yield t, g, w, n
            if self.drop is not None:
                self.drop(start, stop)

    # --- pass A ------------------------------------------------------------------------------------
    def pass_a(self) -> None:
        s = self.s = {k: [] for k in ("tt", "gg", "sq", "abs", "rel")}
        self.hi = dict.fromkeys(("abs", "rel", "t_hi", "g_hi"))
        self.lo = dict.fromkeys(("t_lo", "g_lo"))
        # msaccucmp's means are numpy's buffered float64 sums: emulated without the decision; with it,
        # the decision's pairwise sums prove their text (see mean_std_cells), as a rule
        self.sums = None if self.decision else (_BufferedSum(), _BufferedSum())
        d = self.d = M._Sums()
        add = np.add.reduce
        for t, g, w, n in self.blocks():
            x, diff, ad, rel = (a[:n] for a in w.f32[:4])
            g64, t64, d64, w64 = (a[:n] for a in w.f64)
            mask, mask2 = (a[:n] for a in w.masks)
            t_hi, t_lo, g_hi, g_lo = t.max(), t.min(), g.max(), g.min()
            self.hi["t_hi"], self.lo["t_lo"] = C.nan_max(self.hi["t_hi"], t_hi), C.nan_min(self.lo["t_lo"], t_lo)
            self.hi["g_hi"], self.lo["g_lo"] = C.nan_max(self.hi["g_hi"], g_hi), C.nan_min(self.lo["g_lo"], g_lo)
            if not (math.isfinite(t_hi) and math.isfinite(t_lo) and math.isfinite(g_hi) and math.isfinite(g_lo)):
                self._count_nonfinite(t, g)
            np.multiply(t, t, out=x)
            s["tt"].append(add(x))
            np.multiply(g, g, out=x)
            s["gg"].append(add(x))
            np.subtract(t, g, out=diff)
            np.multiply(diff, diff, out=x)
            s["sq"].append(add(x))
            np.abs(diff, out=ad)
            s["abs"].append(add(ad))
            self.hi["abs"] = C.nan_max(self.hi["abs"], ad.max())
            # msaccucmp's where(|g| > EPS, |t/g - 1|, 0) as |t/g' - 1| * mask, g' = g + (|g| <= EPS): g
            # itself where the mask holds, 1 elsewhere (never 0, so every quotient of finite values is
            # finite and the product is +0.0 there, as where() gives)
            np.abs(g, out=x)  # x = |g| from here on
            np.less_equal(x, _MSACCUCMP_EPS, out=mask)
            masked = bool(mask.any())  # else (no zero golden in the block) the quotients need no mask
            if masked:
                np.add(g, mask, out=rel)
            np.divide(t, rel if masked else g, out=rel)
            np.subtract(rel, _ONE, out=rel)
            np.abs(rel, out=rel)
            if masked:
                np.logical_not(mask, out=mask)
                np.multiply(rel, mask, out=rel)
            part = add(rel)
            if not np.isfinite(part):  # an inf or NaN in the block (or a quotient beyond float32): where()
                np.greater(x, _MSACCUCMP_EPS, out=mask)  # a NaN golden: False, as in msaccucmp
                rel[...] = np.where(mask, np.abs(t / g - 1), 0)
                part = add(rel)
            s["rel"].append(part)
            self.hi["rel"] = C.nan_max(self.hi["rel"], rel.max())
            zero = np.equal(t, 0, out=mask2)
            if zero.any():  # fp16's flush: golden values below fp16's normal range that the target holds as 0
                np.less(x, _MIN_NORMAL, out=mask)
                mask &= zero
                mask &= g != 0
                self.flushed += int(np.count_nonzero(mask))
            if self.sums is not None:
                self.sums[0].feed(t)
                self.sums[1].feed(g)
            if not self.decision:
                continue
            np.copyto(g64, g)
            np.copyto(t64, t)
            d.t_sum += float(add(t64))
            d.g_sum += float(add(g64))
            d.gg += float(add(np.multiply(g64, g64, out=w64)))
            d.tt += float(add(np.multiply(t64, t64, out=w64)))
            np.subtract(t64, g64, out=d64)
            d.dd += float(add(np.multiply(d64, d64, out=w64)))
            self._softmax(t, g, d64, float(t_hi), float(g_hi), ad, w64)
            self._fp16_floor(g, g_hi, g_lo, diff, rel)
        d.n = self.n

    def _softmax(self, t, g, d64, t_hi: float, g_hi: float, p, w64) -> None:
        """The softmax sums for KL relative to running maxima (``metrics._Sums._add_softmax``); ``d64``: t - g."""
        d = self.d
        if g_hi > d.g_max:  # rescale what was summed relative to the old maximum
            scale = math.exp(d.g_max - g_hi) if d.g_max > -math.inf else 0.0
            d.zg *= scale
            d.kl_weighted *= scale
            d.g_max = g_hi
        if t_hi > d.t_max:
            d.zt *= math.exp(d.t_max - t_hi) if d.t_max > -math.inf else 0.0
            d.t_max = t_hi
        np.subtract(g, F32(d.g_max), out=p)
        np.exp(p, out=p)
        d.zg += _f64_sum(p, w64)
        np.multiply(w64, d64, out=w64)  # float64 products e^(g - g_max) (t - g)
        d.kl_weighted -= float(np.add.reduce(w64))
        np.subtract(t, F32(d.t_max), out=p)
        np.exp(p, out=p)
        d.zt += _f64_sum(p, w64)

    def _fp16_floor(self, g, g_hi, g_lo, a, b) -> None:
        """sum of (g rounded to fp16's 11 bits - g)^2: a float32 Veltkamp split (exact), its square rounded."""
        x = g
        if g_hi > _FP16_MAX or g_lo < -_FP16_MAX:
            x = np.clip(g, -_FP16_MAX, _FP16_MAX, out=a)
        np.multiply(x, _SPLIT, out=b)
        np.subtract(b, x, out=a)
        np.subtract(b, a, out=b)  # b = x rounded to 11 significant bits
        np.subtract(b, g, out=a)
        np.multiply(a, a, out=a)
        self.d.fp16_dd += float(np.add.reduce(a))  # float32 within a block: a floor estimate, read with a factor 2

    def _count_nonfinite(self, t, g) -> None:
        c = self.counts
        g_ok, t_ok = np.isfinite(g), np.isfinite(t)
        c["golden_nan"] += int(np.isnan(g).sum())
        c["golden_inf"] += int(np.isinf(g).sum())
        c["target_nan"] += int(np.isnan(t).sum())
        c["target_inf"] += int(np.isinf(t).sum())
        c["nonfinite_mismatch"] += int((g_ok & ~t_ok).sum())
        self.decision = False  # msit computes no metric for a pair holding inf/NaN (metrics)

    def _dot(self) -> float:
        """sum g*t in float64, in a pass of its own."""
        total = 0.0
        for t, g, w, n in self.blocks():
            g64, t64 = w.f64[0][:n], w.f64[1][:n]
            np.copyto(g64, g)
            np.copyto(t64, t)
            total += float(np.add.reduce(np.multiply(g64, t64, out=g64)))
        return total

    def _exact_sums(self) -> None:
        """numpy's buffered float64 sum of each side (np.mean's), in a pass of its own."""
        self.sums = (_BufferedSum(), _BufferedSum())
        for t, g, _, _ in self.blocks():
            self.sums[0].feed(t)
            self.sums[1].feed(g)

    # --- pass B ------------------------------------------------------------------------------------
    def pass_b(self) -> None:
        n, count = self.n, np.intp(self.n)
        total = self.total
        self.t_norm = np.sqrt(np.array([total(self.s["tt"])], F32))
        self.g_norm = np.sqrt(np.array([total(self.s["gg"])], F32))
        t_lo, g_lo = self.lo["t_lo"], self.lo["g_lo"]
        t_spread, g_spread = self.hi["t_hi"] - t_lo, self.hi["g_hi"] - g_lo
        self.t_spread, self.g_spread = t_spread, g_spread
        s = self.s
        for k in ("cos", "pt", "pg", "t_var", "g_var"):
            s[k] = []
        d = self.d
        # msaccucmp's standard deviations: from the decision's exact sums where that proves the text
        # (mean_std_text), else summed here as np.mean and np.std do
        self.std, self.means = {}, None
        if self.decision:
            self.std = {"t": mean_std_text(d.tt, d.t_sum, n), "g": mean_std_text(d.gg, d.g_sum, n)}
        if None in self.std.values() or self.sums is None and not self.std:
            self._exact_sums()
        if self.sums is not None:  # np.mean's float64: its buffered sum / the count
            self.means = []
            for acc in self.sums:
                mean = np.array([acc.result()], F64)
                np.true_divide(mean, count, out=mean, casting="unsafe")
                self.means.append(mean)
        if self.decision:
            floor = max(M.SIGNIFICANT_FRACTION * math.sqrt(d.gg / n), math.nextafter(M.EPS, math.inf))
            floor32 = F32(floor)
            if floor32 < floor:  # the smallest float32 >= floor: |g| >= it in float32 is |g| >= floor
                floor32 = np.nextafter(floor32, F32(np.inf))
        variances = [(side, mean, key) for side, mean, key in zip("tg", self.means or (None, None), ("t_var", "g_var"))
                     if self.std.get(side) is None]
        add = np.add.reduce
        filled = False
        # a pair small enough keeps its pdfs for pass C (per-thread arrays), a larger one computes them again
        pdfs = self.pdfs = (_wide("pt", self.n), _wide("pg", self.n)) if self.n <= PDF_WHOLE else None
        offset = 0
        for t, g, w, n in self.blocks():
            x, y = w.f32[0][:n], w.f32[1][:n]
            w64 = w.f64[0][:n]
            if self.decision and not filled:
                w.floor.fill(floor32)
                filled = True
            np.divide(t, self.t_norm, out=x)
            np.divide(g, self.g_norm, out=y)
            np.multiply(x, y, out=x)
            s["cos"].append(add(x))
            pt, pg = (x, x) if pdfs is None else (pdfs[0][offset : offset + n], pdfs[1][offset : offset + n])
            offset += n
            s["pt"].append(add(self._pdf(t, t_lo, t_spread, pt, w.kl_floor)))
            s["pg"].append(add(self._pdf(g, g_lo, g_spread, pg, w.kl_floor)))
            for side, mean, key in variances:
                np.subtract(t if side == "t" else g, mean, out=w64)  # float64, as np.std's arr - arrmean
                np.square(w64, out=w64)
                s[key].append(add(w64))
            if not self.decision:
                continue
            # the significant elements' relative error |t - g| / |g|, |g| >= floor: the divisor is
            # max(|g|, floor), so no quotient is inf or NaN, and the mask zeroes the others
            mask = w.masks[0][:n]
            np.subtract(t, g, out=y)
            np.abs(y, out=y)
            np.abs(g, out=x)
            np.greater_equal(x, floor32, out=mask)
            np.maximum(x, w.floor[:n], out=x)
            np.divide(y, x, out=y)
            np.multiply(y, mask, out=y)
            d.significant_rel += float(np.add.reduce(y))  # float32 within a block: 1e-6 of a mean, compared with 1.0
            d.significant += int(np.count_nonzero(mask))

    @staticmethod
    def _pdf(x, low, spread, out, kl_floor):
        """msaccucmp's min-max normalised pdf of one block (``msaccucmp._kl_pdf``); ``kl_floor``: a
        block of its floor (float32's eps)."""
        if spread != 0:
            np.subtract(x, low, out=out)
            np.divide(out, spread, out=out)
        else:
            np.copyto(out, x)
        np.maximum(out, kl_floor[: out.size], out=out)
        return out

    # --- pass C ------------------------------------------------------------------------------------
    def pass_c(self) -> F32:
        pt_total, pg_total = self.total(self.s["pt"]), self.total(self.s["pg"])
        parts = []
        t_lo, g_lo = self.lo["t_lo"], self.lo["g_lo"]
        if self.pdfs is not None:
            blocks = ((self.pdfs[0][a:b], self.pdfs[1][a:b]) for a, b in self.spans)
        else:
            blocks = ((self._pdf(t, t_lo, self.t_spread, w.f32[0][:n], w.kl_floor),
                       self._pdf(g, g_lo, self.g_spread, w.f32[1][:n], w.kl_floor)) for t, g, w, n in self.blocks())
        for pt, pg in blocks:
            np.divide(pt, pt_total, out=pt)
            np.divide(pg, pg_total, out=pg)
            np.divide(pt, pg, out=pg)
            np.log(pg, out=pg)
            np.multiply(pt, pg, out=pg)
            parts.append(np.add.reduce(pg))
        return self.total(parts)

    def total(self, parts, dtype=F32):
        return numpy_sums.combine(self.n, self.block, parts, dtype)

    # --- results -----------------------------------------------------------------------------------
    def cells(self, t_file: str, g_file: str) -> dict[str, tuple[str, str]]:
        """msaccucmp's cells, as ``msaccucmp.cells`` formats them."""
        count = np.intp(self.n)
        s, total = self.s, self.total
        results: dict[str, tuple[str, str]] = {}
        results["CosineSimilarity"] = C.cosine_cell(self.t_norm, self.g_norm, lambda: total(s["cos"]), t_file, g_file)
        # msaccucmp's "all zero" test of each pdf cannot hold: the pdf is floored at float32's eps
        # (alg_KullbackLeiblerDivergence.py:42), so only an empty tensor passes it, and this one is not
        results["KullbackLeiblerDivergence"] = C.kl_cell(np.bool_(False), np.bool_(False), self.pass_c, t_file, g_file)
        parts = []
        for k, (side, key) in enumerate((("t", "t_var"), ("g", "g_var"))):
            proved = self.std.get(side)
            if proved is not None:
                parts += list(proved)
            else:
                parts += [F64(self.means[k][0]), F64(np.sqrt(F64(total(s[key], F64) / count)))]
        results["StandardDeviation"] = C.std_cell(parts)

        def mean_of(parts):  # np.mean of a float32 array: its float32 sum / the count, as float32
            return F32(total(parts) / count)

        results["MaxAbsoluteError"] = C.fmt(self.hi["abs"]), ""
        results["MeanAbsoluteError"] = C.fmt(mean_of(s["abs"])), ""
        squared = total(s["sq"])
        results["RelativeEuclideanDistance"] = C.red_cell(total(s["gg"]), lambda: squared)
        results["RootMeanSquareError"] = C.fmt(np.sqrt(mean_of(s["sq"]))), ""
        results["AccumulatedRelativeError"] = C.fmt(total(s["rel"])), ""
        results["MaxRelativeError"] = C.fmt(self.hi["rel"]), ""
        results["MeanRelativeError"] = C.fmt(mean_of(s["rel"])), ""
        return results

    def metrics(self) -> dict:
        """``metrics.tensor_metrics``' dict for the pair, less msit's absolute and relative errors
        (NOT_COMPUTED: the runner reads msaccucmp's cells for those)."""
        result = M._with_fail_reason(dict(self.counts))
        if not self.decision:
            return M._not_compared(result)
        d = self.d
        # sum g*t from the three sums of squares, one product pass less: 2 sum(g t) = sum g^2 + sum t^2 -
        # sum (t - g)^2, within ~u (sum g^2 + sum t^2 + sum (t - g)^2) (u = 2^-53): a few ulps of the
        # cosine while the norms are alike; where they are not (a target scaled far off), summed directly
        d.gt = (d.gg + d.tt - d.dd) / 2
        scale = math.sqrt(d.gg) * math.sqrt(d.tt)
        if scale > 0 and (d.gg + d.tt + d.dd) * _UNIT > 1e-13 * scale:
            d.gt = self._dot()
        d.all_zero = d.gg == 0.0 and d.tt == 0.0  # exact float64 squares of float32 values: 0 only for zeros
        result = M._finish(result, d)
        for key in NOT_COMPUTED:
            del result[key]
        return result


NOT_COMPUTED = ("max_abs_error", "mean_abs_error", "max_rel_error", "mean_rel_error", "accumulated_rel_error")
_UNIT = 2.0**-53


def mean_std_text(squares: float, total: float, n: int) -> tuple[F64, F64] | None:
    """(mean, std) giving the text of np.mean(x, dtype=float64) and np.std(x, dtype=float64) in
    msaccucmp's StandardDeviation cell (``"%.3f"``, below 0.001 written as 0), from sum(x^2) and
    sum(x) in float64; None when the sums cannot prove the text (the caller then sums as numpy does).

    numpy's mean is its buffered float64 sum / n; np.std sums (x_i - m)^2 pairwise, m that mean.
    Ours are sum(x) / n and E[x^2] - mean^2 from sums added in another order. Each is the exact value
    within K u E[x^2] (variance) or K u sqrt(E[x^2]) (mean), u = 2^-53, where K bounds the roundings a
    sum accumulates: numpy's pairwise depth (< 64), blocks added in order (n / 32768), 8192-element
    buffers (n / 8192), and the few operations after; E[x^2] bounds V, mean^2 and numpy's (m - mean)^2
    alike. So numpy's value lies within our value +- B (B: 8x those bounds, for the variance under a
    square root); the text is a monotonic function of the value, so when both ends of that interval
    give the same text, numpy's value gives it too."""
    if not (math.isfinite(squares) and math.isfinite(total)) or n <= 0:
        return None
    mean = total / n
    power = squares / n
    k = 8.0 * (64 + n / 4096) * _UNIT
    var = max(power - mean * mean, 0.0)
    var_bound = k * power
    low = math.sqrt(max(var - var_bound, 0.0)) * (1 - 4 * _UNIT)
    high = math.sqrt(var + var_bound) * (1 + 4 * _UNIT)
    mean_bound = k * math.sqrt(power) + 4 * _UNIT * abs(mean)
    if (C.std_cell([low] * 4) != C.std_cell([high] * 4)
            or C.std_cell([mean - mean_bound] * 4) != C.std_cell([mean + mean_bound] * 4)):
        return None
    return F64(mean), F64(math.sqrt(var))


def pair_pass(golden: np.ndarray, target: np.ndarray, *, decision: bool = True, target_file: str = "",
              golden_file: str = "", block: int = BLOCK, drop=None) -> tuple[dict[str, str], list[str], dict | None, int]:
    """(msaccucmp's cells, their messages, ``tensor_metrics``' dict (less ``NOT_COMPUTED``) or None,
    flushed) for a same-size pair of float16/float32 tensors of more than ``block`` elements (``msaccucmp.BLOCK``)
    (any shape; flattened). ``flushed``: golden values below fp16's normal range, nonzero, that the
    target holds as 0. ``drop(start, stop)``: called after each block's elements are read in a pass
    (a memory map hands those pages back)."""
    pair = _Pair(golden, target, decision, block, drop)
    with np.errstate(all="ignore"):
        pair.pass_a()
        pair.pass_b()
        results = pair.cells(target_file, golden_file)
        metrics = pair.metrics() if decision else None
    cells = {name: results[name][0] for name in C.ALGORITHMS}
    messages = [results[name][1] for name in C.ALGORITHMS if results[name][1]]
    return cells, messages, metrics, pair.flushed
