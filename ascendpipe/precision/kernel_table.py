"""The kernel table's data: what each Ascend kernel computes in, per SoC class and implementation mode,
each row with the source line it was read at. Data only; the choice of a row is in
``precision/kernels.py``.

Sources (each row names file and lines):
- CANNDEV: canndev's operator source, GitHub ``dengguojie/vue-element-admin`` branch ``stp``, commit
  7290acc77320c52bba6d22f40a8966b7f4544fc8 (2022-06-29); paths under ``ops/built-in/tbe/``. These are
  the legacy TBE kernels CANN still builds for 310/310P/910/910B; CANN 8.x's copies are not public
  and may differ (docs/emulation.md, "Unknowns").
- The SoC split is the DSL's dtype table (``auto_schedule/python/tbe/dsl/compute/util.py`` L517-538:
  ``vlog``/``vexp`` take float32 on 310P, 310B, 910, 910B, not on Ascend310; L262-272 ``reduce_sum``
  and L352-362 ``vdiv``, L572-582 ``vsqrt`` take float32 on 310 too): "fp32" below is every SoC
  with float32 ``vexp``, "310" Ascend310.
- Which file compiles a static shape: ``dynamicCompileStatic.flag=true`` in the SoC's
  ``op_info_cfg/ai_core/<soc>/aic-<soc>-ops-info.ini`` selects ``impl/dynamic/<op>.py`` (``DYNAMIC_STATIC``).
"""

from __future__ import annotations

from dataclasses import dataclass

COMMIT = "7290acc7"
CANNDEV = f"canndev {COMMIT} ops/built-in/tbe/"
IMPL = CANNDEV + "impl/"

# ops whose static shapes compile with impl/dynamic/<op>.py, per SoC family (dynamicCompileStatic.flag=true;
# the ini line): 310B and 910B (A2) flag them all, 310P and 910 none, 310 has no flag at all. SoftmaxV2,
# LogSoftmaxV2 and LayerNorm carry no flag on any SoC (static file).
DYNAMIC_STATIC = {
    "310B": {"ReduceMeanD": 1412, "ReduceSumD": 8840, "Exp": 5097, "Sqrt": 2236, "RealDiv": 2215, "Pow": 6385,
             "Gelu": 2387, "Erf": 5842, "Sigmoid": 9739, "Tanh": 2350, "BNInferenceD": 14914, "Square": 2284},
    "A2": {"ReduceMeanD": 2288, "ReduceSumD": 10267, "Exp": 6221, "Sqrt": 3137, "RealDiv": 3116, "Pow": 7682,
           "Gelu": 3303, "Erf": 7105, "Sigmoid": 11160, "Tanh": 3266, "BNInferenceD": 16335, "Square": 3198},
}
DYNAMIC_STATIC["A3"] = DYNAMIC_STATIC["A2"]  # no 2022 ini for Atlas A3: taken as A2's
INI_FILE = {"310B": "op_info_cfg/ai_core/ascend310b/aic-ascend310b-ops-info.ini",
            "A2": "op_info_cfg/ai_core/ascend910b/aic-ascend910b-ops-info.ini",
            "A3": "op_info_cfg/ai_core/ascend910b/aic-ascend910b-ops-info.ini"}

# the kernel's own impl_mode default (its python signature), used when the FE gives the op none
KERNEL_DEFAULT_MODE = {
    ("SoftmaxV2", "static"): "high_performance", ("SoftmaxV2", "dynamic"): "high_performance",
    ("LogSoftmaxV2", "static"): "high_performance", ("LogSoftmaxV2", "dynamic"): "high_performance",
    ("LayerNorm", "static"): "high_performance", ("LayerNorm", "dynamic"): "high_performance",
    ("ReduceMeanD", "static"): None, ("ReduceMeanD", "dynamic"): "high_performance",
    ("ReduceMean", "dynamic"): "high_performance",
    ("Exp", "static"): "high_performance", ("Exp", "dynamic"): "high_performance",
    ("Sqrt", "static"): "high_performance", ("Sqrt", "dynamic"): "high_performance",
    ("RealDiv", "dynamic"): "high_performance",
    ("Gelu", "static"): None, ("Gelu", "dynamic"): None,
    ("Sigmoid", "static"): "high_precision", ("Sigmoid", "dynamic"): "high_precision",
    ("Tanh", "static"): None,
}


@dataclass(frozen=True)
class Row:
    """One kernel behaviour: ``recipe`` names how the emulation computes it (backends/onnxruntime/
    kernel_lowering.py); ``rounding`` says, in words, where the kernel rounds to fp16 inside."""

    ge_type: str
    socs: str  # 'fp32' | '310' | 'all' | a family ('training', '310P')
    modes: str  # which impl modes: 'any', 'high_performance', 'high_precision', 'keep_fp16', ...
    compute: str  # 'float32' | 'float16' | 'mixed'
    recipe: str
    rounding: str
    source: str


TABLE: tuple[Row, ...] = (
    Row("SoftmaxV2", "fp32", "any", "mixed", "softmax", "x - max in fp16; exp, sum, divide in fp32; output fp16",
        IMPL + "softmax_v2.py L472-496, L521-524; dynamic/softmax_v2.py L157-176, L229-230"),
    Row("SoftmaxV2", "310", "any", "mixed", "softmax_exp16",
        "x - max in fp16; exp in fp16 (no fp32 vexp on 310); sum and divide in fp32; output fp16",
        IMPL + "softmax_v2.py L490-503 (\"data_exp.dtype == float16 and tbe_product in ('Ascend310',)\")"),
    Row("LogSoftmaxV2", "fp32", "any", "mixed", "log_softmax",
        "x - max in fp16; exp, sum, log, subtract in fp32; output fp16", IMPL + "log_softmax_v2.py L87-111"),
    Row("LogSoftmaxV2", "310", "any", "float16", "log_softmax_fp16",
        "x - max, exp, sum (fp16 accumulation), log and subtract all in fp16",
        IMPL + "log_softmax_v2.py L94-106 (the fp32 cast needs fp32 vexp)"),
    Row("ReduceMeanD", "fp32", "any", "float32", "boundary",
        "x * (1/N) then sum, in fp32; output fp16", IMPL + "reduce_mean_d.py L63-87, L132-137; "
        "dynamic/reduce_mean.py L35-52, dynamic/reduce_mean_d.py L81-114"),
    Row("ReduceMeanD", "310", "high_performance", "float16", "reduce_mean_fp16",
        "x * fp16(1/N) in fp16, then summed in fp16", IMPL + "reduce_mean_d.py L69-87 (None -> high_performance "
        "on Ascend310), L133-134"),
    Row("ReduceMeanD", "310", "any", "float32", "boundary",
        "x * (1/N) then sum, in fp32 (impl_mode not high_performance)", IMPL + "reduce_mean_d.py L81-86"),
    Row("ReduceMeanD", "fp32 static", "high_performance", "float16", "reduce_mean_fp16",
        "x * fp16(1/N) and the sum in fp16: the static file promotes only under high_precision",
        IMPL + "reduce_mean_d.py L76-80"),
    Row("ReduceSumD", "fp32", "any", "float32", "boundary", "sum in fp32; output fp16",
        IMPL + "reduce_sum_d.py L63-68; dynamic/reduce_sum_d.py L62-66"),
    Row("ReduceSumD", "310", "any", "float16", "reduce_sum_fp16", "sum accumulated in fp16",
        IMPL + "reduce_sum_d.py L63 (cce_product not in ('Ascend310',))"),
    Row("Exp", "fp32", "high_performance", "float16", "boundary", "vexp in fp16 (the output's own rounding)",
        IMPL + "exp.py L64-66; dynamic/exp.py L66-72; impl_mode/high_performance.ini L23"),
    Row("Exp", "310", "any", "float16", "boundary", "vexp in fp16 (no fp32 vexp on 310)", IMPL + "exp.py L64-66"),
    Row("Exp", "fp32", "high_precision", "float32", "boundary", "fp32 vexp; output fp16", IMPL + "exp.py L64-66"),
    Row("RealDiv", "all", "any", "float16", "boundary",
        "vdiv in the input dtype (static, always; dynamic under high_performance)",
        IMPL + "real_div.py L537-547; dynamic/real_div.py L90-108"),
    Row("Sqrt", "all", "any", "float32", "boundary", "fp32 vsqrt (float32 vsqrt on every SoC)",
        IMPL + "sqrt.py L49-63; dynamic/sqrt.py L51-66"),
    Row("Erf", "all", "any", "float32", "boundary", "fp32 polynomial; output fp16", IMPL + "erf.py L75-76"),
    Row("Pow", "fp32", "any", "float32", "boundary", "fp32 exp(y * ln x) with sign and zero handling",
        IMPL + "pow.py L173-177; dynamic/pow.py L205-209"),
    Row("Pow", "310", "any", "mixed", "pow_lnexp16", "ln|x|, y * ln|x| and exp in fp16 (no fp32 vlog on 310)",
        IMPL + "dynamic/pow.py L103-124, L128-166 (the static file calls vlog on its fp32 cast, which the "
        "DSL refuses on 310: not read further)"),
    Row("Square", "all", "any", "float16", "boundary", "x * x in the input dtype",
        CANNDEV.replace("tbe/", "") + "fusion_pass/graph_fusion/ai_core/pow_2_square_fusion_pass.cc L100-155 "
        "(Pow(x, 2.0) with a float32 scalar exponent becomes Square)"),
    Row("Sigmoid", "all", "any", "float16", "sigmoid",
        "-x, exp, +1 and the reciprocal each in fp16 (no upcast for fp16 input)",
        IMPL + "sigmoid.py L135-150; dynamic/sigmoid.py L51-75"),
    Row("Sigmoid", "training static", "any", "float16", "sigmoid_clamped",
        "as above, the input clamped below at fp16(-11.089) first: sigmoid >= 1.53e-5 (static file)",
        IMPL + "sigmoid.py L126-133"),
    Row("Sigmoid", "310P static", "high_performance", "float16", "sigmoid_poly",
        "clip(x(a + x^2(b + c x^2)) + 0.5, 0, 1) in fp16", IMPL + "sigmoid.py L62-91, L116-117"),
    Row("Tanh", "fp32", "any", "float32", "boundary", "fp32 (x - x e^(-2|x|)) / ((1 + e^(-2|x|))(|x| + tiny))",
        IMPL + "tanh.py L56-88; dynamic/tanh.py L63-104"),
    Row("Tanh", "310", "any", "float16", "tanh_fp16", "every step of the same formula in fp16",
        IMPL + "tanh.py L66-70 (the fp32 cast needs fp32 vexp)"),
    Row("Tanh", "fp32", "high_performance", "float32", "tanh_fast", "rational x(135135+...)/(135135+...) in fp32",
        IMPL + "tanh.py L53-54, L91-150"),
    Row("Tanh", "310", "high_performance", "float16", "tanh_fast_fp16", "the same rational, every step in fp16",
        IMPL + "tanh.py L124-128 (the fp32 cast needs fp32 vexp)"),
    Row("BNInferenceD", "fp32", "any", "mixed", "bninference",
        "(x + mean') * var' in fp16, then * scale + bias in fp32; output fp16",
        IMPL + "bninference_d.py L177-222 (_fused_scale_bias_compute)"),
    Row("BNInferenceD", "310", "any", "float16", "bninference_fp16", "every step in fp16",
        IMPL + "bninference_d.py L204-205 (no fp32 cast on Ascend310)"),
    Row("Gelu", "fp32", "high_precision", "float32", "gelu_tanh",
        "tanh approximation x / (1 + exp(-1.5957691 (x + 0.044715 x^3))) in fp32; output fp16",
        IMPL + "gelu.py L71-118; dynamic/gelu.py L127-190; impl_mode/high_performance.ini L8 (Gelu=high_precision)"),
    Row("Gelu", "310", "any", "float16", "gelu_tanh_fp16", "the same formula, every step in fp16",
        IMPL + "gelu.py L76-80 (the fp32 cast needs fp32 vexp)"),
    Row("Gelu", "310", "high_performance", "float16", "gelu_fast_fp16", "fast_gelu_v2's formula, every step in fp16",
        IMPL + "fast_gelu_v2.py L56-60 (the fp32 cast needs fp32 vexp)"),
    Row("Gelu", "fp32", "high_performance", "float32", "gelu_fast",
        "x (sgn(x)((-0.1444)(min(|0.7071 x|, 1.769) - 1.769)^2 + 0.5) + 0.5) in fp32",
        IMPL + "gelu.py L71-72 -> fast_gelu_v2.py L59-86; dynamic/gelu.py L42-99"),
    Row("LayerNorm", "fp32", "high_performance", "float32", "layer_norm",
        "x, gamma, beta cast to fp32; mean = sum(x/N), var = sum((x-mean)^2/N); rstd = exp(-0.5 log(var+eps)); "
        "outputs fp16", IMPL + "layer_norm.py L614-623, L634-644, L657-666, L700-707"),
    Row("LayerNorm", "all", "high_precision", "float32", "layer_norm",
        "as above with rstd = 1/sqrt(var+eps); fp32 also on Ascend310", IMPL + "layer_norm.py L614-623, L668-678"),
    Row("LayerNorm", "310", "high_performance", "float16", "layer_norm_fp16",
        "every step in fp16: x/N, the sums (fp16 accumulation), (x-mean)^2, log, exp", IMPL + "layer_norm.py "
        "L614-623 (the cast needs fp32 vexp), L634-666"),
    Row("LayerNorm", "fp32", "template", "mixed", "layer_norm_template",
        "fp32, but mean and variance rounded to fp16 and back mid-kernel (a variance past 65504 becomes inf, y = beta; "
        "65504 in saturation mode)",
        IMPL + "dynamic/layer_norm.py L505-577; layer_norm.py L897-900 + layer_norm_unify.py L74-288 "
        "(910/310P static shapes the multi-core tiling cannot split, and every dynamic shape)"),
    Row("LayerNorm", "all", "keep_fp16", "float16", "layer_norm_keep_fp16",
        "fp16; sums before scaling: sum(x) * (1/N)", IMPL + "layer_norm.py L645-655, L680-686"),
)

# fp32 input on Ascend310, where the kernel still takes an fp16 step (no fp32 vexp/vlog there)
FP32_ON_310: dict[str, tuple[str, str, str]] = {
    "Exp": ("exp_fp16", "the fp32 input is cast to fp16 for vexp", IMPL + "dynamic/exp.py L66-68"),
    "SoftmaxV2": ("softmax_fp32_exp16", "x - max in fp32, exp in fp16, sum and divide in fp32",
                  IMPL + "dynamic/softmax_v2.py L178-182"),
    "Sigmoid": ("sigmoid_fp32_exp16", "exp(-x) in fp16, the rest in fp32", IMPL + "sigmoid.py L138-142"),
    "Tanh": ("tanh_fp32_exp16", "e^(-2|x|) in fp16, the rest in fp32", IMPL + "dynamic/tanh.py L82-90"),
    "Pow": ("pow_lnexp16", "ln|x|, y * ln|x| and exp in fp16", IMPL + "dynamic/pow.py L103-124"),
}

# ...and of those, the kernels that, fed fp32 on Ascend310, compute exactly the values of their fp16
# kernel: the input is cast to fp16 before the first instruction and every step runs in fp16, the
# result cast back. keep_dtype on them changes no value there (fix and the advice never propose it).
KEEP_CHANGES_NOTHING_ON_310: dict[str, str] = {
    "Exp": IMPL + "dynamic/exp.py L66-68 (fp32 input cast to fp16 where vexp takes no float32), then vexp in fp16",
    "Pow": IMPL + "dynamic/pow.py L110-113, L142-146 (x and y cast to fp16 where vlog takes no float32), then "
                  "vlog, vmul and vexp in fp16",
}
