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
