"""The impl-mode remedy: an ``--op_precision_mode`` line ``<GE op type>=high_precision`` for an op whose
fp16 kernel loses what its fp32 golden holds. Pure: plan entries and texts in, facts and texts out.

When it is a remedy (``restores``): the kernel table (``precision.kernels.remedy_effect``, remedy
``impl_mode``) says the op's kernel computes differently under high_precision on this SoC, AND it then
computes in more precision than now (fp16 -> fp32 inside). A change inside fp32 (LayerNorm on
310P/910/910B: rstd by ``exp(-0.5 log)`` or by ``1/sqrt``, both in fp32) cannot restore what fp16
rounding lost, so it is never proposed there. Never for an op type whose mode is already high_precision.
On Ascend310 this holds for LayerNorm (``layer_norm.py`` L614-623: fp16 throughout under
high_performance, fp32 inside under high_precision) and ReduceMeanD (``reduce_mean_d.py`` L69-87);
not for Tanh, Gelu, Exp, Pow, Sigmoid or SoftmaxV2, whose fp16 steps there are fp16 in every mode (no
fp32 vexp/vlog on Ascend310: ``precision/kernel_table.py``).

The file (``ini_text``): ATC reads an ``--op_precision_mode`` file INSTEAD of the ``op_select_implmode``
ini (GE's FE, ``op_impl_mode_config_parser.cc`` L173-176), so the file carries the modes already in force
(the stage's own file, or the ini its op_select_implmode reads, as the precision plan records them) with
the remedy's lines over them: every other op keeps the mode it had. Lines are sorted, so one remedy set
always gives one text (and one cache key).
"""

from __future__ import annotations

from ascendpipe.precision import kernels

HIGH_PRECISION = "high_precision"
FILE_NAME = "op_precision_mode.ini"
_RANK = {"float16": 0, "mixed": 1, "float32": 2}
# SoCs named where no setting on this one changes a kernel: the classes with float32 vexp/vlog
_FP32_SOCS = ("Ascend310P3", "Ascend910B1")


def restores(ge_type: str, *, soc_version: str | None, impl_mode: str | None, reads_fp16: bool = True,
             dynamic: bool = False) -> kernels.Effect:
    """Whether ``ge_type``'s kernel computes in more precision under high_precision than in ``impl_mode``
    (the mode it has now) on this SoC; ``why`` says what changes, or why nothing that can help does."""
    if impl_mode == HIGH_PRECISION:
        return kernels.Effect(False, f"{ge_type} already runs under {HIGH_PRECISION}")
    effect = kernels.remedy_effect(ge_type, soc_version=soc_version, remedy="impl_mode", value=HIGH_PRECISION,
                                   impl_mode=impl_mode, reads_fp16=reads_fp16, dynamic=dynamic)
    if not effect.changes:
        return effect
    dtype = "float16" if reads_fp16 else "float32"
    now = kernels.kernel(ge_type, soc_version=soc_version, impl_mode=impl_mode, dtype=dtype, dynamic=dynamic)
    then = kernels.kernel(ge_type, soc_version=soc_version, impl_mode=HIGH_PRECISION, dtype=dtype, dynamic=dynamic)
    if _RANK.get(then.compute, 0) <= _RANK.get(now.compute, 0):
        return kernels.Effect(False, f"{ge_type} computes in {now.compute} in either mode ({effect.why}): "
                                     "no fp16 rounding to take back")
    return kernels.Effect(True, f"{effect.why} [{then.source}]")


FP16_MAX = 65504.0


def boundary_holds(op: str, peaks: dict[str, float], producers: dict[str, list[str]] | None) -> bool:
    """Whether the op's golden output and inputs lie within fp16's range (``peaks``: op -> largest golden
    |value|; ``producers``: op -> the ops it reads). An impl mode changes only the kernel's inside: the
    data crosses its boundary in fp16 all the same, so a value beyond 65504 there (an overflow reaching
    or leaving the op) is restored by no mode; keep_dtype, which makes the tensor fp32, is what can."""
    ops = [op, *((producers or {}).get(op) or [])]
    return all((peaks.get(name) or 0.0) <= FP16_MAX for name in ops)


def node_effect(entry: dict, soc_version: str | None) -> kernels.Effect | None:
    """``restores`` for one precision-plan node entry (None: the op has no kernel row)."""
    kernel = entry.get("kernel") or {}
    ge_type = entry.get("ge_type") or kernel.get("ge_type")
    if not ge_type or not kernel:
        return None
    return restores(ge_type, soc_version=soc_version, impl_mode=kernel.get("impl_mode"),
                    reads_fp16=bool(entry.get("reads_fp16", entry.get("dtype") == "float16")),
                    dynamic=kernel.get("file") == "dynamic")


def remedies(plan: dict | None, soc_version: str | None, fused_map: dict | None = None) -> dict[str, str]:
    """Original op name -> GE type, for every op whose kernel high_precision restores (``restores``);
    a fused node's name stands for its original ops (fused_map.json's ``fused``)."""
    nodes = (plan or {}).get("nodes") or {}
    fused = (fused_map or {}).get("fused") or {}
    found: dict[str, str] = {}
    effects: dict[tuple, bool] = {}
    for name, entry in nodes.items():
        kernel = entry.get("kernel") or {}
        key = (entry.get("ge_type"), kernel.get("impl_mode"), entry.get("reads_fp16"), kernel.get("file"))
        if key not in effects:
            effect = node_effect(entry, soc_version)
            effects[key] = bool(effect and effect.changes)
        if effects[key]:
            for op in fused.get(name) or [name]:
                found[op] = entry.get("ge_type") or kernel.get("ge_type")
    return found


def unchangeable(entry: dict, soc_version: str | None) -> str | None:
    """Where neither keep_dtype (the plan's ``keepable`` false) nor any impl mode changes the op's kernel on
    this SoC: the sentence saying so, naming the SoCs whose kernel computes it in fp32; else None."""
    kernel = entry.get("kernel") or {}
    ge_type = entry.get("ge_type") or kernel.get("ge_type")
    if not ge_type or not kernel or entry.get("keepable", True):
        return None
    reads_fp16 = bool(entry.get("reads_fp16", entry.get("dtype") == "float16"))
    dynamic = kernel.get("file") == "dynamic"
    for mode in ("high_precision", "high_performance"):
        if kernels.remedy_effect(ge_type, soc_version=soc_version, remedy="impl_mode", value=mode,
                                 impl_mode=kernel.get("impl_mode"), reads_fp16=reads_fp16, dynamic=dynamic).changes:
            return None
    now = kernels.kernel(ge_type, soc_version=soc_version, impl_mode=kernel.get("impl_mode"),
                         dtype="float32" if not reads_fp16 else "float16", dynamic=dynamic)
    better = [soc for soc in _FP32_SOCS
              if kernels.kernel(ge_type, soc_version=soc, impl_mode=HIGH_PRECISION, dtype="float32").compute == "float32"]
    where = (f"; a SoC whose {ge_type} kernel computes in fp32 does (e.g. {', '.join(better)}: float32 vexp/vlog)"
             if better else "")
    kept = f"; kept in fp32: {entry['keep_changes_nothing']}" if entry.get("keep_changes_nothing") else ""
    return (f"no keep_dtype or impl mode changes the {ge_type} kernel on {soc_version or 'Ascend310 (no SoC given)'}: "
            f"{now.rounding} ({now.source}){kept}{where}")


def ini_text(base_by_type: dict[str, str] | None, base_by_name: dict[str, str] | None, op_types) -> str:
    """The ``--op_precision_mode`` file: the modes in force (``base_*``) with ``op_types`` set to
    high_precision; sorted lines (``[ByNodeName]`` after the types, as the FE's parser reads them)."""
    by_type = {**(base_by_type or {}), **{t: HIGH_PRECISION for t in op_types}}
    lines = [f"{t}={m}" for t, m in sorted(by_type.items())]
    if base_by_name:
        lines += ["[ByNodeName]", *(f"{n}={m}" for n, m in sorted(base_by_name.items()))]
    return "\n".join(lines) + "\n"


def file_name(text: str) -> str:
    """A content-named file (``op_precision_mode-<12 hex>.ini``): a path param whose file changes in place
    could answer from a cache made for other contents; a name per content cannot."""
    from hashlib import sha256

    return f"op_precision_mode-{sha256(text.encode()).hexdigest()[:12]}.ini"
