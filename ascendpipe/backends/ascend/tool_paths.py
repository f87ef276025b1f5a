"""The CANN tools' path rules, checked before a tool is run (pure; ``os.path`` only).

Every CANN tool refuses a path with a character outside ``[A-Za-z0-9./_-]``:
- ATC: graphengine ``CheckInputPathValid`` / ``CheckOutputPathValid`` (``--model``, ``--output``, ``--om``,
  ``--json``, ``--keep_dtype``, ``--insert_op_conf``, ...) take ``^[\\u4e00-\\u9fa5A-Za-z0-9./_-]+$``
  (CJK too, but ais_bench and msit then refuse the same path, so we hold every tool to the common set);
- ais_bench and msit: ``PATH_WHITE_LIST_REGEX = re.compile(r"[^_A-Za-z0-9/.-]")`` (msit 8.2.0
  ``components/utils/constants.py:21``; ais_bench ``infer/path_security_check.py``);
- msaccucmp: ``safe_path_string`` with ``[^_A-Za-z0-9/.,-]`` (mindstudio-probe 26.2.0
  ``msprobe/msaccucmp/cmp_utils/utils.py:36-42``; ``,`` too, which is a list separator for it).
ais_bench and msit also refuse a symbolic link (msit ``components/utils/security_check.py:58``,
``os.path.islink``), so paths handed to ais_bench are resolved first (``real_path``).
"""

from __future__ import annotations

import os
import re

from ascendpipe.errors import Location, UserError

ALLOWED = "[A-Za-z0-9./_-]"
_BAD = re.compile(r"[^A-Za-z0-9./_-]")
WHY = ("the CANN tools take only [A-Za-z0-9./_-] in a path (ATC's CheckInputPathValid, ais_bench's and "
       "msit's PATH_WHITE_LIST_REGEX, msaccucmp's safe_path_string)")

# options whose value is a path (or a comma list of paths), per tool; argv tokens are '--opt=value'
# (atc, aoe, msprof) or '--opt value' / '-opt value' (ais_bench, msit, msaccucmp)
PATH_OPTIONS = {
    "--model", "--output", "--om", "--json", "--keep_dtype", "--fusion_switch_file", "--insert_op_conf",
    "--modify_mixlist", "--input", "--acl_json_path", "--export",
    "-d", "-out", "-gm", "-om", "-o", "-i", "-c",
}
COMMA_LISTS = {"--input", "-i", "-d"}  # ais_bench --input a,b; msit -i a.npy,b.npy; msaccucmp -d f1,f2


def bad_char(path: str) -> str | None:
    """The first character of ``path`` that the tools refuse, or None."""
    found = _BAD.search(str(path))
    return found.group(0) if found else None


def describe(char: str) -> str:
    return f"'{char}' (U+{ord(char):04X})" if char.isprintable() and char != " " else f"U+{ord(char):04X}"


def check_path(path, *, tool: str, what: str, location: Location | None = None) -> None:
    """A located UserError when ``path`` has a character the tools refuse."""
    char = bad_char(str(path))
    if char is not None:
        raise UserError(f"{tool} would refuse {what} {path}: it has {describe(char)}; {WHY}",
                        location or Location(), hint="use a path of letters, digits and . _ - /")


def check_workspace(root) -> None:
    """The one error for a workspace whose own absolute path the tools refuse (every tool path lies below it)."""
    root = os.path.abspath(str(root))
    char = bad_char(root)
    if char is not None:
        raise UserError(f"the workspace {root} has {describe(char)} in its path, and every path ascendpipe hands "
                        f"atc, aoe, ais_bench, msit, msaccucmp and msprof lies below it; {WHY}",
                        Location(field="backend"),
                        hint="move or link the workspace to a path of letters, digits and . _ - / "
                             "(or build with --backend onnxruntime, which runs no CANN tool)")


def argv_paths(argv: list[str]) -> list[tuple[str, str]]:
    """(option, path) for every path an argv hands its tool (the option table above)."""
    found: list[tuple[str, str]] = []
    tokens = list(argv[1:])
    for i, token in enumerate(tokens):
        option, sep, value = token.partition("=")
        if option == "--application" and sep:  # msprof --application="python3 -m ais_bench --model ..."
            import shlex

            found.extend(argv_paths(shlex.split(value)))
            continue
        if sep and option in PATH_OPTIONS:
            pass
        elif not sep and token in PATH_OPTIONS and i + 1 < len(tokens):
            option, value = token, tokens[i + 1]
        else:
            continue
        parts = value.split(",") if option in COMMA_LISTS else [value]
        found.extend((option, p) for p in parts if p)
    return found


def check_argv(argv: list[str], *, location: Location | None = None) -> None:
    """Every path in ``argv`` against the whitelist; placeholders of a dry run (``<input>``) excepted."""
    tool = os.path.basename(argv[0]) if argv else "the tool"
    if len(argv) > 2 and argv[1] == "-m":  # python3 -m ais_bench
        tool = argv[2]
    elif len(argv) > 1 and argv[1].endswith(".py"):  # python3 msaccucmp.py
        tool = os.path.basename(argv[1])
    for option, path in argv_paths(argv):
        if "<" in path and ">" in path:  # a dry run's placeholder for a file named at run time
            continue
        check_path(path, tool=tool, what=f"{option} path", location=location)


def file_name(name: str, index: int) -> str:
    """A tool-safe file or folder name for a model input (``input:0`` -> ``0_input_0``); the index keeps
    two names that differ only in refused characters apart, and ais_bench/msit pair inputs by order."""
    return f"{index}_{_BAD.sub('_', name.replace('/', '_')) or 'input'}"


def real_path(path) -> str:
    """``path`` with every symbolic link resolved: ais_bench and msit refuse a link (``os.path.islink``)."""
    return os.path.realpath(str(path))
