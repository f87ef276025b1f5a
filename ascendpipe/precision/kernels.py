"""The kernel table: what ATC's kernel for an op computes in, per SoC class and implementation mode, and
what a remedy changes of it. Pure: no onnx, no I/O.

``kernel(ge_type, ...)`` picks the row of ``kernel_table.TABLE`` (each with its source line) for an op
as ATC names it (``precision.ge_types.ge_type``), the SoC, the op's impl mode (``precision.implmode``),
its input dtype and, for LayerNorm, its shape. The emulation computes the op as the row's ``recipe``
says (``backends/onnxruntime/kernel_lowering.py``): where a kernel is fp16 inside, its intermediates
are rounded to fp16; where it is fp32 inside, only its outputs are ("boundary").

``remedy_effect(...)`` answers "does keeping op X in fp32 / switching pass P off / impl mode M change
what this kernel computes?" (fix and the advisor ask it before proposing a remedy).

SoC classes (the DSL's dtype table, kernel_table.py): "310" = Ascend310 (Atlas 200/300; no fp32
vexp/vlog), "fp32" = 310P, 310B, 910, 910B, 910_93 (float32 vexp), "950" = Ascend 950 (AscendC
kernels: fp32 inside, round to nearest on the way back; hicann/ops-math ``math/exp/op_kernel/arch35/
exp_dag.h`` L53-85). An unknown or absent SoC is taken as "310": the side that shows an fp16
failure, and the family the catalogue's passes default to (atc_passes.applies_to).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascendpipe.precision import kernel_table as kt

# Where the sources are silent, our choice (docs/emulation.md, "Unknowns"): ReduceMeanD's impl mode.
# high_performance.ini lists ReduceMean, not ReduceMeanD. GE's FE of 2026 sets the mode by op type on the
# original graph (op_setter.cc L255-286, before graph fusion) and ConstToAttrPass copies the op desc
# (canndev pattern_fusion_util.cc L196/L519 CopyOpDesc), which would hand ReduceMeanD high_performance:
# then the static kernel on 310P/910 would compute in fp16 (reduce_mean_d.py L76-80). The 2022 FE that
# compiled the kernels we read is not public, and the kernel's own default (None -> high_precision off
# Ascend310, L69-73) is written for an op that gets no mode. False: ReduceMeanD gets no mode.
REDUCE_MEAN_D_INHERITS_MODE = False

SQRT_FP32_SOCS = "every"  # vsqrt takes float32 on Ascend310 too (util.py L572-582)
LN_WIDTHS_CUBE = (1024, 768, 96, 384, 192, 128, 512, 256)  # layer_norm.py L343 (FRACTAL_NZ only; not modelled)


@dataclass(frozen=True)
class Kernel:
    """The kernel an op runs as: its GE type, the recipe the emulation computes it with, in words where it
    rounds, the source row, and the impl mode and kernel file it was chosen for."""

    ge_type: str
    recipe: str
    compute: str
    rounding: str
    source: str
    impl_mode: str | None = None
    file: str = "static"
    params: tuple = field(default=())  # extra facts for the recipe: (('shape', ...), ('cores', 8))

    def record(self) -> dict:
        return {"ge_type": self.ge_type, "recipe": self.recipe, "compute": self.compute, "rounding": self.rounding,
                "impl_mode": self.impl_mode, "file": self.file, "source": self.source}

    @property
    def inside_fp16(self) -> bool:
        """Whether the emulation must compute it step by step (it is not fp32 inside with one rounding)."""
        return self.recipe != "boundary"


def soc_class(soc_version: str | None) -> str:
    from ascendpipe.precision.chips import family

    fam = family(soc_version)
    if fam == "950":
        return "950"
    return "fp32" if fam in ("310P", "310B", "training", "A2", "A3") else "310"


def kernel_file(ge_type: str, soc_version: str | None, dynamic: bool = False) -> str:
    """'dynamic' when ATC compiles the op with ``impl/dynamic/<op>.py`` (a dynamic-shape model, or the
    SoC's ops-info sets dynamicCompileStatic), else 'static'."""
    from ascendpipe.precision.chips import family

    if dynamic:
        return "dynamic"
    return "dynamic" if ge_type in kt.DYNAMIC_STATIC.get(family(soc_version) or "", {}) else "static"


def effective_mode(ge_type: str, given: str | None, file: str) -> str | None:
    """The impl mode the kernel sees: the one the FE gives, else the kernel's own default."""
    if given is not None:
        return given
    return kt.KERNEL_DEFAULT_MODE.get((ge_type, file))


def _row(ge_type: str, socs: tuple[str, ...], mode: str | None) -> kt.Row | None:
    """The row for the type: the most specific SoC first, an exact mode before 'any'."""
    rows = [r for r in kt.TABLE if r.ge_type == ge_type]
    for soc in socs:
        for want in (mode, "any"):
            for r in rows:
                if r.socs == soc and r.modes == want:
                    return r
    return None


def kernel(ge_type: str, *, soc_version: str | None, impl_mode: str | None = None, dtype: str = "float16",
           dynamic: bool = False, shape: tuple | None = None, begin_norm_axis: int | None = None) -> Kernel:
    """What the kernel of ``ge_type`` computes for a ``dtype`` input on this SoC. ``impl_mode``: the
    mode the FE gives the op (None: it gets none, the kernel's default applies); ``shape`` and
    ``begin_norm_axis``: a LayerNorm's input, for its route (static vector kernel or the template)."""
    from ascendpipe.precision.chips import family

    cls = soc_class(soc_version)
    fam = family(soc_version) or ""
    file = kernel_file(ge_type, soc_version, dynamic)
    mode = effective_mode(ge_type, impl_mode, file)
    if ge_type == "ReduceMeanD" and impl_mode is None and file == "static":
        mode = "high_performance" if cls == "310" or REDUCE_MEAN_D_INHERITS_MODE else "high_precision"  # L69-73
    if ge_type == "Gelu" and mode is None:
        mode = "high_precision"  # gelu.py L78: None takes the fp32 path
    if cls == "950":
        return Kernel(ge_type, "boundary", "float32", "AscendC kernel: fp32 inside, one rounding at the output",
                      "hicann/ops-math math/*/op_kernel/arch35 (ascend950 only)", mode, "ascendc")
    if dtype == "float32":
        return _fp32_kernel(ge_type, cls, mode, file)
    if ge_type == "LayerNorm":
        return _layer_norm(cls, fam, soc_version, mode, file, dynamic, shape, begin_norm_axis)
    static = f"{fam} static" if file == "static" else ""
    socs = (static, cls, "all") if cls == "310" else (static, f"{cls} {file}", fam, cls, "all")
    if ge_type == "RealDiv" and file == "dynamic" and mode != "high_performance" and cls == "fp32":
        return Kernel(ge_type, "boundary", "float32", "fp32 vdiv (dynamic file, impl_mode not high_performance)",
                      kt.IMPL + "dynamic/real_div.py L92-96", mode, file)
    row = _row(ge_type, socs, mode)
    if row is None:
        return Kernel(ge_type, "boundary", "float32" if cls == "fp32" else "float16",
                      "not in the kernel table: computed in fp32, rounded at its outputs", "not read", mode, file)
    return Kernel(ge_type, row.recipe, row.compute, row.rounding, row.source, mode, file)


def _fp32_kernel(ge_type: str, cls: str, mode: str | None, file: str) -> Kernel:
    """A kernel fed fp32 (keep_dtype, a black-list op, force_fp32): fp32 inside, except the steps
    Ascend310 has no fp32 instruction for."""
    if cls == "310" and ge_type in kt.FP32_ON_310:
        recipe, words, source = kt.FP32_ON_310[ge_type]
        return Kernel(ge_type, recipe, "mixed", words, source, mode, file)
    if ge_type == "LayerNorm":
        return Kernel(ge_type, "layer_norm_fp32_input", "float32", "fp32 throughout (no cast: the input is fp32)",
                      kt.IMPL + "layer_norm.py L612-623 (dtype float32: no cast)", mode, file)
    if ge_type == "Gelu":
        return Kernel(ge_type, "gelu_tanh", "float32", "tanh approximation in fp32", kt.IMPL + "gelu.py L74-118",
                      mode, file)
    if ge_type == "BNInferenceD":
        return Kernel(ge_type, "bninference_fp32", "float32", "(x + mean') * var' * scale + bias in fp32",
                      kt.IMPL + "bninference_d.py L177-222", mode, file)
    return Kernel(ge_type, "boundary", "float32", "fp32 inside", "fp32 input: no cast", mode, file)


def _layer_norm(cls, fam, soc_version, mode, file, dynamic, shape, begin_norm_axis) -> Kernel:
    """LayerNorm: fp32 inside where it casts (fp32 vexp and high_performance, or high_precision: layer_norm.py
    L614-623), fp16 throughout on Ascend310 under high_performance; on 910/310P a static ND shape the
    multi-core tiling cannot split, and every dynamic shape, takes the dynamic template, which rounds mean
    and variance through fp16 (precision/layernorm_route.py)."""
    from ascendpipe.precision import layernorm_route

    casts = mode == "high_precision" or (cls == "fp32" and mode == "high_performance")
    if mode == "keep_fp16":
        row = _row("LayerNorm", ("all",), "keep_fp16")
    elif mode == "high_precision":
        row = _row("LayerNorm", ("all",), "high_precision")
    else:
        row = _row("LayerNorm", (cls,), "high_performance")
    why = ""
    if casts and dynamic:
        why = "a dynamic-shape model compiles impl/dynamic/layer_norm.py"
    elif casts and fam in ("training", "310P") and shape is not None and begin_norm_axis is not None \
            and all(isinstance(d, int) and d > 0 for d in shape):
        cores = layernorm_route.core_count(soc_version, fam)
        white = list(shape) == [50, 32, 768]  # layer_norm_unify.py L82-94 (_is_in_white_list)
        if white or layernorm_route.takes_template(list(shape), begin_norm_axis, mode, "float16", cores):
            why = f"layer_norm_unify.is_special_cases for shape {list(shape)} on {fam} ({cores} AI cores)"
    if why:
        t = _row("LayerNorm", ("fp32",), "template")
        normalize = "log_exp" if mode == "high_performance" or fam == "training" else "sqrt"  # dynamic L548
        return Kernel("LayerNorm", t.recipe, t.compute, f"{t.rounding} [{why}]", t.source, mode, "dynamic",
                      (("normalize", normalize),))
    normalize = "sqrt" if mode == "high_precision" else "log_exp"
    return Kernel("LayerNorm", row.recipe, row.compute, row.rounding, row.source, mode, file,
                  (("normalize", normalize),))


# --- what a remedy changes -------------------------------------------------------------------------

@dataclass(frozen=True)
class Effect:
    changes: bool
    why: str


def remedy_effect(ge_type: str, *, soc_version: str | None, remedy: str, value: str | None = None,
                  impl_mode: str | None = None, reads_fp16: bool = True, dynamic: bool = False,
                  shape: tuple | None = None, begin_norm_axis: int | None = None) -> Effect:
    """Whether ``remedy`` changes what the kernel of ``ge_type`` computes.

    ``remedy``: 'keep_dtype' (the op computes from fp32 input), 'impl_mode' (``value``: the mode to give
    it), or 'fusion_switch' (``value``: an ATC pass name switched off). ``impl_mode``: the mode it has
    now (None: none given); ``reads_fp16``: whether it reads fp16 now (False: keep_dtype is moot)."""
    now = kernel(ge_type, soc_version=soc_version, impl_mode=impl_mode, dtype="float16" if reads_fp16 else "float32",
                 dynamic=dynamic, shape=shape, begin_norm_axis=begin_norm_axis)
    if remedy == "keep_dtype":
        if not reads_fp16:
            return Effect(False, f"{ge_type} already computes from fp32 input")
        if soc_class(soc_version) == "310" and ge_type in kt.KEEP_CHANGES_NOTHING_ON_310:
            return Effect(False, f"{ge_type} computes in fp16 on {soc_version or 'Ascend310'} whatever its input: "
                                 f"{kt.KEEP_CHANGES_NOTHING_ON_310[ge_type]}; a SoC with fp32 vexp/vlog (310P, 310B, "
                                 "910, 910B) computes it in fp32 when kept")
        kept = kernel(ge_type, soc_version=soc_version, impl_mode=impl_mode, dtype="float32", dynamic=dynamic)
        return Effect(True, f"fp32 input: {kept.rounding} (was: {now.rounding})")
    if remedy == "impl_mode":
        then = kernel(ge_type, soc_version=soc_version, impl_mode=value,
                      dtype="float16" if reads_fp16 else "float32", dynamic=dynamic, shape=shape,
                      begin_norm_axis=begin_norm_axis)
        if (then.recipe, then.params) != (now.recipe, now.params):
            return Effect(True, f"{value}: {then.rounding} (was: {now.rounding})")
        return Effect(False, f"{ge_type} computes the same under {value}: {now.rounding} ({now.source})")
    if remedy == "fusion_switch":
        from ascendpipe.precision import atc_passes

        entry = atc_passes.BY_NAME.get(value or "")
        if entry is None:
            return Effect(False, f"'{value}' fuses nothing in the emulation")
        if not atc_passes.switchable(entry.name):
            return Effect(False, f"{entry.name} cannot be switched off ({atc_passes.unswitchable_message(entry.name)})")
        if entry.effect == atc_passes.UB_NAMED:
            return Effect(False, f"{entry.name} is a UB fusion: each member keeps its own dtype inside the fused "
                                 "kernel, so switching it off changes no value (docs/emulation.md)")
        if entry.effect == atc_passes.KERNEL:  # an ONNX graph pass: the chain then runs op by op
            return Effect(True, f"{entry.name} off: its chain runs op by op, each op rounded as the mode says, instead "
                                f"of as one kernel ({entry.note})")
        return Effect(True, f"{entry.name} off: {entry.note}")
    raise ValueError(f"unknown remedy {remedy!r}")
