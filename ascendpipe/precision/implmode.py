"""ATC's per-op implementation modes: ``--op_select_implmode``, ``--optypelist_for_implmode`` and
``--op_precision_mode FILE``, validated and resolved as ATC does. Pure: takes the texts, reads no file.

What the sources say (GE = GitHub hicann/ge at ffdcbc9f; CANNDEV = dengguojie/vue-element-admin
branch stp at 7290acc7, canndev 2022):

- atc's own check (GE ``api/atc/main_impl.cc`` L907-917, ``compiler/api/aclgrph/option_utils.cc``
  L1275-1305): ``--optypelist_for_implmode`` needs ``--op_select_implmode`` (E10001 "Parameters
  --op_select_implmode and --optypelist_for_implmode must be set at the same time."); the mode
  must be one of high_performance, high_precision, high_precision_for_all, high_performance_for_all
  (the check also lets enable_float_32_execution / enable_hi_float_32_execution through, but the FE
  then fails on them: ``op_impl_mode_config_parser.cc`` L184-201, "not within the valid range");
  ``--op_precision_mode`` must name an existing file with a valid path (E10001 "Path defined by
  op_precision_mode is not found.").
- the FE (``compiler/engines/nn_engine/utils/common/config_parser/op_impl_mode_config_parser.cc``):
  the default mode is high_performance (L29, L110-121); ``--op_precision_mode`` wins over the other
  two (L173-176): its file alone is read, no impl_mode ini; a high_*_for_all mode reads its ini
  (L184-187, L228-242); high_precision / high_performance read ``impl_mode/<mode>.ini``, or, with
  ``--optypelist_for_implmode``, give that mode to the listed op types only (L244-268). A file is
  ``OpType=mode`` lines; ``#`` at the line start is a comment; ``[ByNodeName]`` / ``[ByOpType]``
  switch what the key names (L338-357); a mode outside ``kSupportImpyType`` (L49-56) is skipped with
  a warning, as is an empty key or mode (L304-326). An op's mode: by its node name first, then by
  its GE type (L381-387); an op found in neither keeps its kernel's own default.
- The built-in ini files: CANNDEV ``ops/built-in/tbe/impl_mode/*.ini`` (below, as read); a CANN
  install's own files (``opp/built-in/op_impl/ai_core/tbe/impl_mode/``) replace them when given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SELECT_MODES = ("high_performance", "high_precision", "high_precision_for_all", "high_performance_for_all")
DEFAULT_SELECT_MODE = "high_performance"
# op_impl_mode_config_parser.cc L49-56 (kSupportImpyType)
FILE_MODES = ("high_performance", "enable_float_32_execution", "enable_hi_float_32_execution", "high_precision",
              "support_out_of_bound_index", "super_performance", "norm_class", "keep_fp16")
INI_SOURCE = "CANNDEV ops/built-in/tbe/impl_mode/{name}.ini (canndev 7290acc7)"


def _ini(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.split())


# CANNDEV ops/built-in/tbe/impl_mode/*.ini, line for line (28, 28, 29 and 29 entries)
BUILT_IN_INI: dict[str, dict[str, str]] = {
    "high_performance": _ini("""
        AvgPoolV2=high_performance BasicLSTMCellV2=high_performance BatchMultiClassNonMaxSuppression=high_performance
        CombinedNonMaxSuppression=high_performance DynamicLSTMV2=high_performance FastGeluGrad=high_performance
        FastGelu=high_performance Gelu=high_precision INInferV2=high_performance LayerNorm=high_performance
        LNDropoutGrad=high_performance LogSoftmaxV2=high_performance LRN=high_performance Pooling=high_performance
        ReduceMean=high_performance SoftmaxV2=high_performance Sqrt=high_performance Mish=high_performance
        BasicRNN=high_performance ROIAlign=high_performance KMeansCentroids=high_performance FloorMod=high_performance
        Exp=high_performance Threshold=high_performance RealDiv=high_performance Gather=high_precision
        GatherV2=high_precision UnsortedSegmentSum=high_precision"""),
    "high_precision": _ini("""
        AvgPoolV2=high_precision BasicLSTMCellV2=high_precision BatchMultiClassNonMaxSuppression=high_precision
        CombinedNonMaxSuppression=high_precision DynamicLSTMV2=high_precision FastGeluGrad=high_precision
        FastGelu=high_precision Gelu=high_precision INInferV2=high_precision LayerNorm=high_precision
        LNDropoutGrad=high_precision LogSoftmaxV2=high_precision LRN=high_precision Pooling=high_precision
        ReduceMean=high_precision SoftmaxV2=high_precision Sqrt=high_precision Mish=high_precision
        BasicRNN=high_precision ROIAlign=high_precision KMeansCentroids=high_precision Exp=high_precision
        Threshold=high_precision FloorMod=high_precision RealDiv=high_precision Gather=high_precision
        GatherV2=high_precision UnsortedSegmentSum=high_precision"""),
    "high_performance_for_all": _ini("""
        AvgPoolV2=high_performance Gelu=high_performance BasicLSTMCellV2=high_performance
        BatchMultiClassNonMaxSuppression=high_performance CombinedNonMaxSuppression=high_performance
        DynamicLSTMV2=high_performance FastGeluGrad=high_performance FastGelu=high_performance
        INInferV2=high_performance LayerNorm=high_performance LNDropoutGrad=high_performance
        LogSoftmaxV2=high_performance LRN=high_performance Pooling=high_performance ReduceMean=high_performance
        SoftmaxV2=high_performance Sqrt=high_performance Mish=high_performance BasicRNN=high_performance
        ROIAlign=high_performance KMeansCentroids=high_performance FloorMod=high_performance Exp=high_performance
        Threshold=high_performance RealDiv=high_performance Sigmoid=high_performance Gather=high_precision
        GatherV2=high_precision UnsortedSegmentSum=high_precision"""),
    "high_precision_for_all": _ini("""
        AvgPoolV2=high_precision Gelu=high_precision BasicLSTMCellV2=high_precision
        BatchMultiClassNonMaxSuppression=high_precision CombinedNonMaxSuppression=high_precision
        DynamicLSTMV2=high_precision FastGeluGrad=high_precision FastGelu=high_precision INInferV2=high_precision
        LayerNorm=high_precision LNDropoutGrad=high_precision LogSoftmaxV2=high_precision LRN=high_precision
        Pooling=high_precision ReduceMean=high_precision SoftmaxV2=high_precision Sqrt=high_precision
        Mish=high_precision BasicRNN=high_precision ROIAlign=high_precision KMeansCentroids=high_precision
        Exp=high_precision Threshold=high_precision FloorMod=high_precision RealDiv=high_precision
        Sigmoid=high_precision Gather=high_precision GatherV2=high_precision UnsortedSegmentSum=high_precision"""),
}


class ImplModeError(ValueError):
    """A setting atc refuses (the caller turns it into a located UserError)."""


@dataclass
class PrecisionFile:
    """An ``--op_precision_mode`` file as the FE reads it."""

    by_type: dict[str, str] = field(default_factory=dict)
    by_name: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # 'line N: why', as the FE's warnings


def parse_precision_file(text: str) -> PrecisionFile:
    """``--op_precision_mode``'s ini, line by line as ``GetOpPrecisonModeStrFromConfigFile`` reads it
    (op_impl_mode_config_parser.cc L328-359): the first value of a repeated key wins (``emplace``)."""
    parsed = PrecisionFile()
    by_type = True
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            header = line.strip()
            if header in ("[ByNodeName]", "[ByOpType]"):
                by_type = header == "[ByOpType]"
            continue
        key, mode = (part.strip() for part in line.split("=", 1))
        if not key or not mode:
            parsed.skipped.append(f"line {number}: empty op type/name or mode")
            continue
        if mode not in FILE_MODES:
            parsed.skipped.append(f"line {number}: mode '{mode}' is not one of {', '.join(FILE_MODES)}")
            continue
        (parsed.by_type if by_type else parsed.by_name).setdefault(key, mode)
    return parsed


@dataclass(frozen=True)
class ImplModes:
    """The per-op modes a conversion compiles with: by node name, by GE type, and where they came from."""

    by_type: tuple[tuple[str, str], ...] = ()
    by_name: tuple[tuple[str, str], ...] = ()
    source: str = f"op_select_implmode {DEFAULT_SELECT_MODE} (ATC's default)"
    notes: tuple[str, ...] = ()  # what the FE skips or ignores, as its warnings say

    def mode_for(self, op_name: str, ge_type: str) -> str | None:
        """The mode the FE gives this op (by name, then by type: L381-387), None: the kernel's default."""
        names = dict(self.by_name)
        if op_name in names:
            return names[op_name]
        return dict(self.by_type).get(ge_type)

    def record(self) -> dict:
        return {"source": self.source, "by_type": dict(self.by_type), "by_name": dict(self.by_name)}


def check_settings(op_select_implmode: str | None, optypelist: str | list | None) -> None:
    """What atc refuses before it compiles anything (option_utils.cc L1275-1305; FE L184-201)."""
    if optypelist and not op_select_implmode:
        raise ImplModeError("optypelist_for_implmode needs op_select_implmode (atc E10001: \"Parameters "
                            "--op_select_implmode and --optypelist_for_implmode must be set at the same time.\")")
    if op_select_implmode and op_select_implmode not in SELECT_MODES:
        raise ImplModeError(f"op_select_implmode '{op_select_implmode}' is not one of {', '.join(SELECT_MODES)} "
                            "(atc E10001; op_impl_mode_config_parser.cc L184-201)")


def op_type_list(value: str | list | None) -> list[str]:
    if not value:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(item).strip() for item in items if str(item).strip()]


def resolve(op_select_implmode: str | None = None, optypelist: str | list | None = None,
            precision_file: PrecisionFile | None = None, precision_file_name: str | None = None,
            ini_files: dict[str, dict[str, str]] | None = None, ini_source: str | None = None) -> ImplModes:
    """The per-op modes, as ``InitOpPrecisionMode`` builds them (L169-202). ``ini_files``: a CANN
    install's impl_mode files by mode name (None: the canndev 2022 copies above)."""
    check_settings(op_select_implmode, optypelist)
    if precision_file is not None:  # wins over the other two (L173-176)
        ignored = [f"{flag} is ignored: op_precision_mode wins (--op_precision_mode.md)"
                   for flag, value in (("op_select_implmode", op_select_implmode),
                                       ("optypelist_for_implmode", optypelist)) if value]
        return ImplModes(tuple(sorted(precision_file.by_type.items())), tuple(sorted(precision_file.by_name.items())),
                         f"op_precision_mode {precision_file_name or 'file'}",
                         tuple(ignored + [f"op_precision_mode {s}: skipped" for s in precision_file.skipped]))
    mode = op_select_implmode or DEFAULT_SELECT_MODE
    given = "" if op_select_implmode else " (ATC's default)"
    listed = op_type_list(optypelist)
    if listed and mode.endswith("_for_all"):  # L184-187 read the _for_all ini before the list is looked at
        files = BUILT_IN_INI if ini_files is None else ini_files
        return ImplModes(tuple(sorted(files.get(mode, {}).items())), (), f"op_select_implmode {mode}: "
                         f"{ini_source or INI_SOURCE.format(name=mode)}",
                         (f"optypelist_for_implmode is ignored with {mode} (op_impl_mode_config_parser.cc L184-187)",))
    if listed:  # L246-251: only the listed types, no ini
        return ImplModes(tuple(sorted((t, mode) for t in listed)), (), f"op_select_implmode {mode} for "
                         f"optypelist_for_implmode {','.join(listed)}")
    files = BUILT_IN_INI if ini_files is None else ini_files
    where = ini_source or INI_SOURCE.format(name=mode)
    table = files.get(mode, {})  # a missing ini: no op gets a mode (L231-233, L255-258: a warning only)
    return ImplModes(tuple(sorted(table.items())), (), f"op_select_implmode {mode}{given}: {where}")


def read_ini_dir(texts: dict[str, str]) -> dict[str, dict[str, str]]:
    """A CANN install's impl_mode ini files (mode name -> file text), parsed as the FE parses them."""
    return {name: parse_precision_file(text).by_type for name, text in texts.items()}
