#!/usr/bin/env python3
"""TEST DOUBLE of CANN's msaccucmp.py (not the real tool): only `convert`, for the dump double's files.

Without ``-f`` each tensor keeps the dump's own (device) shape, as the real tool saves it (mindstudio-probe
26.2.0 ``msprobe/msaccucmp/dump_parse/dump_data_parser.py:170-215``); the double does no ``-f`` conversion."""
import struct
import sys
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "pylib"))
import _cann_double as d  # noqa: E402
import _dump_double as dd  # noqa: E402

TOOL = "msaccucmp.py"


def main(argv):
    if not argv or argv[0] != "convert":
        d.fail(TOOL, "the double supports only the 'convert' subcommand")
    opts, i = {}, 1
    while i < len(argv):
        flag = argv[i]
        if flag not in ("-d", "-out", "-f", "-s", "-o", "-i", "-v", "-t"):
            d.fail(TOOL, f"unknown option {flag}")
        if i + 1 >= len(argv):
            d.fail(TOOL, f"{flag} needs a value")
        opts[flag] = argv[i + 1]
        i += 2
    if "-d" not in opts or "-out" not in opts:
        d.fail(TOOL, "convert needs -d <file|dir|f1,f2> and -out <dir>")
    for flag in ("-d", "-out"):  # safe_path_string (msprobe/msaccucmp/cmp_utils/utils.py:36-42)
        d.check_path(TOOL, flag, opts[flag])
    if opts.get("-t", "npy") not in ("npy", "msnpy", "bin", "pt"):
        d.fail(TOOL, "-t must be npy|msnpy|bin|pt")
    if "-o" in opts and "-i" in opts:
        d.fail(TOOL, "-o and -i exclude each other")
    sources = []
    for part in opts["-d"].split(","):
        p = Path(part)
        sources += sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p]
    out = Path(opts["-out"])
    if not out.is_dir():
        d.fail(TOOL, f"-out {out} is not a directory")
    for src in sources:
        if src.name == "mapping.csv":
            continue
        raw = src.read_bytes()
        (length,) = struct.unpack_from("<Q", raw)  # big_dump_data.py:135-149: the header length first
        msg = dd._dump_class()()
        msg.ParseFromString(raw[8:8 + length])
        pos, numpy_of = 8 + length, {v: k for k, v in dd.DATA_TYPE.items()}
        tensors = [("input", i, t) for i, t in enumerate(msg.input)] + [("output", i, t) for i, t in enumerate(msg.output)]
        for io, index, t in tensors:
            data = t.data or raw[pos:pos + t.size]
            pos += 0 if t.data else t.size
            name_of = numpy_of[t.data_type]
            array = np.frombuffer(data, dtype="<u2" if name_of == "bfloat16" else name_of).reshape(list(t.shape.dim))
            if "-o" in opts and (io != "output" or int(opts["-o"]) != index) or "-i" in opts and (io != "input" or int(opts["-i"]) != index):
                continue
            shape = "x".join(str(s) for s in array.shape)
            name = f"{src.name}.{io}.{index}.{shape}.npy"
            if len(name) >= 255:  # msaccucmp's handle_too_long_file_name (cmp_utils/file_utils.py:176-188)
                hashed = uuid.uuid3(uuid.NAMESPACE_DNS, name).hex + ".npy"
                with open(out / "mapping.csv", "a", encoding="utf-8") as fh:
                    fh.write(f"{hashed},{name}\n")
                name = hashed
            np.save(out / name, array)
    print(f"[INFO] The command was completed and took {len(sources)} files.")
    return 0


sys.exit(main(sys.argv[1:]))
