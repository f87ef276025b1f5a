"""An .npy file's header (shape, Fortran order, dtype), read without Python's compiler.

numpy reads the header's dict with ``ast.literal_eval``, which compiles it. On CPython 3.11, two
threads compiling at once can fail with "SystemError: AST constructor recursion depth mismatch"
(CPython gh-106905, seen in threaded programs): a compare reads hundreds of headers on its row
threads while a build runs other stages on threads, and one such failure took a compare stage down
with a traceback. numpy writes its header in one form (``{'descr': '<f4', 'fortran_order': False,
'shape': (2, 3), }`` padded with spaces to a 64-byte boundary, ``numpy/lib/format.py``
``_write_array_header``), parsed here with a regular expression; any other header (another
writer's spacing, a structured or datetime dtype) goes to numpy's own reader, one thread at a time.
It is also faster: 3.4 us a header against numpy's reader's 24 us (no compile per file).
"""

from __future__ import annotations

import re
import threading

import numpy as np

# numpy's own form: a plain dtype string, True/False, a tuple of ints ("()", "(5,)", "(1, 2)")
_NUMPY_FORM = re.compile(r"\{'descr': '([<>|=][a-zA-Z]\d*)', 'fortran_order': (True|False), "
                         r"'shape': \(((?:\d+, )*(?:\d+,?)?)\), \} *\n?\Z")
_MAX_HEADER = 10000  # numpy's own limit on a header it reads (``max_header_size``)
_NUMPY_READER = threading.Lock()


def read_array_header(stream, version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the header after the magic string (``np.lib.format.read_magic``
    gave ``version``); the stream is left at the first data byte, as numpy's readers leave it."""
    start = stream.tell()
    width = 2 if version == (1, 0) else 4
    raw = stream.read(width)
    if len(raw) == width:
        length = int.from_bytes(raw, "little")
        header = stream.read(length) if length <= _MAX_HEADER else b""
        match = _NUMPY_FORM.match(header.decode("latin1")) if len(header) == length else None
        if match:
            descr, fortran, shape = match.groups()
            return tuple(int(d) for d in shape.replace(",", " ").split()), fortran == "True", np.dtype(descr)
    stream.seek(start)
    from tokenize import TokenError  # only here: the fast path imports nothing more

    fmt = np.lib.format
    reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    with _NUMPY_READER:  # its literal_eval: never two of ours at once (see the module's docstring)
        try:
            return reader(stream)
        except (SyntaxError, TokenError) as exc:  # a cut header: numpy's tokenizer gives up before its own check
            raise ValueError(f"Cannot parse header: {exc}") from None


# -- what a user's .npy/.npz claims, checked before numpy allocates it ---------------------------------

def npy_error(exc: BaseException) -> str:
    """numpy's reason a file did not load, said for the user: a file without numpy's header is
    refused as "pickled (object) data" (numpy tries pickle last), which misleads for a damaged file."""
    text = str(exc)
    if isinstance(exc, ValueError) and ("pickled" in text or "magic string is not correct" in text
                                        or "reading magic string" in text):  # shorter than the magic
        return "not a numpy .npy/.npz file (it does not start with numpy's header: damaged, or another format)"
    return str(exc)


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if count < 1024 or unit == "EiB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def _claimed(fh, size: int, what: str, where, label: str) -> int:
    """The bytes the array at ``fh`` (a stream of ``size`` bytes, at its start) claims; a header that
    claims more than the stream holds is one line (a 16-byte file claiming 2^40 samples would ask
    numpy for terabytes)."""
    from ascendpipe.errors import UserError

    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        shape, _, dtype = read_array_header(fh, version)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        raise UserError(f"cannot read {label}{what}: {npy_error(exc)}", where) from None
    if dtype.hasobject:
        return 0  # numpy refuses it next (no pickles)
    count = 1
    for dim in shape:
        count *= int(dim)
    claimed, held = count * dtype.itemsize, size - fh.tell()
    if claimed > held:
        raise UserError(f"{label}{what} is damaged or truncated: its header says {dtype} "
                        f"[{','.join(str(d) for d in shape)}] ({_size(claimed)}), but it holds {_size(max(held, 0))} "
                        "of data", where, hint="write the array again (np.save)")
    return claimed


def check_npy_sizes(path, where=None, label: str = "input file") -> None:
    """Every array of an .npy/.npz holds the bytes its header claims, and all of them together fit
    in the memory this machine has (``hostmemory``): else one ``UserError`` naming the file and
    member, raised before anything is allocated. ``label`` names the file's role in the message."""
    import zipfile
    from pathlib import Path

    from ascendpipe.errors import Location, UserError
    from ascendpipe.hostmemory import check_fits

    path = Path(path)
    where = where or Location(file=str(path))
    total, claims = 0, []
    try:
        if path.suffix == ".npy":
            with open(path, "rb") as fh:
                claims.append(("", _claimed(fh, path.stat().st_size, "", where, label)))
        elif path.suffix == ".npz" and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    if info.filename.endswith(".npy"):
                        with archive.open(info) as fh:
                            member = f" member '{info.filename[:-4]}'"
                            claims.append((member, _claimed(fh, info.file_size, member, where, label)))
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise UserError(f"cannot read {label}: {npy_error(exc)}", where) from None
    for member, claimed in claims:
        total += claimed
    if claims:
        biggest = max(claims, key=lambda c: c[1])
        what = (f"{label}{biggest[0]}" if len(claims) == 1 else
                f"{label} ({len(claims)} arrays; the largest{biggest[0]})")
        check_fits(total, f"reading {what}", where, hint="give a smaller file, or run where more memory is free")


def load_npy(path, where=None, label: str = "file"):
    """``np.load`` of a user's .npy (never a pickle), its claimed size checked first
    (``check_npy_sizes``); a damaged or foreign file is one line naming it."""
    from ascendpipe.errors import Location, UserError

    where = where or Location(file=str(path))
    check_npy_sizes(path, where, label)
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise UserError(f"cannot read {label}: {npy_error(exc)}", where) from None
