"""A .npy file as a read-only memory map whose pages can be handed back as a reader moves on.

The compare reads each tensor block by block (``pairpass``): mapped, a tensor costs no copy, and its
pages are the page cache's; but every page read stays in the process's resident set until the map
closes, so two rows of 100 MB attention scores read at once would hold 300 MB. ``Mapped.drop``
hands back the pages of the elements already read (madvise MADV_DONTNEED: the data stays in the
page cache, a later pass maps it again on its first touch, ~0.7 ns per float32 measured), so a row
holds a few blocks, whatever its size. Dropping costs that touch again in each pass, so the caller
drops only for large tensors (``runner``).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascendpipe.npyheader import read_array_header

PAGE = mmap.PAGESIZE


@dataclass
class Mapped:
    array: np.ndarray
    _map: mmap.mmap | None = None
    _offset: int = 0  # the data's first byte in the map
    _dropped: int = 0  # bytes of the map handed back so far, from its start

    def drop(self, start: int, stop: int) -> None:
        """Hand back the whole pages below element ``stop`` (``start``: unused, elements are read in
        order; each pass starts again at 0 and re-maps on touch)."""
        if self._map is None or not hasattr(self._map, "madvise"):
            return
        end = (self._offset + stop * self.array.itemsize) // PAGE * PAGE
        if start == 0:
            self._dropped = 0
        if end > self._dropped:
            self._map.madvise(mmap.MADV_DONTNEED, self._dropped, end - self._dropped)
            self._dropped = end


def map_npy(path: Path | str) -> Mapped:
    """``path`` mapped; an array numpy's reader must convert (Fortran order, a format version or dtype
    it alone reads) is loaded as np.load gives it, with nothing to drop."""
    fmt = np.lib.format
    with open(path, "rb") as handle:
        version = fmt.read_magic(handle)
        if version in ((1, 0), (2, 0)):
            shape, fortran, dtype = read_array_header(handle, version)
            offset = handle.tell()
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if not fortran and not dtype.hasobject and count * dtype.itemsize > 0:
                data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                array = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
                return Mapped(array, data, offset)
    return Mapped(np.load(path, allow_pickle=False))
