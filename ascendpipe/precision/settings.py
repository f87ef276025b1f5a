"""Resolve convert params (YAML or CLI) into one ``ConvertSettings``, shared by both backends.

Reads the remedy files the params point at (through the readers in ``remedy``) and nothing else;
the ATC argv it builds names the remedy files as the stage writes them into its output dir.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ascendpipe.errors import Location, UserError
from ascendpipe.precision import remedy
from ascendpipe.precision.input_shape import parse_input_shape
from ascendpipe.precision.policy import MODE_POLICY, MODE_V2_POLICY

PRECISION_MODES = tuple(MODE_POLICY)
PRECISION_MODES_V2 = tuple(MODE_V2_POLICY)
DEFAULT_MODE = "force_fp16"
REMEDY_NAMES = {
    "keep_dtype": "keep_dtype.cfg",
    "fusion_switch": "fusion_switch.cfg",
    "aipp": "aipp.cfg",
    "modify_mixlist": "modify_mixlist.json",
}


@dataclass
class ConvertSettings:
    precision_mode: str | None = DEFAULT_MODE
    precision_mode_v2: str | None = None
    keep_dtype: list[str] = field(default_factory=list)
    fusion_switch: dict[str, str] = field(default_factory=dict)
    aipp: list[dict[str, Any]] = field(default_factory=list)
    aipp_file: str = "<aipp>"  # where the AIPP blocks came from, for error locations
    modify_mixlist: dict[str, dict[str, list[str]]] | None = None
    input_shape: dict[str, list[int]] = field(default_factory=dict)
    input_format: str | None = None
    soc_version: str | None = None
    tune_bank: str | None = None
    overflow_mode: str | None = None  # inf_nan | saturation; None: the SoC's default
    # the fusion_switch_file as given (path, text): passed on unchanged while no inline entry changes it
    fusion_switch_source: tuple[str, str] | None = None

    @property
    def effective_overflow_mode(self) -> str:
        from ascendpipe.precision.atc_passes import default_overflow_mode

        return self.overflow_mode or default_overflow_mode(self.soc_version)

    @property
    def policy(self) -> str:
        return MODE_V2_POLICY[self.precision_mode_v2] if self.precision_mode_v2 else MODE_POLICY[self.precision_mode]

    def record(self) -> dict[str, Any]:
        data = asdict(self)
        data["aipp"] = [{k: v for k, v in block.items() if not k.startswith("__")} for block in self.aipp]
        data["policy"] = self.policy
        data["overflow_mode"] = self.effective_overflow_mode
        data["overflow_mode_source"] = "param" if self.overflow_mode else f"default for soc_version {self.soc_version}"
        data["fusion_switch_source"] = self.fusion_switch_source[0] if self.fusion_switch_source else None
        return data

    def remedy_files(self) -> dict[str, str]:
        """remedy name -> file text in ATC's format, for the remedies in use."""
        files = {}
        if self.keep_dtype:
            files["keep_dtype"] = remedy.format_keep_dtype(self.keep_dtype)
        if self.fusion_switch_source:  # the user's file, byte for byte
            files["fusion_switch"] = self.fusion_switch_source[1]
        elif self.fusion_switch:
            files["fusion_switch"] = remedy.format_fusion_switch(self.fusion_switch)
        if self.aipp:
            files["aipp"] = remedy.format_aipp(self.aipp)
        if self.modify_mixlist:
            files["modify_mixlist"] = remedy.format_mixlist(self.modify_mixlist)
        return files


def is_keep_file(value: str, read_path: Callable[[str], Path] = Path) -> bool:
    """A keep_dtype value names a file only when it ends in .cfg or names an existing file: an op
    list pasted on the command line (fix's own answer: 40 ops, longer than a file name may be) is
    never opened."""
    if value.strip().endswith(".cfg"):
        return True
    try:
        return read_path(value).is_file()
    except (OSError, ValueError):  # too long, or a NUL: not a file name
        return False


def keep_dtype_arg(value: str, read_path: Callable[[str], Path] = Path) -> str | list[str]:
    """``--keep-dtype``: a keep_dtype file, or a comma list of op names / ``OpType::T``."""
    if is_keep_file(value, read_path):
        return value
    return [k.strip() for k in value.split(",") if k.strip()]


def _on_off(value: Any, rule: str, where: Location) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).strip().lower()
    if text not in ("on", "off"):
        raise UserError(f"fusion_switch '{rule}' must be on or off, not '{value}'", where)
    return text


def resolve(params: dict[str, Any], read_path: Callable[[str], Path] = Path, where: Location | None = None) -> ConvertSettings:
    """Settings from params. File-valued params are opened through ``read_path`` (relative -> absolute)."""
    where = where or Location()
    loc = lambda f: Location(**{**where.parts(), "field": f})
    mode, mode_v2 = params.get("precision_mode"), params.get("precision_mode_v2")
    if mode and mode_v2:
        raise UserError("precision_mode and precision_mode_v2 cannot be combined (as on ATC); keep one", loc("precision_mode_v2"))
    atc_only = {"allow_mix_precision_bf16", "allow_fp32_to_bf16", "mixed_bfloat16", "mixed_hif8"}
    for name, value in (("precision_mode", mode), ("precision_mode_v2", mode_v2)):
        if value in atc_only:
            raise UserError(
                f"{name} '{value}' (bf16/hif8) is ATC-only: the onnxruntime emulation models fp16; "
                f"use --backend ascend, or an fp16 mode to emulate", loc(name))
    if mode and mode not in PRECISION_MODES:
        raise UserError(f"'{mode}' is not one of {', '.join(PRECISION_MODES)}", loc("precision_mode"))
    if mode_v2 and mode_v2 not in PRECISION_MODES_V2:
        raise UserError(f"'{mode_v2}' is not one of {', '.join(PRECISION_MODES_V2)}", loc("precision_mode_v2"))
    s = ConvertSettings(precision_mode=None if mode_v2 else (mode or DEFAULT_MODE), precision_mode_v2=mode_v2)

    keep = params.get("keep_dtype")
    if isinstance(keep, str):
        keep = keep_dtype_arg(keep, read_path)
    if isinstance(keep, str):
        s.keep_dtype = remedy.read_keep_dtype(read_path(keep))
    elif keep:
        s.keep_dtype = [str(k).strip() for k in keep]

    if params.get("fusion_switch_file"):
        path = read_path(params["fusion_switch_file"])
        text = remedy.read_text(path, "fusion_switch_file")
        s.fusion_switch.update(remedy.parse_fusion_switch(text, str(path)))
        s.fusion_switch_source = (str(path), text)
    inline = {str(rule): _on_off(value, rule, loc("fusion_switch")) for rule, value in (params.get("fusion_switch") or {}).items()}
    if any(s.fusion_switch.get(rule) != value for rule, value in inline.items()):
        s.fusion_switch_source = None  # the inline entries change the file: write the merged switches
    s.fusion_switch.update(inline)

    overflow = params.get("overflow_mode")
    if overflow is not None:
        from ascendpipe.precision.atc_passes import OVERFLOW_MODES

        if overflow not in OVERFLOW_MODES:
            raise UserError(f"overflow_mode '{overflow}' is not one of {', '.join(OVERFLOW_MODES)}", loc("overflow_mode"))
        s.overflow_mode = overflow

    if params.get("insert_op_conf") and params.get("aipp"):
        raise UserError("give aipp or insert_op_conf, not both", loc("aipp"))
    if params.get("insert_op_conf"):
        path = read_path(params["insert_op_conf"])
        s.aipp, s.aipp_file = remedy.read_aipp(path), str(path)
    elif params.get("aipp"):
        aipp = params["aipp"]
        s.aipp = [dict(b) for b in (aipp if isinstance(aipp, list) else [aipp])]
        s.aipp_file = where.file or "<aipp>"

    mixlist = params.get("modify_mixlist")
    if mixlist:
        s.modify_mixlist = remedy.read_mixlist(read_path(mixlist)) if isinstance(mixlist, str) else remedy.validate_mixlist(mixlist)
        if s.policy != "mixed":
            raise UserError("modify_mixlist needs a mixed mode (allow_mix_precision or mixed_float16), as on ATC",
                            loc("modify_mixlist"))

    if params.get("input_shape"):
        s.input_shape = parse_input_shape(str(params["input_shape"]), loc("input_shape"))
    s.input_format = params.get("input_format")
    s.soc_version = params.get("soc_version")
    s.tune_bank = str(read_path(params["tune_bank"])) if params.get("tune_bank") else None
    return s
