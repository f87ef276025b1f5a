"""Which LayerNorm kernel ATC compiles for a static ND-format fp16 input on Ascend910 / Ascend310P: the
vector kernel, or the dynamic ("unify") template that rounds mean and variance through fp16 mid-kernel.
Pure python: a port of the decision in canndev's ``layer_norm_unify.py``.

Source: canndev (GitHub dengguojie/vue-element-admin, branch stp, commit 7290acc7, 2022-06-29),
``ops/built-in/tbe/impl/layer_norm.py`` L897-907 (ND input: ``layer_norm_unify.is_special_cases``
-> the dynamic template, else ``layer_norm_compute``), ``impl/layer_norm_unify.py`` L74-288 (the
decision: only on Ascend910 and Ascend310P; an all-axes reduce, a reduce size not a multiple of 16
(fp16), a reduce too large for the UB, or a shape the multi-core tiling cannot split takes the
template), and the tiling helpers ``auto_schedule/python/tbe/dsl/static_schedule/util.py``
L543-752 (``ceil``, ``align``, ``get_block_factor_radical``, ``get_block_factor_conservative``,
``get_ub_factor``). The SoC facts (UB bytes, AI cores) are those of GE's platform configs
(hicann/ge ffdcbc9f ``tests/engines/nn_engine/config/data/platform_config/<SoC>.ini``:
Ascend910A/ProA/PremiumA 32 cores, 910ProB 30, 310P1 10, 310P3 8; UB 262144 bytes on all).

Not ported: the FRACTAL_NZ routes (LayerNormCube for widths {1024, 768, 96, 384, 192, 128, 512, 256},
``layer_norm.py`` L333-353, L873-878): the emulation gives the kernel an ND input, the format of
an ONNX graph (docs/emulation.md says why that is the side that shows the failure).
"""

from __future__ import annotations

from copy import deepcopy
from math import gcd

UB_SIZE = 262144
CORES = {"Ascend910A": 32, "Ascend910ProA": 32, "Ascend910PremiumA": 32, "Ascend910ProB": 30, "Ascend910": 32,
         "Ascend310P1": 10, "Ascend310P3": 8}
FAMILY_CORES = {"training": 32, "310P": 8}  # a SoC not listed: its family's most common part

# layer_norm_unify.py Constant (L37-52)
TOTAL_WIDTH_0 = 7.9  # reduce size 768 or 1024 (SPECIAL_REDUCE_AXES)
TOTAL_WIDTH_1 = {"float32": 8.1, "float16": 10}
TOTAL_WIDTH_2 = 11  # high_precision
UB_ALIGN_FACTOR = 128
MIN_ALIGN = {"float32": 8, "float16": 16}
SPECIAL_REDUCE_AXES = (768, 1024)


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


def _align(a: int, b: int) -> int:
    return _ceil(a, b) * b


def core_count(soc_version: str | None, family: str | None) -> int:
    if soc_version in CORES:
        return CORES[soc_version]
    return FAMILY_CORES.get(family or "", 8)


def takes_template(shape: list[int], begin_norm_axis: int, impl_mode: str | None, dtype: str = "float16",
                   cores: int = 8) -> bool:
    """``_is_unsupported_or_single_core`` (layer_norm_unify.py L98-276) for an ND input: True where the
    static kernel hands the op to the dynamic template (mean and variance rounded through fp16)."""
    shape = list(shape)
    reduce_axes = list(range(len(shape)))[begin_norm_axis:]
    if not begin_norm_axis:  # all dims reduced (L108-110)
        return True
    size = 1
    for dim in reduce_axes:
        size *= shape[dim]
    if size % MIN_ALIGN[dtype]:  # misaligned reduce axes (L115-119)
        return True
    if impl_mode == "high_precision":
        width = TOTAL_WIDTH_2
    else:
        width = TOTAL_WIDTH_0 if size in SPECIAL_REDUCE_AXES else TOTAL_WIDTH_1[dtype]
    max_ub = int(UB_SIZE // 2 / width)  # bytes of fp16 (L126-129)
    max_ub = int(max_ub // UB_ALIGN_FACTOR) * UB_ALIGN_FACTOR
    limit = 1
    middle = deepcopy(shape)
    for axis in reduce_axes:
        limit *= shape[axis]
        middle[axis] = 1
    if max_ub // limit < MIN_ALIGN[dtype]:  # L137-141
        return True
    if len(shape) > 1:  # __penultimate_two_dimensional_case (L147-161)
        pre = 1
        for dim in shape[:-1]:
            pre *= dim
        if shape[-2] != 1 and shape[-2] % MIN_ALIGN[dtype] and pre > MIN_ALIGN[dtype]:
            return True
    return _reduce_last(shape, reduce_axes, dtype, limit, max_ub, middle, cores)


def _reduce_last(shape, reduce_axes, dtype, limit, max_ub, middle, cores) -> bool:
    """__calcu_align_in_reduce_last_single_core (L164-193)."""
    last = len(shape) - 1
    special = 1
    reduce_align_flag = True
    for idx in reversed(range(len(shape))):
        if idx not in reduce_axes:
            break
        special *= shape[idx]
        if special % MIN_ALIGN[dtype] == 0:
            reduce_align_flag = False
    align_count = MIN_ALIGN[dtype]
    if reduce_align_flag:
        ori_coef = gcd(shape[last], MIN_ALIGN[dtype])
        new_coef = gcd(special, MIN_ALIGN[dtype])
        align_count = int(MIN_ALIGN[dtype] / (new_coef / ori_coef))
        new_size = _align(shape[last], align_count)
        ori_size = shape[last]
        shape[last] //= new_size
        limit = limit / ori_size * new_size
    if limit > max_ub:
        return True
    return _gm_align(shape, reduce_axes, dtype, limit, max_ub, middle, last, cores, align_count)


def _gm_align(shape, reduce_axes, dtype, limit, max_ub, middle, last, cores, align_count) -> bool:
    """__calcu_align_in_gm_single_core (L196-231)."""
    res_dim, res_factor = -1, -1
    for out in (shape, middle, middle):
        found = False
        factor = MIN_ALIGN[dtype]
        for i in reversed(range(len(out))):
            if factor <= out[i]:
                found = True
                if (res_dim == -1 or res_dim > i or (res_dim == i and factor > res_factor)) and i not in reduce_axes:
                    res_dim, res_factor = i, factor
                break
            factor = _ceil(factor, out[i])
        if not found:
            return True
    if res_dim == -1 or res_factor == -1 or res_dim == last:
        return True
    reduce_axes = list(reduce_axes)
    for i in range(res_dim + 1, len(shape)):
        if i not in reduce_axes:
            limit *= shape[i]
            reduce_axes.append(i)
    return _other_tiling(shape, reduce_axes, limit, max_ub, cores, last, align_count, res_dim, res_factor)


def _other_tiling(shape, reduce_axes, limit, max_ub, cores, last, align_count, res_dim, res_factor) -> bool:
    """__calcu_other_tiling_single_core (L234-276)."""
    res_size = int(max_ub // limit)
    if res_size < res_factor:
        return True
    free = 1
    for i in range(res_dim + 1):
        if i not in reduce_axes:
            free *= shape[i]
    free = _ceil(free, cores)
    cur_align = res_factor
    for size in range(res_factor, min(res_size, shape[res_dim]) + 1):
        if free % size == 0:
            cur_align = size
            break
    misalign = shape[res_dim] % cur_align
    if misalign and misalign < res_factor:
        return True
    default_shape = list(shape)
    shape[res_dim] //= res_factor
    limit *= cur_align
    if limit * 2 <= max_ub:
        limit *= 2
    res_size = max_ub // limit
    para = _tiling(shape, reduce_axes, res_size, res_dim, cores, last, align_count, cur_align)
    if not _tiling_ok(shape, para):
        while cores > 1:
            cores -= 1
            para = _tiling(shape, reduce_axes, res_size, res_dim, cores, last, align_count, cur_align)
    return _single_core(default_shape, reduce_axes, para)


def _tiling(shape, reduce_axes, rest, res_dim, cores, last, align_count, cur_align) -> dict:
    """__calc_tiling_strategy (L291-338)."""
    tiling_shape = deepcopy(shape)
    axes, factor = _block_radical(tiling_shape, reduce_axes, cores)
    tiling_shape[axes[0]] = factor
    barrier = list(reduce_axes) + list(range(axes[0])) + axes[1:]
    ub_axis, ub_factor = _ub_factor(tiling_shape, barrier, rest)
    radical = ub_axis not in axes or len(axes) == 1
    if not radical:
        tiling_shape = deepcopy(shape)
        barrier = list(reduce_axes)
        axes, factor = _block_conservative(tiling_shape, barrier, cores)
        barrier += list(range(axes[-1]))
        tiling_shape[axes[-1]] = factor[-1]
        ub_axis, ub_factor = _ub_factor(tiling_shape, barrier, rest)
    if last in axes:
        if radical:
            factor *= align_count
        else:
            factor[-1] = factor[-1] * align_count
    if ub_axis == last:
        ub_factor *= align_count
    if res_dim in axes:
        if radical:
            factor *= cur_align
        else:
            factor[-1] = factor[-1] * cur_align
    if ub_axis == res_dim:
        ub_factor *= cur_align
    ub_factor = _check_ub_factor(ub_axis, axes, factor, ub_factor)
    return {"axes": axes, "factor": factor, "radical": radical, "ub_axes": ub_axis, "ub_factor": ub_factor}


def _check_ub_factor(ub_axis, axes, factor, ub_factor) -> int:
    """__check_ub_factor (L422-440)."""
    block = 1
    if ub_axis in axes and len(axes) == 1:
        if isinstance(factor, int):
            block = factor
        if isinstance(factor, list) and len(factor) == 1:
            block = factor[0]
    if block > 1:
        while block % ub_factor == 1:
            ub_factor -= 1
    return ub_factor


def _tiling_ok(shape, para) -> bool:
    """__check_tiling_res (L443-465)."""
    axes, factor, ub_axis, ub_factor = para["axes"], para["factor"], para["ub_axes"], para["ub_factor"]
    if ub_axis in axes and len(axes) == 1:
        block = factor if isinstance(factor, int) else (factor[0] if len(factor) == 1 else 1)
        if block > 1:
            tile = shape[axes[0]] % block
            if block % ub_factor == 1 or tile % ub_factor == 1:
                return False
    return True


def _single_core(shape, reduce_axes, para) -> bool:
    """_do_tiling_strategy (L341-381): True when the fused axis left for the cores is 1 (one core)."""
    axes, factor = para["axes"], para["factor"]
    if para["radical"]:
        target = shape[axes[0]]
        for i in axes[1:]:
            target *= shape[i]
        target = _ceil(target, factor)
    elif len(axes) == 1:
        target = _ceil(shape[axes[0]], factor[0])
    else:
        target = factor[0]
        for i in axes[1:-1]:
            target *= shape[i]
        target *= _ceil(shape[axes[-1]], factor[-1])
    return not target > 1


def _block_radical(shape, barrier, factor):
    """get_block_factor_radical (static_schedule/util.py L680-717)."""
    temp_shape, temp_idx, res_idx, res_eff, res_coef = [], [], [], -1, 1
    for d, size in enumerate(shape):
        if d in barrier:
            total = 1
            for s in temp_shape:
                total *= s
            aligned = _align(total, factor)
            coef, eff = aligned // factor, total / aligned
            if eff > res_eff and temp_shape:
                res_idx, res_eff, res_coef = temp_idx[:], eff, coef
            temp_shape, temp_idx = [], []
        else:
            temp_shape.append(size)
            temp_idx.append(d)
    return res_idx, res_coef


def _block_conservative(shape, barrier, factor):
    """get_block_factor_conservative (static_schedule/util.py L591-677)."""
    visit = [[]]
    res = {"idx": [], "factor": [], "eff": -1}

    def compare(size, idxs, cur):
        eff = size / _align(size, factor)
        if (eff > res["eff"] or (eff == res["eff"] and res["idx"] and idxs[0] < res["idx"][0])
                or (eff == res["eff"] and res["idx"] and idxs[0] == res["idx"][0] and cur[0] > res["factor"][0])):
            res.update(idx=idxs[:], factor=cur[:], eff=eff)

    def limit_coef(a, b):
        return [n for n in range(1, b + 1) if a % n == 0]

    def series(sh, idxs):
        if idxs in visit:
            return
        visit.append(idxs)
        if len(sh) == 1:
            compare(sh[0], idxs, [_ceil(sh[0], factor)])
            return
        inner = 1
        for s in sh[1:-1]:
            inner *= s
        if factor < inner:
            series(sh[1:-1], idxs[1:-1])
        elif int(factor // inner) < 1:
            compare(inner, sh[1:-1], idxs[1:-1])
        else:
            for pre in limit_coef(sh[0], factor):
                for suf in limit_coef(sh[-1], factor):
                    size = inner * pre * int(sh[-1] / suf)
                    if size <= factor:
                        compare(size, idxs, [pre, suf])
        series(sh[1:], idxs[1:])
        series(sh[:-1], idxs[:-1])

    barrier = list(barrier) + [len(shape)]
    shape = list(shape) + [-1]
    temp_shape, temp_idx = [], []
    for idx in range(len(shape)):
        if idx in barrier:
            series(temp_shape, temp_idx)
            temp_shape, temp_idx = [], []
        else:
            temp_shape.append(shape[idx])
            temp_idx.append(idx)
    return res["idx"], res["factor"]


def _ub_factor(shape, barrier, rest):
    """get_ub_factor (static_schedule/util.py L720-744)."""
    def modify(size, rest_size):
        cur = _ceil(size, rest_size)
        return int(size // cur) if size % cur == 0 else int(rest_size)

    legal = -1
    for idx in reversed(range(len(shape))):
        if idx not in barrier:
            if rest < shape[idx]:
                return idx, modify(shape[idx], rest)
            rest = int(rest // shape[idx])
            legal = idx
    return legal, shape[legal]
