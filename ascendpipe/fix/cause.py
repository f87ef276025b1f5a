"""When no keep set can work, proven from the baseline's compare before any search.

A cube op (Conv, MatMul, Gemm...: ``precision.lists.CUBE_OPS``) on a SoC whose cube unit reads fp16
even for an op in keep_dtype (``precision.lists.cube_reads_fp32`` false: the 310 family, 310B, the
first training products, and no SoC given; docs/emulation.md, "One keep_dtype rule, per SoC") reads an
input beyond 65504 as inf (65504 where the SoC saturates), kept or not. When such an op's divergence
reaches a failing output, no keep_dtype set restores it: ``blocked`` says so with the op, where its
input comes from and how large it is, and the ways out on this SoC:

- change the model (bring that input into fp16's range);
- ``precision_mode_v2: mixed_bfloat16`` where the SoC computes bf16 (Atlas 200I/500 A2, Ascend310B*;
  Atlas A2/A3): bf16 keeps fp32's range, so the stream no longer overflows
  (``precision.chips.supports_bf16``; GE --precision_mode_v2.md L89-107);
- an Atlas A2/A3 SoC (``Ascend910B1``), whose cube reads fp32 for a kept op (``chips.soc_class`` C32;
  Ascend C ``Mmad.md``: float x float -> float), where a keep set can work.

The same holds for a cube op's own weights past 65504 (a constant input: the ONNX model's, not one a
fusion folds, which switching that fusion off restores): asked only of a cube op that overflows on its own
while what it computes from is in range (``weight_peak``, read lazily from the golden model).

Compared with compare's own check (``compare.cube.cube_blocked``, which its advice uses), this one also
knows the golden graph's op types where the rows do not (a cube op fused into a kernel), reads graph
inputs fed to a cube op directly (``input_readers``) and its weights, and, for a cube op without a row of
its own, follows its consumers to the first row that says whether the divergence reaches an output.
"""

from __future__ import annotations

from ascendpipe.compare.mechanism import compute_producers, consumers_of, golden_peaks, is_move, op_types, ops_of
from ascendpipe.fix.causes import beyond_fp16

A2_SOC = "Ascend910B1"  # the Atlas A2 SoC named as the way out (any C32 SoC would do)


def cube_blocked(rows: list[dict], producers: dict[str, list[str]] | None, soc_version: str | None,
                 inputs_peak: dict[str, float] | None = None, *, input_readers: dict[str, list[str]] | None = None,
                 graph_types: dict[str, str] | None = None, spell=None, weight_peak=None) -> str | None:
    """Why no keep_dtype set can restore the outputs on ``soc_version``, or None (see the module docstring).

    ``inputs_peak``: each graph input's largest finite |value|; ``input_readers``: op -> the graph inputs
    it reads; ``graph_types``: op -> op type from the golden model; ``spell(key, value)``: how the user
    sets a convert setting here (``--soc-version X`` standalone, ``--set stages...`` in a pipeline);
    ``weight_peak(op)``: (the weight's name, its largest |value|) of a cube op's constant inputs, asked only
    of a cube op that overflows on its own while every input it computes from is in range (its weights
    past 65504 are then read as inf by a cube that reads fp16, kept or not)."""
    from ascendpipe.precision.lists import CUBE_OPS, cube_reads_fp32

    if cube_reads_fp32(soc_version) or not rows:
        return None
    kinds = {**(graph_types or {}), **{op: t for op, t in op_types(rows).items() if t}}
    peaks = golden_peaks(rows)
    feeds = inputs_peak or {}
    readers = input_readers or {}
    edges = producers or {}
    position = {}
    for i, r in enumerate(rows):
        for op in ops_of(r) + ([r["golden_op"]] if r.get("golden_op") else []):
            position.setdefault(op, i)
    cubes = [op for op, kind in kinds.items() if kind in CUBE_OPS]
    cubes.sort(key=lambda op: position.get(op, len(rows)))
    consumers = consumers_of(edges)
    for op in cubes:
        over = [(p, peaks[p]) for p in compute_producers(edges, op, kinds) if beyond_fp16(peaks.get(p))]
        over += [(name, feeds[name]) for name in _fed_inputs(edges, readers, op, kinds) if beyond_fp16(feeds.get(name))]
        if not over and producers is None:  # no graph: the row before stands for the input (graph order)
            i = position.get(op)
            if i:
                over = [(p, peaks[p]) for p in ops_of(rows[i - 1]) if beyond_fp16(peaks.get(p))]
        weight = None
        if not over and weight_peak is not None and _own_overflow(rows, position, edges, kinds, op):
            found = weight_peak(op)
            weight = found if found and beyond_fp16(found[1]) else None
        if not (over or weight) or not _reaches(rows, position, consumers, op):
            continue
        if weight:
            return _message(op, kinds[op], weight[0], weight[1], soc_version, spell, weight=True)
        source, value = max(over, key=lambda x: x[1])
        return _message(op, kinds[op], source, value, soc_version, spell)
    return None


def _own_overflow(rows, position, producers, kinds, op: str) -> bool:
    """The cube op's row overflows while no row it computes from fails (its own values, or its weights)."""
    i = position.get(op)
    if i is None or rows[i].get("overflow") != "target" or not rows[i].get("failed"):
        return False
    return not any(rows[position[p]].get("failed") for p in compute_producers(producers, op, kinds) if p in position)


def _fed_inputs(producers, readers, op: str, kinds) -> list[str]:
    """The graph inputs ``op`` reads, directly or through ops that only move values."""
    names, stack, seen = list(readers.get(op, ())), list(producers.get(op, ())), set()
    while stack:
        p = stack.pop()
        if p in seen or not is_move(kinds.get(p)):
            continue
        seen.add(p)
        names += list(readers.get(p, ()))
        stack += list(producers.get(p, ()))
    return list(dict.fromkeys(names))


def _reaches(rows, position, consumers, op: str) -> bool:
    """Whether ``op``'s divergence reaches a failing output: its row fails and is not contained; without a
    row of its own (fused away, not dumped), the first rows its consumers have say."""
    stack, seen = [op], set()
    while stack:
        current = stack.pop(0)
        if current in seen:
            continue
        seen.add(current)
        i = position.get(current)
        if i is not None:
            r = rows[i]
            if r.get("failed") and not r.get("contained") and r.get("reaches_output") is not False:
                return True
            continue
        stack += list(consumers.get(current, ()))
    return False


def ways_out(soc_version: str | None, spell=None) -> str:
    """The ways out of a cube op reading an overflowed input on this SoC, as the user writes them."""
    from ascendpipe.precision.chips import supports_bf16

    spell = spell or (lambda key, value: f"--{key.replace('_', '-')} {value}")
    ways = ["change the model (scale that input into fp16's range, e.g. a mean instead of a sum, or a division "
            "before the cube op)"]
    if supports_bf16(soc_version):
        ways.append(f"convert with {spell('precision_mode_v2', 'mixed_bfloat16')} on this SoC, which computes bf16: "
                    "bf16 keeps fp32's range (8 mantissa bits), so the stream no longer overflows")
    ways.append(f"convert for an Atlas A2/A3 SoC ({spell('soc_version', A2_SOC)}), whose cube reads fp32 when the op "
                "is kept: a keep set works there"
                + ("" if supports_bf16(soc_version) else
                   f" (bf16 is there too: {spell('precision_mode_v2', 'mixed_bfloat16')})"))
    return f"{'Two' if len(ways) == 2 else 'Three'} ways out: " + "; or ".join(ways)


def _message(op: str, kind: str, source: str, value: float, soc_version: str | None, spell, weight=False) -> str:
    soc = (f"SoC {soc_version}" if soc_version
           else "the default SoC (no --soc-version: a kept cube reads fp16, as on the 310 family)")
    what = f"its weight '{source}'" if weight else f"its input from '{source}'"
    return (f"no keep_dtype set can work on {soc}: '{op}' ({kind}) is a cube op, and this SoC's cube unit reads fp16 "
            f"even when the op is kept (docs/emulation.md), while {what} reaches {value:.3g}, "
            f"beyond fp16's 65504. {ways_out(soc_version, spell)}")
