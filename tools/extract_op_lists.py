"""Extract the device's mixed-precision op lists and ATC's fusion pass names from CANN's published source.

Writes ``ascendpipe/precision/data/op_lists.json`` (white/black lists per SoC, each entry with the line it
was read at) and ``ascendpipe/precision/data/pass_names.json`` (every built-in fusion pass name with the
file and line that registers it). Nothing here is imported by the package: the data files are the
product, this script is how they were made (rerun it to check or refresh them).

Sources (each read at a fixed commit through ``git show``, so a bare mirror works):

- ``--canndev``: GitHub dengguojie/vue-element-admin, branch ``stp`` = a full mirror of Huawei's canndev
  operator repository (2022): ``ops/built-in/tbe/op_info_cfg/ai_core/<soc>/aic-<soc>-ops-info.ini``,
  key ``precision_reduce.flag`` (true = white, false = black, absent = gray: GE
  ``op_kernel_info_constructor.cc`` L55-56 and ``ops_kernel_constants.h`` L113-114 at hicann/ge ffdcbc9f);
  parsed as canndev's own ``op_info_cfg/parser/parser_ini.py`` does (a ``[Op]`` line opens an op; a
  repeated op replaces the earlier one). Also ``ops/built-in/fusion_pass/**`` ``REGISTER_PASS`` /
  ``REGISTER_BUFFER_FUSION_PASS`` names.
- ``--opp21``: GitHub gekowa/ascend-opp, an installed opp package of 2021 (version.info 1.75.22.0.220):
  ``op_impl/built-in/ai_core/tbe/config/<soc>/aic-<soc>-ops-info.json``, ``precision_reduce.flag``.
- ``--opsnn`` / ``--opsmath``: GitHub hicann/ops-nn and hicann/ops-math (2026), ``*/op_host/*_def.cpp``
  outside ``experimental/``: per op, each ``AICore().AddConfig("<soc>"[, cfg])`` with the
  ``PrecisionReduceFlag`` of that config. Defaults (asc-devkit docs ``OpAICoreDef/AddConfig.md`` table 1,
  ``OpAICoreConfig/OpAICoreConfig构造函数.md``): ``AddConfig(soc)`` without a config and ``OpAICoreConfig
  cfg("soc")`` mean true; ``OpAICoreConfig cfg;`` leaves the flag unset (gray) unless set.
- ``--ge``: GitHub hicann/ge: ``ForbiddenClosedPass`` (``compiler/engines/nn_engine/inc/common/
  fusion_pass_util.h``), the passes FE keeps on whatever a fusion switch says, and GE's own registrations.

Run: python tools/extract_op_lists.py --canndev MIRROR --opp21 MIRROR --opsnn MIRROR --opsmath MIRROR --ge MIRROR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
from pathlib import Path

CANNDEV_COMMIT = "7290acc77320c52bba6d22f40a8966b7f4544fc8"
OPP21_COMMIT = "5c28a2faf9d2a117ea6f0923efe35fcd53904dd2"
CANNDEV_SOCS = ("ascend310", "ascend310p", "ascend310b", "ascend910", "ascend910b")
OPP21_SOCS = ("ascend310", "ascend710", "ascend910")
OPDEF_SOCS = ("ascend950",)
ROOT = Path(__file__).resolve().parents[1]

def git_show(repo: str, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True).stdout

def git_files(repo: str, commit: str, under: str = "") -> list[str]:
    out = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", commit, *([under] if under else [])],
                         check=True, capture_output=True, text=True).stdout
    return out.splitlines()

def git_head(repo: str) -> tuple[str, str]:
    out = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%H %cs", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.split()
    return out[0], out[1]

def parse_ini(text: str) -> tuple[dict[str, int], dict[str, int], dict[str, int], list[str]]:
    """(white op -> flag line, black op -> flag line, every op -> section line, problems) as parser_ini.py reads it."""
    sections: dict[str, int] = {}
    flags: dict[str, tuple[str, int]] = {}
    problems = []
    op = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if line.startswith("["):
            op = line[1:-1]
            if op in sections:
                problems.append(f"L{number}: [{op}] again (the later section replaces the earlier one)")
                flags.pop(op, None)
            sections[op] = number
        elif line.startswith("precision_reduce.flag=") and op is not None:
            flags[op] = (line.split("=", 1)[1].strip().lower(), number)
    white = {o: n for o, (v, n) in flags.items() if v == "true"}
    black = {o: n for o, (v, n) in flags.items() if v == "false"}
    problems += [f"L{n}: {o} flag {v!r}" for o, (v, n) in flags.items() if v not in ("true", "false")]
    return white, black, sections, problems

def parse_opp_json(text: str) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(white op -> line of its flag, black op -> line, every op -> line of its key) of a shipped ops-info JSON."""
    data = json.loads(text)
    lines = text.splitlines()
    starts: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        found = re.match(r'^    "([^"]+)":\{', line)
        if found:
            starts[found.group(1)] = number
    white, black = {}, {}
    for op, info in data.items():
        flag = str((info.get("precision_reduce") or {}).get("flag", "")).strip().lower()
        if flag not in ("true", "false"):
            continue
        start = starts.get(op, 0)
        line = next((start + i for i, text_line in enumerate(lines[start:], start=1)
                     if '"precision_reduce"' in text_line), start)
        (white if flag == "true" else black)[op] = line + 1  # the "flag" line follows the key
    return white, black, starts

_CLASS = re.compile(r"class\s+(\w+)\s*:\s*public\s+OpDef\b")
_CFG_DECL = re.compile(r"OpAICoreConfig\s+(\w+)\s*(\(\s*([^)]*)\))?\s*;")
_ADD = re.compile(r"AddConfig\(\s*\"(\w+)\"\s*(?:,\s*(\w+))?\s*\)")
_FLAG = re.compile(r"PrecisionReduceFlag\(\s*(true|false)\s*\)")

def parse_opdef(text: str) -> dict[str, dict[str, tuple[str, int]]]:
    """op -> soc -> (white|black|gray, line of the AddConfig) for each OpDef class of a *_def.cpp."""
    found: dict[str, dict[str, tuple[str, int]]] = {}
    classes = list(_CLASS.finditer(text))
    for index, cls in enumerate(classes):
        end = classes[index + 1].start() if index + 1 < len(classes) else len(text)
        body, base = text[cls.start():end], cls.start()
        state: dict[str, str] = {}  # config variable -> white | black | gray, as of the statement read
        per_soc: dict[str, tuple[str, int]] = {}
        for statement in re.finditer(r"[^;{}]*;", body):
            stmt = statement.group(0)
            line = text.count("\n", 0, base + statement.start() + len(stmt) - len(stmt.lstrip())) + 1
            decl = _CFG_DECL.search(stmt)
            if decl:
                state[decl.group(1)] = "white" if decl.group(2) and decl.group(3).strip() else "gray"
            head = re.match(r"\s*(\w+)\s*\.", stmt)
            flag = _FLAG.search(stmt)
            if flag and head and head.group(1) in state:
                state[head.group(1)] = "white" if flag.group(1) == "true" else "black"
            for add in _ADD.finditer(stmt):
                soc, cfg = add.group(1), add.group(2)
                per_soc[soc] = ("white" if cfg is None else state.get(cfg, "gray"), line)
        if per_soc:
            found[cls.group(1)] = per_soc
    return found

def pass_registrations(repo: str, commit: str, under: str) -> dict[str, tuple[str, str, int]]:
    """pass name -> (GraphFusion | UBFusion, path, line) of every REGISTER_PASS / REGISTER_BUFFER_FUSION_PASS."""
    out = subprocess.run(["git", "-C", repo, "grep", "-n", "-E", r"REGISTER_(BUFFER_FUSION_)?PASS\(\s*\"", commit,
                          "--", under], capture_output=True, text=True).stdout
    names: dict[str, tuple[str, str, int]] = {}
    for row in out.splitlines():
        _, path, line, code = row.split(":", 3)
        found = re.search(r"REGISTER_(BUFFER_FUSION_)?PASS\(\s*\"([^\"]+)\"", code)
        if found and "/test" not in path:
            names.setdefault(found.group(2), ("UBFusion" if found.group(1) else "GraphFusion", path, int(line)))
    return names

def fe_pass_names(repo: str, commit: str) -> dict[str, tuple[str, str, int]]:
    """GE FE's own passes: the names in ``fusion_pass_name.h`` (a ``*_UB_PASS`` constant is a UB fusion) and
    every ``REG_PASS("name"`` under ``compiler/``."""
    names: dict[str, tuple[str, str, int]] = {}
    path = "compiler/engines/nn_engine/fusion/graph_optimizer/fusion_common/fusion_pass_name.h"
    for number, line in enumerate(git_show(repo, commit, path).decode().splitlines(), start=1):
        found = re.match(r'\s*const std::string (\w+) = "([^"]+)";', line)
        if found:
            ub = found.group(1).endswith("_UB_PASS") or found.group(2).startswith("Tbe")
            section = "UBFusion" if ub else "GraphFusion"
            names.setdefault(found.group(2), (section, path, number))
    out = subprocess.run(["git", "-C", repo, "grep", "-n", "-E", r'REG_PASS\(\s*"', commit, "--", "compiler"],
                         capture_output=True, text=True).stdout
    for row in out.splitlines():
        _, where, line, code = row.split(":", 3)
        found = re.search(r'REG_PASS\(\s*"([^"]+)"', code)
        if found and "/test" not in where:
            names.setdefault(found.group(1), ("GraphFusion", where, int(line)))
    return names

def forbidden_closed(repo: str, commit: str) -> tuple[list[str], str]:
    path = "compiler/engines/nn_engine/inc/common/fusion_pass_util.h"
    text = git_show(repo, commit, path).decode()
    block = text[text.index("ForbiddenClosedPass"):text.index("};", text.index("ForbiddenClosedPass"))]
    return sorted(set(re.findall(r"\"([^\"]+)\"", block))), path

def build(args) -> tuple[dict, dict]:
    lists: dict = {"canndev-2022": {}, "opp-2021": {}, "opdefs-2026": {}}
    declared: dict = {}
    for soc in CANNDEV_SOCS:
        path = f"ops/built-in/tbe/op_info_cfg/ai_core/{soc}/aic-{soc}-ops-info.ini"
        raw = git_show(args.canndev, CANNDEV_COMMIT, path)
        white, black, sections, problems = parse_ini(raw.decode())
        lists["canndev-2022"][soc] = {"file": path, "sha256": hashlib.sha256(raw).hexdigest(), "ops": len(sections),
                                      "white": white, "black": black, "problems": problems}
        declared[soc] = " ".join(sorted(sections))
    for soc in OPP21_SOCS:
        path = f"op_impl/built-in/ai_core/tbe/config/{soc}/aic-{soc}-ops-info.json"
        raw = git_show(args.opp21, OPP21_COMMIT, path)
        white, black, starts = parse_opp_json(raw.decode())
        lists["opp-2021"][soc] = {"file": path, "sha256": hashlib.sha256(raw).hexdigest(), "ops": len(starts),
                                  "white": white, "black": black, "problems": []}
    opdefs: dict[str, dict] = {soc: {"white": {}, "black": {}, "gray": {}} for soc in OPDEF_SOCS}
    heads = {}
    for name, repo in (("ops-nn", args.opsnn), ("ops-math", args.opsmath)):
        commit, date = git_head(repo)
        heads[name] = (commit, date)
        for path in git_files(repo, commit):
            if not path.endswith("_def.cpp") or "/op_host/" not in path or path.startswith("experimental/"):
                continue
            for op, per_soc in parse_opdef(git_show(repo, commit, path).decode(errors="replace")).items():
                for soc, (flag, line) in per_soc.items():
                    if soc in opdefs:
                        opdefs[soc][flag].setdefault(op, f"{name}:{path}:{line}")
    for soc, entry in opdefs.items():
        lists["opdefs-2026"][soc] = {**entry, "ops": sum(len(v) for v in entry.values()),
                                     "file": "*/op_host/*_def.cpp (ops-nn, ops-math; experimental/ left out)",
                                     "problems": []}
    ge_commit, ge_date = git_head(args.ge)
    forbidden, forbidden_path = forbidden_closed(args.ge, ge_commit)
    passes = pass_registrations(args.canndev, CANNDEV_COMMIT, "ops/built-in/fusion_pass")
    ge_passes = fe_pass_names(args.ge, ge_commit)
    meta = {"canndev": CANNDEV_COMMIT, "opp21": OPP21_COMMIT, "opdefs": heads, "ge": (ge_commit, ge_date),
            "forbidden_path": forbidden_path}
    return ({"lists": lists, "declared": declared, "meta": meta},
            {"canndev": passes, "ge": ge_passes, "forbidden": forbidden, "meta": meta})

def write(path: Path, what: str, values: dict) -> None:
    """The extracted data as JSON the package reads (``what``: said in the commit that updates it)."""
    del what  # the data's meaning is said in precision/lists.py and precision/pass_names.py, which read it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("canndev", "opp21", "opsnn", "opsmath", "ge"):
        parser.add_argument(f"--{flag}", required=True, help="a git mirror (bare is fine) of the source")
    args = parser.parse_args()
    lists, passes = build(args)
    meta = lists["meta"]
    write(ROOT / "ascendpipe/precision/data/op_lists.json",
          "Mixed-precision op lists per SoC (precision_reduce.flag: true = white, false = black, absent = gray), in\n"
          "GE op types, each entry with the line of its flag (canndev ini, opp JSON) or the file:line of the\n"
          "AddConfig that sets it (2026 op defs). Sources and their commits: META.",
          {"META": {"canndev-2022": {"repo": "dengguojie/vue-element-admin (branch stp: a mirror of Huawei canndev)",
                                     "commit": meta["canndev"], "date": "2022-06-29"},
                    "opp-2021": {"repo": "gekowa/ascend-opp (an installed opp, version.info 1.75.22.0.220)",
                                 "commit": meta["opp21"], "date": "2021-04-20"},
                    "opdefs-2026": {"repo": "hicann/ops-nn + hicann/ops-math",
                                    "commit": {k: v[0] for k, v in meta["opdefs"].items()},
                                    "date": max(v[1] for v in meta["opdefs"].values())}},
           "LISTS": lists["lists"], "DECLARED": lists["declared"]})
    write(ROOT / "ascendpipe/precision/data/pass_names.json",
          "ATC's built-in fusion pass names: (section, file, line) of each registration in canndev (2022) and GE\n"
          "(2026), and the passes GE's FE keeps on whatever a fusion switch says (FORBIDDEN_CLOSED).",
          {"META": {"canndev": {"repo": "dengguojie/vue-element-admin (branch stp)", "commit": meta["canndev"]},
                    "ge": {"repo": "hicann/ge", "commit": meta["ge"][0], "date": meta["ge"][1]},
                    "forbidden_closed": meta["forbidden_path"] + " (ForbiddenClosedPass)"},
           "CANNDEV_PASSES": passes["canndev"], "GE_PASSES": passes["ge"],
           "FORBIDDEN_CLOSED": passes["forbidden"]})

if __name__ == "__main__":
    main()
