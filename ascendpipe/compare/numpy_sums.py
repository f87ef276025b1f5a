"""numpy's float sums, computed block by block with the same bits as one call over the whole array.

Why: msaccucmp's cells (``compare/msaccucmp.py``) must be the text msaccucmp writes, so their sums
must be numpy's, bit for bit; but evaluating each formula over whole tensors makes a full-size
temporary per operation (memory) and runs every operation from main memory (time). Blocks that fit
the CPU cache fix both, if their partial sums combine exactly as numpy combines them.

How numpy sums (numpy ``_core/src/umath/loops_utils.h.src``, ``pairwise_sum``): a contiguous float
array reduced without a cast is summed pairwise over the whole array in one inner-loop call: below 8
elements sequentially, up to 128 with eight accumulators, above that split at ``n2 = n // 2`` rounded
down to a multiple of 8, each half summed the same way and the two results added. So every node of
that recursion is itself ``np.add.reduce`` of its slice: ``leaves`` cuts the array where numpy
splits it, and ``combine`` adds the leaves' sums back in numpy's order, in the accumulator dtype.
(A reduction that casts, e.g. ``np.add.reduce(float32, dtype=float64)``, is buffered instead: its
blocking is numpy's 8192-element buffer; callers make that call whole, it allocates no temporary.)
``tests/compare/test_numpy_sums.py`` checks the identity on random sizes, dtypes and magnitudes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_UNROLL = 8  # numpy splits at multiples of its 8-way unrolling
_PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE: at or below it, a slice is summed without splitting


def _split(n: int) -> int:
    half = n // 2
    return half - half % _UNROLL


def leaves(n: int, limit: int) -> list[tuple[int, int]]:
    """(start, stop) of the slices numpy's pairwise sum of ``n`` elements splits into, down to at
    most ``limit`` elements each (never below numpy's own 128), in order."""
    out: list[tuple[int, int]] = []

    def walk(start: int, size: int) -> None:
        if size <= max(limit, _PAIRWISE_BLOCK):
            out.append((start, start + size))
            return
        first = _split(size)
        walk(start, first)
        walk(start + first, size - first)

    walk(0, n)
    return out


def combine(n: int, limit: int, sums: Sequence, dtype) -> np.generic:
    """The whole-array sum from the sums of ``leaves(n, limit)`` (in order), added as numpy adds them."""
    kind = np.dtype(dtype).type
    position = iter(sums)

    def walk(size: int):
        if size <= max(limit, _PAIRWISE_BLOCK):
            return kind(next(position))
        first = _split(size)
        left = walk(first)
        return kind(left + walk(size - first))

    # numpy's reduction starts from the identity (0) and adds the pairwise sum to it
    return kind(kind(0) + walk(n))

