"""The device's mixed-precision op lists, per SoC, in GE op types; and the op families the emulation
knows apart (cube ops, ops with no fp16 form, exact copies).

ATC decides an op's dtype under ``allow_mix_precision`` (``mixed_float16``...) from its kernel's
``precision_reduce.flag`` in the SoC's ``aic-<soc>-ops-info*.json``: true = white (fp16), false = black
(fp32), absent = gray (follows its input) (GE ``op_kernel_info_constructor.cc`` L55-56,
``ops_kernel_constants.h`` L113-114; the modify_mixlist doc, ``--modify_mixlist.md`` L11-15). The op is
looked up by its GE kernel type (``precision/ge_types.py``). Where the lists come from (``for_soc``):

1. a CANN install on this machine (``precision/opsinfo.py``): its own files for the SoC;
2. else the published lists, extracted by ``tools/extract_op_lists.py`` into ``data/op_lists.json``:
   canndev's 2022 ``aic-<soc>-ops-info.ini`` for ascend310, 310p, 310b, 910 and 910b (A3, whose list is not
   published, takes 910b's); for Ascend 950 the 2026 open op definitions (hicann/ops-nn, ops-math
   ``op_host/*_def.cpp``, ``PrecisionReduceFlag``), and 910b's list for the ops they do not define;
3. with no ``soc_version``: every 2022 SoC's white entries and only the black entries all of them share
   (the side that shows an fp16 failure: an op fp32 on some SoC but fp16 on another is taken fp16).

Every entry carries where it was read (file and line), and the choice is recorded in ``convert.json`` and
``precision_plan.json`` (``op_lists``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

CUBE_OPS = frozenset({
    "Conv", "ConvTranspose", "MatMul", "Gemm",
    # onnxruntime's fused forms of the same (a fused Conv+BN+Relu is still one cube op)
    "FusedConv", "FusedGemm", "FusedMatMul", "NchwcConv",
})

# Integer and quantized compute: no fp16 form exists, so these are never fp16 (nor keep_dtype)
# candidates, whatever float tensor they also write (DynamicQuantizeLinear's scale).
NON_FP16_OPS = frozenset({
    "ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear",
    "QuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
    "QLinearAdd", "QLinearMul", "QGemm", "QAttention",
})

# Where the cube unit takes fp32 input: Atlas A2/A3 (their cube computes fp32 as HF32 or FP32:
# hiascend CANN aoerc_16_0062, --op_precision_mode ``enable_float_32_execution``, "supported only in
# Atlas A2"). Atlas inference (310, 310P, 310B) and the first training products have fp16/int8
# cubes; an unknown SoC is taken as those, the side that shows an fp16 overflow.
CUBE_FP32_INPUT_FAMILIES = frozenset({"A2", "A3"})


def cube_reads_fp32(soc_version: str | None) -> bool:
    """Whether a cube op kept by keep_dtype reads fp32 on this SoC (else fp16 in, fp32 out): the C32
    class of precision/chips.py (Atlas A2/A3, and Ascend 950)."""
    from ascendpipe.precision.chips import soc_class

    return soc_class(soc_version) == "C32"


# Ops whose outputs are exact copies, selections or sign flips of their inputs: with fp16 inputs
# their outputs are already fp16 values, so the emulation skips the (no-op) rounding after them.
EXACT_OPS = frozenset({
    "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Slice", "Gather",
    "Concat", "Split", "Expand", "Tile", "MaxPool", "GlobalMaxPool", "Relu", "Neg", "Abs",
    "ReduceMax", "ReduceMin", "Max", "Min", "DepthToSpace", "SpaceToDepth",
})

BUILTIN_SOCS = ("ascend310", "ascend310p", "ascend310b", "ascend910", "ascend910b")
CANNDEV = "canndev-2022"
OPDEFS = "opdefs-2026"
INSTALL = "cann-install"


@dataclass(frozen=True)
class SocLists:
    """One SoC's white and black lists (GE type -> where the flag was read) and what they came from."""

    source: str  # CANNDEV | OPDEFS | INSTALL
    soc: str | None  # the config folder (ascend310p...), None without a soc_version
    white: Mapping[str, str]
    black: Mapping[str, str]
    declared: frozenset[str]  # every GE type the source names (a name not here is no GE kernel it knows)
    record: dict = field(default_factory=dict, compare=False)  # for convert.json / precision_plan.json

    def policy(self, ge: str) -> tuple[str, str]:
        """('white' | 'black' | 'gray', where it was read or why it is gray) of GE kernel type ``ge``."""
        if ge in self.black:
            return "black", self.black[ge]
        if ge in self.white:
            return "white", self.white[ge]
        if ge in self.declared:
            return "gray", "no precision_reduce flag"
        return "gray", f"not in the {self.soc or 'default'} list"

    def is_ge_type(self, name: str) -> bool:
        from ascendpipe.precision import ge_types

        return name in self.declared or not ge_types.is_onnx_only(name)


_DATA = None


def _data():
    """The extracted lists (``data/op_lists.json``, written by tools/extract_op_lists.py): META, LISTS, DECLARED."""
    global _DATA
    if _DATA is None:
        import json
        from pathlib import Path
        from types import SimpleNamespace

        _DATA = SimpleNamespace(**json.loads((Path(__file__).parent / "data" / "op_lists.json").read_text("utf-8")))
    return _DATA


def _where(source: str, soc: str, line) -> str:
    data = _data()
    entry = data.LISTS[source][soc]
    if isinstance(line, int):
        return f"{entry['file']}:{line}"
    return str(line)


def builtin(folder: str | None) -> SocLists:
    """The published lists of a config folder (ascend310...); None: the no-soc_version default."""
    data = _data()
    if folder is None:
        return _default_lists()
    if folder == "ascend950":
        return _lists_950()
    base = "ascend910b" if folder == "ascend910_93" else folder
    if base not in BUILTIN_SOCS:
        return _default_lists()
    entry = data.LISTS[CANNDEV][base]
    meta = data.META[CANNDEV]
    record = {"source": CANNDEV, "soc": folder, "repo": meta["repo"], "commit": meta["commit"], "date": meta["date"],
              "path": entry["file"], "sha256": entry["sha256"]}
    if base != folder:
        record["why"] = (f"no published list for {folder}; ascend910b's is taken (A3 is an Atlas A2 chip family "
                         "member: our choice, see docs/emulation.md)")
    return SocLists(CANNDEV, folder, {op: _where(CANNDEV, base, n) for op, n in entry["white"].items()},
                    {op: _where(CANNDEV, base, n) for op, n in entry["black"].items()},
                    frozenset(data.DECLARED[base].split()), record)


def _lists_950() -> SocLists:
    data = _data()
    defs = data.LISTS[OPDEFS]["ascend950"]
    base = builtin("ascend910b")
    defined = set(defs["white"]) | set(defs["black"]) | set(defs["gray"])
    white = {op: at for op, at in base.white.items() if op not in defined}
    black = {op: at for op, at in base.black.items() if op not in defined}
    white.update(defs["white"])
    black.update(defs["black"])
    meta = data.META[OPDEFS]
    fallback = {**base.record, "why": "for the ops no open definition registers for ascend950"}
    record = {"source": OPDEFS, "soc": "ascend950", "repo": meta["repo"], "commit": meta["commit"],
              "date": meta["date"], "path": defs["file"], "fallback": fallback}
    return SocLists(OPDEFS, "ascend950", white, black, frozenset(defined) | base.declared, record)


def _default_lists() -> SocLists:
    """No soc_version: white on any 2022 SoC is white; black only where every SoC has it black."""
    every = [builtin(soc) for soc in BUILTIN_SOCS]
    white: dict[str, str] = {}
    for lists in every:
        for op, at in lists.white.items():
            white.setdefault(op, at)
    black = {op: at for op, at in every[0].black.items() if all(op in other.black for other in every[1:])}
    black = {op: at for op, at in black.items() if op not in white}
    meta = _data().META[CANNDEV]
    record = {"source": CANNDEV, "soc": None, "repo": meta["repo"], "commit": meta["commit"], "date": meta["date"],
              "path": "ops/built-in/tbe/op_info_cfg/ai_core/{" + ",".join(BUILTIN_SOCS) + "}/aic-*-ops-info.ini",
              "why": "no soc_version: white where any SoC's list has it white, black only where every SoC's has it "
                     "black (the side that shows an fp16 failure)"}
    return SocLists(CANNDEV, None, white, black, frozenset().union(*(lists.declared for lists in every)), record)


def for_soc(soc_version: str | None, env: Mapping[str, str] | None = None) -> SocLists:
    """The lists a convert for ``soc_version`` uses: a CANN install's own where one is found (``env``: the
    environment to look in, os.environ by default), else the published ones."""
    import os

    from ascendpipe.precision import opsinfo

    folder = opsinfo.soc_folder(soc_version)
    env = os.environ if env is None else env
    root = opsinfo.config_root(env)
    note = None
    if root is not None and folder is not None:
        installed = opsinfo.read_lists(root, folder)
        if installed is not None:
            return SocLists(INSTALL, folder, installed.white, installed.black, installed.declared,
                            {"source": INSTALL, "soc": folder, "path": str(installed.folder),
                             "files": [os.path.basename(f) for f in installed.files],
                             "sha256": {os.path.basename(f): d for f, d in installed.sha256.items()},
                             "digest": installed.digest})
        note = f"the CANN install's {root} has no {folder}/*.json: the published list is used"
    elif root is not None:
        note = f"a CANN install was found ({root}) but no soc_version says which of its lists to read"
    lists = builtin(folder)
    if note:
        lists.record["install"] = note
    return lists


def key(env: Mapping[str, str] | None = None) -> str:
    """What the lists a convert reads depend on, for its stage key (versions.op_lists_key: kept out of this
    package so a no-op build imports nothing of it)."""
    from ascendpipe.versions import op_lists_key

    return op_lists_key(env)


# --- modify_mixlist on top of the lists: GE's semantics ---------------------------------------------

def apply_mixlist(lists: SocLists, mixlist: Mapping | None, translate) -> tuple[dict, dict, dict]:
    """(white, black, where) after ``--modify_mixlist``, as GE's FE applies it per kernel type
    (``modify_mixlist_config_parser.cc`` L265-294, at hicann/ge ffdcbc9f): ``to-remove`` from the list the
    op is in makes it gray; ``to-add`` black wins over ``to-add`` white; ``to-add`` gray changes nothing
    unless combined with a removal. ``translate``: entry name -> the GE kernel type it stands for (an
    ONNX-only name such as Softmax is SoftmaxV2). ``where``: GE type -> what put it there."""
    white, black = dict(lists.white), dict(lists.black)
    where = {**white, **black}
    edits: dict[str, set[tuple[str, str]]] = {}
    for key_name, actions in (mixlist or {}).items():
        for action, names in actions.items():
            for name in names:
                edits.setdefault(translate(name), set()).add((key_name, action))
    for ge, acts in edits.items():
        current = "black" if ge in black else "white" if ge in white else "gray"
        new = current
        if (f"{current}-list", "to-remove") in acts:
            new = "gray"
        if ("black-list", "to-add") in acts:
            new = "black"
        elif ("white-list", "to-add") in acts:
            new = "white"
        if new != current:
            white.pop(ge, None), black.pop(ge, None)
            if new != "gray":
                (white if new == "white" else black)[ge] = "modify_mixlist"
            where[ge] = "modify_mixlist"
    return white, black, where
