"""What each SoC's cube and vector units compute in: the SoC classes of the precision policies, their
capabilities, and the choices we made where the sources are silent (each one switch, here).

Classes (docs/emulation.md, "SoC classes"):
- ``C32``: Atlas A2 (``Ascend910B1``..``B4``), Atlas A3 (``Ascend910_93*``) and Ascend 950: the cube
  takes fp32 (Ascend C ``Mmad.md``: float x float -> float; ``asc_set_fp32_mode`` on 950/A3/A2), and
  by default rounds an fp32 Conv-class input to HF32 (``--allow_hf32``: conv on, matmul off).
- ``C16``: Ascend310, Ascend310P, Ascend310B and the first training products (Ascend910, 910A,
  910Pro*): the cube reads fp16 (no float x float row in ``Mmad.md`` for 310P/910). 310B is taken as
  C16 for fp32 (``CUBE_FP32_310B``), though it has bf16.
- unknown (no ``soc_version``, or one we do not know): C16's cube rules, the side that shows an fp16
  overflow; no bf16 refusal (nothing says the SoC lacks it).
"""

from __future__ import annotations

import re

HF32_MANTISSA = 11  # Atlas A2/A3 (GE --allow_hf32.md: "mantissa precision (11 bits)"); 950: 10 (Ascend C HF32.md)

# bf16: "only supported on" Atlas A2, A3, 200I/500 A2 (310B) and 950 (GE --precision_mode_v2.md
# L89-107); ATC refuses it elsewhere: "Current soc not support dtype of BFloat16" (GE
# compiler/engines/nn_engine/utils/common/fe_context_utils.cc L45, L133: the SoC's vconv lacks f32->bf16)
BF16_FAMILIES = frozenset({"A2", "A3", "310B", "950"})
NO_BF16_FAMILIES = frozenset({"310", "310P", "training"})
# HF32 (--allow_hf32): Atlas A2, A3 and 950; not 310B, 310P or 910 (GE --allow_hf32.md L5-21)
HF32_FAMILIES = frozenset({"A2", "A3", "950"})
# HiFloat8 (mixed_hif8, cube_hif8): Ascend 950 only (GE --precision_mode_v2.md L65-77, L109-114)
HIF8_FAMILIES = frozenset({"950"})

# --- the choices where the sources are silent or contradict (docs/emulation.md, "Open questions") ---
# 1. force_fp32 / cube_fp16in_fp32out on a C32 SoC: the doc's first choice for a cube op is "fp16 in,
#    fp32 out" (GE --precision_mode_v2.md L31-43), taken only if the kernel lists that pair; the public
#    MatMulV3 def for 910b has no such pair (ops-nn mat_mul_v3_def.cpp L22-74), which would make it
#    fp32 in (HF32 / FP32 by allow_hf32). Our choice: "float16", the side that shows an fp16 overflow
#    of the cube's input; "fp32" gives the alternative.
FORCE_FP32_CUBE_READS_C32 = "float16"
# 2. 310B's fp32 cube: Mmad.md lists float x float -> float for it, but --allow_hf32, asc_set_fp32_mode,
#    asc_enable_hf32 and SetHF32 list it as unsupported. Our choice: False (fp16 in, as the 310 family).
CUBE_FP32_310B = False
# 3. HF32 tie-breaking: SetHF32 transMode 0 (the API default) is nearest-even; the alternative is
#    described as ties-away (SetHF32) or toward zero (SetHF32TransMode); which one the built-in Conv
#    kernels use is unstated. Our choice: nearest-even, the documented default (the only one modelled).
HF32_ROUNDING = "nearest_even"

ALLOW_HF32_DEFAULT = {"conv": True, "matmul": False}  # GE --allow_hf32.md L56; op_impl_mode_config_parser.cc L36
CONV_CLASS = frozenset({"Conv", "ConvTranspose", "FusedConv", "NchwcConv"})
MATMUL_CLASS = frozenset({"MatMul", "Gemm", "FusedGemm", "FusedMatMul"})


def family(soc_version: str | None) -> str | None:
    """The SoC family (``atc_passes.soc_family``'s, plus '950' for Ascend 950PR/DT)."""
    from ascendpipe.precision.atc_passes import soc_family

    if soc_version and re.match(r"Ascend950", soc_version.strip(), re.IGNORECASE):
        return "950"
    return soc_family(soc_version)


def soc_class(soc_version: str | None) -> str | None:
    """'C32', 'C16', or None for an unknown SoC (which gets C16's cube rules)."""
    fam = family(soc_version)
    if fam in ("A2", "A3", "950") or (fam == "310B" and CUBE_FP32_310B):
        return "C32"
    if fam in ("310", "310P", "310B", "training"):
        return "C16"
    return None


def supports_bf16(soc_version: str | None) -> bool | None:
    """True / False where the docs say; None for an unknown SoC."""
    fam = family(soc_version)
    if fam in BF16_FAMILIES:
        return True
    if fam in NO_BF16_FAMILIES:
        return False
    return None


def supports_hif8(soc_version: str | None) -> bool:
    return family(soc_version) in HIF8_FAMILIES


def hf32_bits(soc_version: str | None) -> int:
    return 10 if family(soc_version) == "950" else HF32_MANTISSA


def hf32_applies(soc_version: str | None) -> bool:
    """Whether fp32 cube inputs may be rounded to HF32 on this SoC (the --allow_hf32 switches act)."""
    return soc_class(soc_version) == "C32" and family(soc_version) in HF32_FAMILIES


def cube_kind(op_type: str) -> str | None:
    """'conv' or 'matmul' (the two --allow_hf32 switches), None for other ops."""
    if op_type in CONV_CLASS:
        return "conv"
    if op_type in MATMUL_CLASS:
        return "matmul"
    return None
