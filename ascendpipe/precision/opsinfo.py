"""A CANN install's own mixed-precision lists: ``aic-<soc>-ops-info*.json`` read as GE's FE reads them.

Where (GE ``compiler/engines/nn_engine``, hicann/ge at ffdcbc9f):

- the opp folder: ``$ASCEND_OPP_PATH``, else ``$ASCEND_HOME_PATH/opp`` (``utils/common/configuration.cc``
  L624-637); we also take the toolkit home ``doctor`` finds (``$ASCEND_TOOLKIT_HOME``) and the default
  install folders of CANN 8 (``/usr/local/Ascend/ascend-toolkit/latest``) and CANN 9 (``/usr/local/Ascend/cann``);
- the folder: ``<opp>/built-in/op_impl/ai_core/tbe/config/<short soc version, lower case>``
  (``optimizer/fe_config/fe.ini`` L35, ``configuration.cc`` L1033-1044): ``ascend310``, ``ascend310p``,
  ``ascend310b``, ``ascend910``, ``ascend910b``, ``ascend910_93``, ``ascend950`` (the platform configs'
  ``Short_SoC_version``: Ascend310P3 -> Ascend310P, Ascend910B1 -> Ascend910B, Ascend910A -> Ascend910);
- the files: every ``*.json`` there, read in the order FE sorts them (a name holding ``legacy`` first, then
  shorter names first), a later file's op replacing an earlier one's (``opskernel/ops_store/
  sub_op_info_store.cc`` L88-131, L182); CANN 8.x splits one SoC's list over ``aic-<soc>-ops-info-legacy.json``,
  ``...-cv.json`` and others;
- the flag: ``precision_reduce.flag``, trimmed and lower-cased: ``true`` white, ``false`` black, absent or
  empty gray, anything else an error (``op_kernel_info_constructor.cc`` L55-56, L1383-1402;
  ``ops_kernel_constants.h`` L113-114). Every level must be a JSON object and every leaf a string
  (``sub_op_info_store.cc`` L144-187: FE refuses the whole store otherwise).

Pure given an environment mapping and the file system; nothing here runs a tool.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ascendpipe.errors import Location, UserError

CONFIG_REL = Path("built-in/op_impl/ai_core/tbe/config")  # versions.OPS_INFO_REL


def soc_folder(soc_version: str | None) -> str | None:
    """The config folder of ``soc_version`` (its short SoC version in lower case), None for an unknown SoC."""
    from ascendpipe.precision.chips import family

    return {"310": "ascend310", "310P": "ascend310p", "310B": "ascend310b", "training": "ascend910",
            "A2": "ascend910b", "A3": "ascend910_93", "950": "ascend950"}.get(family(soc_version) or "")


def config_root(env: Mapping[str, str]) -> Path | None:
    """``<opp>/built-in/op_impl/ai_core/tbe/config`` of the first opp folder that has one (the search is
    versions.ops_info_root's: the key and the reader look in the same places)."""
    from ascendpipe.versions import ops_info_root

    found = ops_info_root(env)
    return Path(found) if found else None


def _fe_order(names: list[str]) -> list[str]:
    """FE's reading order (sub_op_info_store.cc L113-123): a ``legacy`` file first, then by name length
    (ties: by name, so the order does not depend on the directory listing)."""
    return sorted(names, key=lambda n: (0 if "legacy" in n else 1, len(n), n))


def ops_info_files(root: Path, folder: str) -> list[Path]:
    """The ``*.json`` files FE reads for one SoC folder, in FE's order (empty when the folder is missing)."""
    where = root / folder
    try:
        names = [n for n in os.listdir(where) if not n.startswith(".") and len(n) > 5 and n.endswith(".json")]
    except OSError:
        return []
    return [where / n for n in _fe_order(names)]


@dataclass
class InstalledLists:
    """One SoC's lists as a CANN install gives them."""

    folder: Path
    files: list[str]  # the files read, in FE's order (paths)
    sha256: dict[str, str]  # file -> sha256 of its bytes
    white: dict[str, str] = field(default_factory=dict)  # op type -> 'file:line' of its flag
    black: dict[str, str] = field(default_factory=dict)
    declared: frozenset[str] = frozenset()  # every op type the files name

    @property
    def digest(self) -> str:
        joined = "\n".join(f"{Path(f).name} {self.sha256[f]}" for f in self.files)
        return hashlib.sha256(joined.encode()).hexdigest()


def _flag_line(text: str, start: int) -> int:
    """The line of the ``precision_reduce`` flag of the op whose key is at offset ``start``."""
    at = text.find('"precision_reduce"', start)
    at = text.find('"flag"', at) if at >= 0 else -1
    return text.count("\n", 0, at if at >= 0 else start) + 1


def read_file(path: Path) -> tuple[dict[str, tuple[str, int]], set[str], str]:
    """(op -> (white|black|gray, line), every op named, sha256) of one ops-info JSON; a malformed file is
    one located UserError (FE refuses the whole store for it)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read CANN ops-info file: {exc.strerror}", Location(file=str(path))) from None
    try:
        text = raw.decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise UserError(f"CANN ops-info file is not UTF-8 text (byte {exc.start})", Location(file=str(path))) from None
    except json.JSONDecodeError as exc:
        raise UserError(f"CANN ops-info file is not valid JSON: {exc.msg}",
                        Location(file=str(path), line=exc.lineno, column=exc.colno)) from None
    where = lambda op=None, line=None: Location(file=str(path), line=line, op=op)
    if not isinstance(data, dict):
        raise UserError(f"CANN ops-info file's top level is a {type(data).__name__}, not an object of op types "
                        "(GE's FE refuses such a store)", where())
    flags: dict[str, tuple[str, int]] = {}
    cursor = 0
    for op, info in data.items():
        start = text.find(json.dumps(op), cursor)
        cursor = max(cursor, start)
        line = text.count("\n", 0, start) + 1 if start >= 0 else None
        if not isinstance(info, dict) or not all(isinstance(v, dict) for v in info.values()):
            raise UserError(f"op '{op}' is not an object of objects (GE's FE refuses the store: "
                            "sub_op_info_store.cc L158-173)", where(op.strip(), line))
        bad = next((k for v in info.values() for k, leaf in v.items() if not isinstance(leaf, str)), None)
        if bad is not None:
            raise UserError(f"op '{op}': '{bad}' is not a string (GE's FE reads every leaf as a string)",
                            where(op.strip(), line))
        reduce = {k.strip(): v for k, v in (info.get("precision_reduce") or {}).items()}
        value = reduce.get("flag", "").strip().lower()
        if value not in ("", "true", "false"):
            raise UserError(f"op '{op}': precision_reduce flag '{reduce['flag']}' is not true or false (GE's FE "
                            "refuses it: op_kernel_info_constructor.cc L1389-1396)", where(op.strip(), line))
        policy = {"true": "white", "false": "black"}.get(value, "gray")
        flags[op.strip()] = (policy, _flag_line(text, max(start, 0)) if policy != "gray" else (line or 0))
    return flags, {op.strip() for op in data}, hashlib.sha256(raw).hexdigest()


_CACHE: dict[tuple, InstalledLists] = {}


def read_lists(root: Path, folder: str) -> InstalledLists | None:
    """The SoC folder's lists, or None when the install has no ``*.json`` for it. Cached per file stats."""
    files = ops_info_files(root, folder)
    if not files:
        return None
    stats = tuple((str(f), *_stat(f)) for f in files)
    cached = _CACHE.get(stats)
    if cached is not None:
        return cached
    result = InstalledLists(root / folder, [str(f) for f in files], {})
    merged: dict[str, tuple[str, str]] = {}
    declared: set[str] = set()
    for path in files:
        flags, named, digest = read_file(path)
        result.sha256[str(path)] = digest
        declared |= named
        for op, (policy, line) in flags.items():  # a later file's op replaces the earlier one (L182)
            merged[op] = (policy, f"{path}:{line}")
    result.white = {op: at for op, (policy, at) in merged.items() if policy == "white"}
    result.black = {op: at for op, (policy, at) in merged.items() if policy == "black"}
    result.declared = frozenset(declared)
    _CACHE[stats] = result
    return result


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    except OSError:
        return -1, -1
