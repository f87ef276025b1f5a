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
from ascendpipe.precision import chips
from ascendpipe.precision.policy import BF16_POLICIES, MODE_POLICY, MODE_V2_POLICY, CubeRules

PRECISION_MODES = tuple(MODE_POLICY)
PRECISION_MODES_V2 = tuple(MODE_V2_POLICY)
HIF8_MODES = ("mixed_hif8", "cube_hif8")  # precision_mode_v2 only; Ascend 950 only, not emulated
UNDOCUMENTED_MODES = ("force_lowerprecision",)  # accepted by ATC's code (GE fe_context_utils.cc L32), not its docs
DEFAULT_MODE = "force_fp16"
REMEDY_NAMES = {
    "keep_dtype": "keep_dtype.cfg",
    "fusion_switch": "fusion_switch.cfg",
    "aipp": "aipp.cfg",
    "modify_mixlist": "modify_mixlist.json",
    "customize_dtypes": "customize_dtypes.cfg",
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
    allow_hf32: dict[str, bool] | None = None  # {'conv', 'matmul'}; None: the SoC's default (conv on, matmul off)
    # the fusion_switch_file as given (path, text): passed on unchanged while no inline entry changes it
    fusion_switch_source: tuple[str, str] | None = None
    # --customize_dtypes: the dtype of named ops' (or GE op types') inputs and outputs (remedy.CustomDtype)
    customize_dtypes: list = field(default_factory=list)
    # ATC's per-op implementation modes (precision/implmode.py): --op_select_implmode,
    # --optypelist_for_implmode and --op_precision_mode (the file as given: path, text)
    op_select_implmode: str | None = None
    optypelist_for_implmode: list[str] = field(default_factory=list)
    op_precision_mode: tuple[str, str] | None = None

    @property
    def effective_overflow_mode(self) -> str:
        from ascendpipe.precision.atc_passes import default_overflow_mode

        return self.overflow_mode or default_overflow_mode(self.soc_version)

    @property
    def policy(self) -> str:
        return MODE_V2_POLICY[self.precision_mode_v2] if self.precision_mode_v2 else MODE_POLICY[self.precision_mode]

    @property
    def effective_allow_hf32(self) -> dict[str, bool]:
        """The --allow_hf32 switches in force: HF32 rounds nothing on a SoC without it."""
        if not chips.hf32_applies(self.soc_version):
            return {"conv": False, "matmul": False}
        return {**chips.ALLOW_HF32_DEFAULT, **(self.allow_hf32 or {})}

    def cube_rules(self) -> CubeRules:
        fp32 = chips.soc_class(self.soc_version) == "C32"
        return CubeRules(fp32_input=fp32, hf32=tuple(sorted(self.effective_allow_hf32.items())),
                         force_fp32_reads=chips.FORCE_FP32_CUBE_READS_C32 if fp32 else "float16")

    def impl_modes(self):
        """The per-op modes ATC compiles with (precision.implmode.resolve)."""
        from ascendpipe.precision import implmode

        precision = implmode.parse_precision_file(self.op_precision_mode[1]) if self.op_precision_mode else None
        return implmode.resolve(self.op_select_implmode, self.optypelist_for_implmode, precision,
                                self.op_precision_mode[0] if self.op_precision_mode else None)

    def warnings(self) -> list[str]:
        """Lines for the stage log / terminal: what the emulation takes on trust."""
        out = []
        mode = self.precision_mode_v2 or self.precision_mode
        if mode in UNDOCUMENTED_MODES:
            out.append(f"warning: precision_mode '{mode}' is accepted by ATC's code but not documented: emulated as "
                       "every fp32 op in bf16 (GE op_dtype_selection_strategy_force_lowerprecision.cc)")
        if self.policy in ("origin", "fp32_to_bf16") and chips.soc_class(self.soc_version) == "C16":
            out.append(f"warning: {mode} on {self.soc_version}: its cube unit has no fp32 AI Core kernel, so ATC runs an "
                       "fp32 cube op (Conv, MatMul) as an AI CPU op or fails to build (GE --precision_mode_v2.md, "
                       "origin); emulated in exact fp32")
        if self.allow_hf32 and not chips.hf32_applies(self.soc_version):
            out.append(f"warning: allow_hf32 has no effect on {self.soc_version or 'an unknown SoC'}: HF32 exists on "
                       "Atlas A2/A3 and Ascend 950 (GE --allow_hf32.md)")
        return out

    def record(self) -> dict[str, Any]:
        data = asdict(self)
        data["aipp"] = [{k: v for k, v in block.items() if not k.startswith("__")} for block in self.aipp]
        data["policy"] = self.policy
        data["soc_class"] = chips.soc_class(self.soc_version)
        data["allow_hf32"] = self.effective_allow_hf32
        data["allow_hf32_source"] = "param" if self.allow_hf32 else f"default for soc_version {self.soc_version}"
        data["overflow_mode"] = self.effective_overflow_mode
        data["overflow_mode_source"] = "param" if self.overflow_mode else f"default for soc_version {self.soc_version}"
        data["fusion_switch_source"] = self.fusion_switch_source[0] if self.fusion_switch_source else None
        data["customize_dtypes"] = [entry.text() for entry in self.customize_dtypes]
        data["op_precision_mode"] = self.op_precision_mode[0] if self.op_precision_mode else None
        data["impl_modes"] = self.impl_modes().record()  # which mode each op type / node gets, and from where
        return data

    def remedy_files(self, soc_lists=None) -> dict[str, str]:
        """remedy name -> file text in ATC's format, for the remedies in use. Type names that are ONNX op
        types only (Softmax, Div...) are written as the GE type ATC gives them (precision/list_remedies.py);
        ``soc_lists``: the SoC's lists, to say what is a GE type (read when a type name needs them)."""
        files = {}
        typed = {}
        if self.keep_dtype or self.modify_mixlist or self.customize_dtypes:
            from ascendpipe.precision.list_remedies import written

            typed = written(self, soc_lists)
        if self.keep_dtype:
            files["keep_dtype"] = remedy.format_keep_dtype(typed["keep_dtype"])
        if self.fusion_switch_source:  # the user's file, byte for byte
            files["fusion_switch"] = self.fusion_switch_source[1]
        elif self.fusion_switch:
            files["fusion_switch"] = remedy.format_fusion_switch(self.fusion_switch)
        if self.aipp:
            files["aipp"] = remedy.format_aipp(self.aipp)
        if self.modify_mixlist:
            files["modify_mixlist"] = remedy.format_mixlist(typed["modify_mixlist"])
        if self.customize_dtypes:
            files["customize_dtypes"] = remedy.format_customize_dtypes(typed["customize_dtypes"])
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


def customize_dtypes_arg(value: Any, read_path: Callable[[str], Path] = Path,
                         where: Location | None = None) -> list:
    """``customize_dtypes``: a file in ATC's format, or its lines as a list (``remedy.parse_customize_dtypes``)."""
    if not value:
        return []
    if isinstance(value, str):
        return remedy.read_customize_dtypes(read_path(value))
    text = "\n".join(str(line) for line in value)
    return remedy.parse_customize_dtypes(text, (where.file if where and where.file else None) or "<customize_dtypes>")


def _on_off(value: Any, rule: str, where: Location) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).strip().lower()
    if text not in ("on", "off"):
        raise UserError(f"fusion_switch '{rule}' must be on or off, not '{value}'", where)
    return text


# aclrtFloatOverflowMode: "Atlas 200I/500 A2, Atlas inference products, Atlas training products only support
# saturation mode" (hiascend runtimeapi aclcppdevg_03_1389)
SATURATION_ONLY = frozenset({"310P", "310B", "training"})


def check_soc_modes(mode: str | None, mode_v2: str | None, soc: str | None, where: Location | None = None,
                    spelled: Callable[[str], str] | None = None) -> None:
    """The modes ATC refuses on ``soc``: bf16 where the SoC has none, HiFloat8 outside Ascend 950."""
    where = where or Location()
    for key, value in (("precision_mode", mode), ("precision_mode_v2", mode_v2)):
        if not value:
            continue
        name = spelled(key) if spelled else key
        loc = Location(**{**where.parts(), "field": key})
        policy = (MODE_V2_POLICY if key == "precision_mode_v2" else MODE_POLICY).get(value)
        if policy in BF16_POLICIES and chips.supports_bf16(soc) is False:
            raise UserError(f"{name} '{value}' computes in bf16, which {soc} does not have: ATC refuses it (\"Current "
                            "soc not support dtype of BFloat16\"); bf16 exists on Atlas A2/A3 (Ascend910B*, "
                            "Ascend910_93*) and Atlas 200I/500 A2 (Ascend310B*): use an fp16 mode here", loc)
        if value in HIF8_MODES and not chips.supports_hif8(soc):
            raise UserError(f"{name} '{value}' computes in HiFloat8, which exists only on Ascend 950 "
                            f"(not {soc or 'the SoC given'})", loc)


def allow_hf32_arg(value: Any, where: Location | None = None, name: str = "allow_hf32") -> dict[str, bool]:
    """``allow_hf32``: true/false (both switches), or {conv: bool, matmul: bool} (ATC's two switches), or
    the CLI's ``conv=true,matmul=false``: each switch at most once, each part ``SWITCH=true|false``."""
    def flag(v: Any, switch: str) -> bool:
        if isinstance(v, bool):
            return v
        text = str(v).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise UserError(f"{name} {switch + ' ' if switch else ''}must be true or false, not '{v}'", where)

    if isinstance(value, dict):
        unknown = set(value) - {"conv", "matmul"}
        if unknown:
            raise UserError(f"{name} takes conv and matmul, not {', '.join(sorted(map(str, unknown)))}", where)
        return {k: flag(v, k) for k, v in value.items()}
    if isinstance(value, str) and "=" in value:  # the CLI's conv=true,matmul=false
        pairs: dict[str, str] = {}
        for part in value.split(","):
            switch, sep, setting = part.strip().partition("=")
            switch = switch.strip()
            if not sep or not switch:
                raise UserError(f"{name} {value!r}: {part.strip()!r} is not SWITCH=true|false (conv=true,matmul=false)",
                                where)
            if switch in pairs:  # a dict would keep the last silently: which one was meant?
                raise UserError(f"{name} {value!r} sets {switch} twice; give each switch once "
                                "(conv=true,matmul=false)", where)
            pairs[switch] = setting.strip()
        return allow_hf32_arg(pairs, where, name)
    both = flag(value, "")
    return {"conv": both, "matmul": both}


def soc_problem(soc: Any) -> str | None:
    """Why a soc_version cannot be passed on: not text, or holding whitespace or a control character
    (a trailing newline from a shell's $(cat soc.txt) or a YAML block scalar). atc takes the name as the
    SoC's platform file's, so such a name is no SoC (``--soc_version`` is required and checked against
    the installed platforms, GE ``api/atc/main_impl.cc`` L881); the emulation would match it loosely."""
    if not isinstance(soc, str):
        return f"soc_version {soc!r} is not a SoC name; give one such as Ascend310P3"
    odd = next((c for c in soc if c.isspace() or not c.isprintable()), None)
    if odd is None:
        return None
    where = "at its end" if soc.rstrip() != soc else "at its start" if soc.lstrip() != soc else "inside it"
    what = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab", " ": "a space"}.get(odd, f"{odd!r}")
    return (f"soc_version {soc!r} holds {what} {where}: atc would take it as part of the SoC's name; "
            f"write {''.join(c for c in soc if not (c.isspace() or not c.isprintable())) or 'the SoC'}")


def check_params(params: dict[str, Any], where: Location | None = None, *,
                 spelled: Callable[[str], str] | None = None) -> None:
    """The checks atc makes of its options before converting, on the params' values alone (no file is
    read), each a ``UserError`` whose ``location.field`` names the param. One place: ``resolve`` (every
    convert, tune and fix, both backends) and ``validate`` (the convert and tune kinds'
    ``check_params``, located at the value's YAML line) both call it; a new setting adds its check here.
    ``spelled``: how the user wrote a param (the CLI's ``--precision-mode``), for the messages."""
    where = where or Location()
    name = spelled or (lambda key: key)
    loc = lambda key: Location(**{**where.parts(), "field": key})
    for key, value in params.items():  # a flag given "" (an unset shell variable): never the default silently
        if isinstance(value, str) and not value.strip():
            raise UserError(f"{name(key)} is empty ({value!r}); give a value or leave it out", loc(key))
    soc = params.get("soc_version")
    if soc is not None and soc_problem(soc):
        raise UserError(soc_problem(soc).replace("soc_version", name("soc_version"), 1), loc("soc_version"))
    mode, mode_v2 = params.get("precision_mode"), params.get("precision_mode_v2")
    if mode and mode_v2:  # GE option_utils.cc L1359-1371 (CheckPrecisionModeV2Conflict): E10056
        raise UserError(f"{name('precision_mode')} and {name('precision_mode_v2')} cannot be combined (as on ATC: "
                        "\"Cannot config both\"); keep one", loc("precision_mode_v2"))
    if mode and mode not in PRECISION_MODES:
        raise UserError(f"{name('precision_mode')} '{mode}' is not one of {', '.join(PRECISION_MODES)}",
                        loc("precision_mode"))
    if mode_v2 and mode_v2 not in PRECISION_MODES_V2 + HIF8_MODES:
        raise UserError(f"{name('precision_mode_v2')} '{mode_v2}' is not one of "
                        f"{', '.join(PRECISION_MODES_V2 + HIF8_MODES)}", loc("precision_mode_v2"))
    check_soc_modes(mode, mode_v2, soc, where, spelled)
    overflow = params.get("overflow_mode")
    if overflow is not None:
        from ascendpipe.precision.atc_passes import OVERFLOW_MODES

        if overflow not in OVERFLOW_MODES:
            raise UserError(f"overflow_mode '{overflow}' is not one of {', '.join(OVERFLOW_MODES)}",
                            loc("overflow_mode"))
        if overflow == "inf_nan" and chips.family(soc) in SATURATION_ONLY:
            raise UserError(f"overflow_mode inf_nan: {soc} supports only saturation mode (aclrtFloatOverflowMode, "
                            "set_device_sat_mode); leave overflow_mode out", loc("overflow_mode"))
    if params.get("allow_hf32") is not None:
        allow_hf32_arg(params["allow_hf32"], loc("allow_hf32"), name("allow_hf32"))
    if params.get("insert_op_conf") and params.get("aipp"):
        raise UserError("give aipp or insert_op_conf, not both", loc("aipp"))
    if params.get("modify_mixlist") and mode_v2 not in HIF8_MODES:
        policy = MODE_V2_POLICY[mode_v2] if mode_v2 else MODE_POLICY[mode or DEFAULT_MODE]
        if policy not in ("mixed", "mixed_bf16"):  # option_utils.cc CheckModifyMixlistParamValid
            raise UserError("modify_mixlist needs a mixed mode (allow_mix_precision[_bf16], mixed_float16 or "
                            "mixed_bfloat16), as on ATC", loc("modify_mixlist"))


def resolve(params: dict[str, Any], read_path: Callable[[str], Path] = Path, where: Location | None = None) -> ConvertSettings:
    """Settings from params. File-valued params are opened through ``read_path`` (relative -> absolute)."""
    where = where or Location()
    loc = lambda f: Location(**{**where.parts(), "field": f})
    check_params(params, where)
    mode, mode_v2 = params.get("precision_mode"), params.get("precision_mode_v2")
    if mode_v2 in HIF8_MODES:
        raise UserError(f"precision_mode_v2 '{mode_v2}' (HiFloat8) is not emulated: use --backend ascend",
                        loc("precision_mode_v2"))
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

    s.overflow_mode = params.get("overflow_mode")  # checked (check_params)
    if params.get("allow_hf32") is not None:
        s.allow_hf32 = allow_hf32_arg(params["allow_hf32"], loc("allow_hf32"))

    if params.get("insert_op_conf"):
        path = read_path(params["insert_op_conf"])
        s.aipp, s.aipp_file = remedy.read_aipp(path), str(path)
    elif params.get("aipp"):
        aipp = params["aipp"]
        s.aipp = [dict(b) for b in (aipp if isinstance(aipp, list) else [aipp])]
        s.aipp_file = where.file or "<aipp>"

    s.customize_dtypes = customize_dtypes_arg(params.get("customize_dtypes"), read_path, where)

    mixlist = params.get("modify_mixlist")
    if mixlist:
        s.modify_mixlist = remedy.read_mixlist(read_path(mixlist)) if isinstance(mixlist, str) else remedy.validate_mixlist(mixlist)

    _impl_settings(s, params, read_path, loc)

    if params.get("input_shape"):
        s.input_shape = parse_input_shape(str(params["input_shape"]), loc("input_shape"))
    s.input_format = params.get("input_format")
    s.soc_version = params.get("soc_version")
    s.tune_bank = str(read_path(params["tune_bank"])) if params.get("tune_bank") else None
    return s


def _impl_settings(s: ConvertSettings, params: dict[str, Any], read_path: Callable[[str], Path], loc) -> None:
    """op_select_implmode, optypelist_for_implmode, op_precision_mode: checked as atc checks them
    (precision/implmode.py); the op_precision_mode file read as the FE reads it."""
    from ascendpipe.precision import implmode

    mode = params.get("op_select_implmode")
    listed = implmode.op_type_list(params.get("optypelist_for_implmode"))
    try:
        implmode.check_settings(mode, listed)
    except implmode.ImplModeError as exc:
        raise UserError(str(exc), loc("optypelist_for_implmode" if listed and not mode else "op_select_implmode")) \
            from None
    s.op_select_implmode = mode or None
    s.optypelist_for_implmode = listed
    if params.get("op_precision_mode"):
        path = read_path(str(params["op_precision_mode"]))
        # atc: E10001 "Path defined by op_precision_mode is not found." (main_impl.cc L912-917)
        if not Path(path).is_file():
            raise UserError(f"op_precision_mode file {path} is not found (atc E10001)", loc("op_precision_mode"))
        s.op_precision_mode = (str(path), remedy.read_text(path, "op_precision_mode"))
