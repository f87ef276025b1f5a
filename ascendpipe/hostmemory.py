"""How much memory this machine can give, and the one check a size read from a file passes before it is
allocated (a tensor's dims, an ``.npy`` header's shape, an external-data length, random inputs).

A size read from a file is the file's word, not the machine's: a 40-byte ``.npy`` header may claim
10^12 elements and a model input may declare a 10^11 dim. numpy and onnxruntime would then ask the OS
for terabytes and fail with a ``MemoryError`` traceback, or get them on an overcommitting kernel and be
killed later. ``check_fits`` turns that into one line naming what wanted the memory, how much, and how
much this machine has: "FILE: FIELD: needs 4.0 TiB, more than the 21.3 GiB of memory this machine has
available". A leaf module (standard library and ``errors`` only).

The figure is what the kernel says a new allocation can get without swapping: ``MemAvailable`` of
``/proc/meminfo`` (Linux 3.14+, "an estimate of how much memory is available for starting new
applications, without swapping", Documentation/filesystems/proc.rst), lowered to what the process's
cgroup still allows (v2 ``memory.max - memory.current``, v1 ``memory.limit_in_bytes -
memory.usage_in_bytes``: a container's limit is below the host's RAM). Elsewhere (no ``/proc``) the
physical memory from ``sysconf``; None when nothing says, and then nothing is refused on that ground.
"""

from __future__ import annotations

import os

from ascendpipe.errors import Location, UserError

_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))
_NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2^63 - 1; anything this big is none


def _read_number(path: str) -> int | None:
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # v2's "max": no limit


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    parts = line.split()
                    return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None
    except OSError:
        return None
    return None


def _cgroup_room() -> int | None:
    for limit_file, usage_file in _CGROUP_FILES:
        limit = _read_number(limit_file)
        if limit is None or limit >= _NO_LIMIT:
            continue
        usage = _read_number(usage_file) or 0
        return max(limit - usage, 0)
    return None


def available_bytes() -> int | None:
    """Bytes a new allocation can get now without swapping (see the module's docstring); None: unknown."""
    found = [n for n in (_meminfo_available(), _cgroup_room()) if n is not None]
    if not found:
        try:
            found = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
        except (AttributeError, ValueError, OSError):
            return None
    return min(found)


def human(nbytes: float) -> str:
    """``4.0 TiB``: a size in binary units, as the refusals print it."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} EiB"


def check_fits(nbytes: int, what: str, where: Location | None = None, *, hint: str | None = None,
               available: int | None = None) -> None:
    """A ``UserError`` (at ``where``) when ``nbytes`` for ``what`` (``"input 'x' [100000000000] float32"``)
    is more than this machine can allocate now; ``available`` overrides the machine's figure (tests,
    or a caller that knows better)."""
    room = available_bytes() if available is None else available
    if room is None or nbytes <= room:
        return
    raise UserError(f"{what} needs {human(nbytes)}, more than the {human(room)} of memory this machine has "
                    "available", where, hint=hint)
