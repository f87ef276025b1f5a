"""When no keep set can work: a cube op reading an input beyond fp16's range on a SoC whose cube unit
reads fp16 even for a kept op (docs/emulation.md, "One keep_dtype rule, per SoC": the 310 family, the
first training products, and no SoC given). Pure: compare rows + op edges + the SoC -> one line or None.
compare says with it that its keep_dtype advice cannot restore the outputs; fix stops with it
(``ascendpipe.fix.cause`` re-exports it).
"""

from __future__ import annotations

from ascendpipe.compare.mechanism import compute_producers, op_types, ops_of
from ascendpipe.compare.metrics import FP16_MAX


def cube_blocked(rows: list[dict], producers: dict[str, list[str]] | None, soc_version: str | None,
                 inputs_peak: dict[str, float] | None = None) -> str | None:
    """Why no keep_dtype set can restore the output on ``soc_version``, or None.

    A failing cube op (Conv, MatMul, Gemm...) whose row reaches a failing output and whose golden input
    exceeds 65504 reads that input as fp16 (inf) on this SoC whether it is kept or not. ``inputs_peak``:
    the graph inputs' largest |value| (a cube may read a feed directly)."""
    from ascendpipe.precision.lists import CUBE_OPS, cube_reads_fp32

    if cube_reads_fp32(soc_version):
        return None
    types = op_types(rows)
    peak: dict[str, float] = dict(inputs_peak or {})
    for r in rows:
        for op in ([r.get("golden_op") or r["op_name"]] if r.get("fused") else ops_of(r)):
            peak[op] = max(peak.get(op, 0.0), r.get("golden_abs_max") or 0.0)
    for i, r in enumerate(rows):
        if not r.get("failed") or r.get("contained") or r.get("reaches_output") is False:
            continue
        for op in ops_of(r):
            if types.get(op) not in CUBE_OPS:
                continue
            if producers is not None:
                feeding = compute_producers(producers, op, types)
            else:
                feeding = ops_of(rows[i - 1]) if i > 0 else []
            over = [(p, peak[p]) for p in feeding if peak.get(p, 0.0) > FP16_MAX]
            if over:
                source, value = max(over, key=lambda x: x[1])
                soc = (f"SoC {soc_version}" if soc_version
                       else "the default SoC (no --soc-version: a kept cube reads fp16, as on the 310 family)")
                return (f"no keep_dtype set can work on {soc}: '{op}' ({types[op]}) is a cube op, and this SoC's cube "
                        f"unit reads fp16 even when the op is kept (docs/emulation.md), while its input from "
                        f"'{source}' reaches {value:.3g}, beyond fp16's 65504. Two ways out: change the model (scale "
                        "that input into fp16's range, e.g. a mean instead of a sum, or a division before the "
                        f"{types[op]}), or convert for an Atlas A2/A3 SoC (--soc-version Ascend910B1), whose cube "
                        "reads fp32 when kept")
    return None


# the SoCs whose vexp/vlog take float32, where keep_dtype on such an op computes it in fp32
# (tbe/dsl/compute/util.py L517-538 at canndev 7290acc7; precision/kernel_table.py)
FP32_VEXP_SOCS = "Ascend310P3, Ascend310B1 or Ascend910B1"


def kernel_blocked(rows: list[dict], plan_nodes: dict | None, soc_version: str | None,
                   spell=None) -> str | None:
    """Why no keep_dtype set can restore the outputs, or None: an op whose kernel computes in fp16 on this
    SoC whatever its input (the precision plan's ``keep_changes_nothing``: Exp and Pow on Ascend310,
    ``precision.kernels.remedy_effect``) has golden values beyond 65504, and its failing row reaches an
    output. Kept or not, it stores inf there (no impl mode changes it either: no fp32 vexp on the SoC)."""
    moot = {name: entry for name, entry in (plan_nodes or {}).items() if entry.get("keep_changes_nothing")}
    if not moot:
        return None
    spell = spell or (lambda key, value: f"--{key.replace('_', '-')} {value}")
    for r in rows:
        if not r.get("failed") or r.get("contained") or r.get("reaches_output") is False:
            continue
        ops = ops_of(r)
        if len(ops) != 1 or ops[0] not in moot or (r.get("golden_abs_max") or 0.0) <= FP16_MAX:
            continue
        op, entry = ops[0], moot[ops[0]]
        from ascendpipe.precision.kernel_table import KEEP_CHANGES_NOTHING_ON_310

        kind = entry.get("ge_type") or entry.get("op_type") or r.get("op_type")
        source = KEEP_CHANGES_NOTHING_ON_310.get(kind, entry["keep_changes_nothing"])
        soc = f"SoC {soc_version}" if soc_version else "the default SoC (no --soc-version: taken as Ascend310)"
        return (f"no keep_dtype set can work on {soc}: '{op}' ({kind}) computes in fp16 there whatever its input "
                f"({source}), and its values reach "
                f"{r['golden_abs_max']:.3g}, beyond fp16's 65504. Two ways out: change the model (bring what it "
                f"computes into fp16's range), or convert for a SoC with fp32 vexp/vlog ({spell('soc_version', 'Ascend310P3')}; "
                f"also {FP32_VEXP_SOCS}), where keeping '{op}' in fp32 computes it in fp32")
    return None
