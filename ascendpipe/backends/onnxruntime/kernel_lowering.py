"""A kernel as the device computes it, written as ONNX ops: each step the kernel takes in fp16 is
followed by a rounding point (the ``Rounding`` of rounding.py: a Cast pair, saturating in saturation
mode); the fp32 steps are plain fp32 ops. Which steps, per kernel, SoC and impl mode:
``precision/kernels.py`` (the ``recipe``) and its table's sources.

``lower(node, kernel, ctx)`` returns the nodes that replace ``node`` (its inputs already rounded to
what the kernel reads, its outputs already renamed to the raw tensors the output rounding reads) and
the internal tensors (hidden from the dump, as a kernel's inside is). None: the recipe needs what is
not known here (a static shape for an fp16 accumulation, an opset the ops need): the node stays as it
is, rounded at its boundary, and ``ctx.notes`` says so (precision_plan.json).

fp16 accumulation (ReduceSumD and ReduceMeanD on Ascend310, LayerNorm's sums in fp16): the reduced
values are summed in halves, ``a[i] + a[i + n/2]`` rounded to fp16 at each level, the odd tail padded
with 0: the vector unit's "dichotomy" add. The device's exact order is not documented (docs/emulation.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EMU = "ascendpipe_emu"


@dataclass
class LowerContext:
    rounding: object  # rounding.Rounding
    opset: int
    shapes: dict  # original tensor name -> static dims (None for an unknown dim)
    inits: dict  # initializer name -> numpy array (original fp32 values)
    notes: dict = field(default_factory=dict)  # node name -> why it was left at its boundary


class _Builder:
    def __init__(self, tag: str, ctx: LowerContext):
        self.tag, self.ctx, self.opset = tag, ctx, ctx.opset
        self.nodes, self.internal, self.count = [], [], 0

    def _name(self, step: str) -> str:
        self.count += 1
        return f"{EMU}/k/{self.tag}/{self.count}_{step}"

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        from onnx import helper

        name = self._name(op_type)
        target = out or name
        self.nodes.append(helper.make_node(op_type, inputs, [target], name=f"{name}/node", **attrs))
        if out is None:
            self.internal.append(target)
        return target

    def const(self, value, dtype=np.float32) -> str:
        from onnx import helper, numpy_helper

        name = self._name("const")
        array = np.asarray(value, dtype=dtype)
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}/node",
                                           value=numpy_helper.from_array(array, name)))
        self.internal.append(name)
        return name

    def r16(self, x: str) -> str:
        """``x`` rounded to fp16 (saturating in saturation mode): a step the kernel takes in fp16."""
        dst = self._name("fp16")
        pair, half = self.ctx.rounding.nodes(x, dst, f"k/{self.tag}/{self.count}", "k", "float16")
        self.nodes += pair
        self.internal += [*half, dst]
        return dst

    def f16(self, value: float) -> str:
        """A scalar the kernel declares in fp16 (``tvm.const(value, "float16")``)."""
        return self.const(np.float32(np.float16(value)))

    def reduce(self, op_type: str, x: str, axes: list[int], keepdims: int = 1, out: str | None = None) -> str:
        if (op_type == "ReduceSum" and self.opset >= 13) or self.opset >= 18:
            return self.op(op_type, [x, self.const(axes, np.int64)], out, keepdims=keepdims)
        return self.op(op_type, [x], out, axes=axes, keepdims=keepdims)

    def slice_cols(self, x: str, start: int, end: int) -> str:
        """Columns ``start:end`` of a 2-D tensor."""
        if self.opset >= 10:
            return self.op("Slice", [x, self.const([start], np.int64), self.const([end], np.int64),
                                     self.const([1], np.int64)])
        return self.op("Slice", [x], axes=[1], starts=[start], ends=[end])

    def tree16(self, x: str, dims: tuple, axes: list[int], keepdims: int, out: str | None = None) -> str:
        """sum over ``axes`` of ``x`` accumulated in fp16 by halves (the reduced ``dims`` static: the others
        may be symbolic, e.g. a batch dim, then the output's shape is read from ``x`` at run time)."""
        rank = len(dims)
        axes = sorted(a % rank for a in axes)
        kept = [a for a in range(rank) if a not in axes]
        n = int(np.prod([dims[a] for a in axes])) if axes else 1
        source = x
        if kept + axes != list(range(rank)):
            x = self.op("Transpose", [x], perm=kept + axes)
        x = self.op("Reshape", [x, self.const([-1, n], np.int64)])
        while n > 1:
            if n % 2:  # the odd tail pairs with a 0 (exact)
                x = self.op("Concat", [x, self.op("Mul", [self.slice_cols(x, 0, 1), self.const(0.0)])], axis=1)
                n += 1
            half = n // 2
            x = self.r16(self.op("Add", [self.slice_cols(x, 0, half), self.slice_cols(x, half, n)]))
            n = half
        if _static(dims):
            shape = [1 if a in axes else dims[a] for a in range(rank)] if keepdims else [dims[a] for a in kept]
            return self.op("Reshape", [x, self.const(shape, np.int64)], out)
        whole = self.op("Shape", [source])
        if keepdims:
            reduced = self.const(np.array([a in axes for a in range(rank)]), np.bool_)
            shape = self.op("Where", [reduced, self.const(np.ones(rank, np.int64), np.int64), whole])
        else:
            shape = self.op("Gather", [whole, self.const(kept, np.int64)], axis=0)
        return self.op("Reshape", [x, shape], out)


def _attr(node, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            from onnx import helper

            return helper.get_attribute_value(a)
    return default


def _static(dims) -> bool:
    return dims is not None and all(isinstance(d, int) and d > 0 for d in dims)


def _static_over(dims, axes) -> bool:
    """Whether the dims ``axes`` reduce are known (what ``tree16`` needs; the rank must be known too)."""
    return dims is not None and bool(dims) and _static([dims[a % len(dims)] for a in axes])


def lower(node, kernel, ctx: LowerContext, original_inputs: list[str]):
    """(nodes, internal) computing ``node`` as ``kernel.recipe`` says, or None (see the module doc)."""
    recipe = kernel.recipe
    fn = _RECIPES.get(recipe.split(":")[0])
    if fn is None:
        return None
    b = _Builder(node.name.replace("/", "_") or "op", ctx)
    done = fn(b, node, kernel, ctx, original_inputs)
    if done is None or done is False:
        return None
    return b.nodes, b.internal


def _axis_softmax(b, node, original_inputs, kind):
    """(2-D view of x or x itself, the axis, a function writing the result back to the node's shape)."""
    x = node.input[0]
    axis = int(_attr(node, "axis", -1 if b.opset >= 13 else 1))
    if b.opset >= 13:
        return x, axis, lambda y: b.op("Identity", [y], node.output[0])
    flat = b.op("Flatten", [x], axis=axis)
    shape = b.op("Shape", [x])
    return flat, 1, lambda y: b.op("Reshape", [y, shape], node.output[0])


def _softmax(b, node, kernel, ctx, original_inputs):
    x, axis, finish = _axis_softmax(b, node, original_inputs, "softmax")
    exp16 = kernel.recipe in ("softmax_exp16", "softmax_fp32_exp16")
    m = b.reduce("ReduceMax", x, [axis])
    d = b.op("Sub", [x, m])
    if kernel.recipe != "softmax_fp32_exp16":
        d = b.r16(d)  # x - max in fp16 (softmax_v2.py L490)
    if not exp16:
        finish(b.op("Softmax", [d], axis=axis))  # exp, sum, divide in fp32 (max(d) is 0 exactly)
        return True
    e = b.r16(b.op("Exp", [d]))  # vexp in fp16 on Ascend310 (L499-502)
    finish(b.op("Div", [e, b.reduce("ReduceSum", e, [axis])]))
    return True


def _log_softmax(b, node, kernel, ctx, original_inputs):
    x, axis, finish = _axis_softmax(b, node, original_inputs, "log_softmax")
    d = b.r16(b.op("Sub", [x, b.reduce("ReduceMax", x, [axis])]))  # log_softmax_v2.py L87-92
    if kernel.recipe == "log_softmax":
        finish(b.op("LogSoftmax", [d], axis=axis))
        return True
    e = b.r16(b.op("Exp", [d]))
    dims = ctx.shapes.get(original_inputs[0])
    if b.opset >= 13 and _static_over(dims, [axis]):
        s = b.tree16(e, tuple(dims), [axis], 1)
    else:
        s = b.r16(b.reduce("ReduceSum", e, [axis]))
        ctx.notes[node.name] = "fp16 accumulation of the sum not emulated (shape not static here): summed in fp32"
    finish(b.op("Sub", [d, b.r16(b.op("Log", [s]))]))
    return True


def _reduce_axes(node, ctx, b) -> list[int] | None:
    axes = _attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        value = ctx.inits.get(node.input[1])
        axes = None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]
    return None if axes is None else list(axes)


def _reduce_fp16(b, node, kernel, ctx, original_inputs):
    dims = ctx.shapes.get(original_inputs[0])
    axes = _reduce_axes(node, ctx, b)
    if axes is not None and not axes and dims is not None:
        axes = list(range(len(dims)))
    if axes is None or not _static_over(dims, axes):
        ctx.notes[node.name] = "fp16 accumulation not emulated (reduced dims or axes not static here): summed in fp32"
        return None
    keepdims = int(_attr(node, "keepdims", 1))
    x = node.input[0]
    if kernel.recipe == "reduce_mean_fp16":
        n = int(np.prod([dims[a % len(dims)] for a in axes]))
        x = b.r16(b.op("Mul", [x, b.f16(1.0 / n)]))  # vmuls(x, cof) in fp16 (reduce_mean_d.py L133)
    b.tree16(x, tuple(dims), axes, keepdims, node.output[0])
    return True


def _sigmoid(b, node, kernel, ctx, original_inputs):
    x = node.input[0]
    r = kernel.recipe
    if r == "sigmoid_poly":  # sigmoid.py L62-91, every step in fp16
        x2 = b.r16(b.op("Mul", [x, x]))
        t = b.r16(b.op("Mul", [x2, b.f16(0.000207697530)]))
        t = b.r16(b.op("Add", [t, b.f16(-0.0102459298)]))
        t = b.r16(b.op("Mul", [x2, t]))
        t = b.r16(b.op("Add", [t, b.f16(0.229270815)]))
        t = b.r16(b.op("Mul", [x, t]))
        t = b.r16(b.op("Add", [t, b.f16(0.5)]))
        b.op("Max", [b.op("Min", [t, b.f16(1.0)]), b.f16(0.0)], node.output[0])
        return True
    if r == "sigmoid_clamped":  # the 910 static file: vmaxs(x, -ln(65504) to 3 decimals) in fp16 (L126-133)
        x = b.op("Max", [x, b.f16(int(-np.log(65504.0) * 1000) / 1000)])
    n = b.op("Neg", [x])
    if r == "sigmoid_fp32_exp16":  # fp32 input on Ascend310: exp in fp16, the rest fp32 (L138-149)
        e = b.r16(b.op("Exp", [b.r16(n)]))
        b.op("Reciprocal", [b.op("Add", [e, b.const(1.0)])], node.output[0])
        return True
    e = b.r16(b.op("Exp", [n]))
    s = b.r16(b.op("Add", [e, b.f16(1.0)]))
    b.op("Reciprocal", [s], node.output[0])  # vrec in fp16: rounded by the output's own rounding
    return True


def _tanh(b, node, kernel, ctx, original_inputs):
    x = node.input[0]
    r = kernel.recipe
    if r.startswith("tanh_fast"):
        step = b.r16 if r.endswith("fp16") else (lambda t: t)
        c = (b.f16 if r.endswith("fp16") else b.const)
        x2 = step(b.op("Mul", [x, x]))
        a = step(b.op("Mul", [x2, step(b.op("Add", [x2, c(378.0)]))]))
        a = step(b.op("Mul", [x2, step(b.op("Add", [a, c(17325.0)]))]))
        a = step(b.op("Mul", [x, step(b.op("Add", [a, c(135135.0)]))]))
        d = step(b.op("Mul", [x2, step(b.op("Add", [step(b.op("Mul", [x2, c(28.0)])), c(3150.0)]))]))
        d = step(b.op("Mul", [x2, step(b.op("Add", [d, c(62370.0)]))]))
        d = step(b.op("Add", [d, c(135135.0)]))
        q = step(b.op("Div", [a, d]))
        b.op("Max", [b.op("Min", [q, c(1.0)]), c(-1.0)], node.output[0])  # tanh.py L130-147
        return True
    fp16 = r == "tanh_fp16"
    step = b.r16 if fp16 else (lambda t: t)
    tiny = 2.0 ** -14 if fp16 else 2.0 ** -126  # MIN_FP_DATA (tanh.py L57-62)
    a = b.op("Abs", [x])
    p = step(b.op("Mul", [a, b.const(-2.0)]))
    e = b.op("Exp", [b.r16(p) if r == "tanh_fp32_exp16" else p])
    e = b.r16(e) if (fp16 or r == "tanh_fp32_exp16") else e
    up = step(b.op("Sub", [x, step(b.op("Mul", [e, x]))]))
    down = step(b.op("Mul", [step(b.op("Add", [e, b.const(1.0)])), step(b.op("Add", [a, b.const(tiny)]))]))
    b.op("Div", [up, down], node.output[0])
    return True


def _pow(b, node, kernel, ctx, original_inputs):
    """dynamic/pow.py L103-240 on Ascend310: ln, y * ln and exp in fp16; the sign and zero logic in fp32."""
    if b.opset < 10:
        ctx.notes[node.name] = "Pow's fp16 ln/exp needs opset 10 (Mod) here: computed in fp32"
        return None
    # an integer exponent (Pow(float, int32)) is read as a float: the kernel computes y * ln|x| in float
    x, y = node.input[0], b.op("Cast", [node.input[1]], to=1)
    sign = b.op("Sign", [x])
    nonzero = b.op("Abs", [sign])
    zx = b.op("Sub", [b.const(1.0), nonzero])
    zy = b.op("Sub", [b.const(1.0), b.op("Abs", [b.op("Sign", [y])])])
    neg = b.op("Mul", [b.op("Mul", [b.op("Sub", [b.const(1.0), sign]), nonzero]), b.const(0.5)])
    x1 = b.op("Add", [x, zx])
    y16 = b.r16(y)
    pos = b.r16(b.op("Exp", [b.r16(b.op("Mul", [y16, b.r16(b.op("Log", [b.r16(b.op("Abs", [x1]))]))]))]))
    res_pos = b.op("Mul", [pos, b.op("Sub", [b.op("Sub", [b.const(1.0), neg]), zx])])
    mod = b.r16(b.op("Mod", [b.r16(b.op("Abs", [y16])), b.f16(2.0)], fmod=1))
    sgn = b.r16(b.op("Add", [b.r16(b.op("Mul", [mod, b.f16(-2.0)])), b.f16(1.0)]))
    mag = b.r16(b.op("Exp", [b.r16(b.op("Mul", [y16, b.r16(b.op("Log", [b.r16(b.op("Abs", [b.r16(x1)]))]))]))]))
    res_neg = b.op("Mul", [b.r16(b.op("Mul", [sgn, mag])), neg])
    b.op("Add", [b.op("Add", [res_pos, res_neg]), b.op("Mul", [zx, zy])], node.output[0])
    return True


def _bn_consts(b, node, ctx, original_inputs, rank):
    """mean' = -mean and var' = 1/sqrt(var + eps), made in fp32 on the host (HostBNFusionPass, canndev
    hostbn_fusion_pass.cc L126-140: BnHost + BNInferenceD), read by the kernel as fp16 weights."""
    from ascendpipe.precision.fp16 import host_fp16

    values = [ctx.inits.get(t) for t in original_inputs[1:5]]
    if any(v is None for v in values):
        return None
    scale, bias, mean, var = (np.asarray(v, np.float32) for v in values)
    eps = float(_attr(node, "epsilon", 1e-5))
    shape = [-1] + [1] * (rank - 2)
    mean_p = (-mean).astype(np.float32)
    var_p = (np.float32(1.0) / np.sqrt(var + np.float32(eps))).astype(np.float32)
    return [a.reshape(shape) for a in (mean_p, var_p, scale, bias)], host_fp16


def _bninference(b, node, kernel, ctx, original_inputs):
    dims = ctx.shapes.get(original_inputs[0])
    rank = len(dims) if dims is not None else 4
    made = _bn_consts(b, node, ctx, original_inputs, rank)
    if made is None or len(node.output) > 1 and any(node.output[1:]):
        ctx.notes[node.name] = "BatchNormalization with non-constant statistics: not made a BNInferenceD"
        return None
    (mean_p, var_p, scale, bias), host = made
    x = node.input[0]
    if kernel.recipe == "bninference_fp32":
        t = b.op("Mul", [b.op("Add", [x, b.const(mean_p)]), b.const(var_p)])
        b.op("Add", [b.op("Mul", [t, b.const(scale)]), b.const(bias)], node.output[0])
        return True
    m16, v16, s16, c16 = (b.const(host(a)) for a in (mean_p, var_p, scale, bias))
    t = b.r16(b.op("Mul", [v16, b.r16(b.op("Add", [x, m16]))]))  # bninference_d.py L198-201
    if kernel.recipe == "bninference_fp16":
        t = b.r16(b.op("Mul", [t, s16]))
        b.op("Add", [t, c16], node.output[0])
    else:
        b.op("Add", [b.op("Mul", [t, s16]), c16], node.output[0])  # fp32 (L203-218)
    return True


def _gelu(b, node, kernel, ctx, original_inputs):
    x = node.input[0]
    fp16 = kernel.recipe.endswith("fp16")
    step = b.r16 if fp16 else (lambda t: t)
    c = b.f16 if fp16 else b.const
    if kernel.recipe.startswith("gelu_fast"):  # fast_gelu_v2.py L59-86
        v = step(b.op("Mul", [x, c(0.7071)]))
        v = step(b.op("Add", [step(b.op("Min", [step(b.op("Abs", [v])), c(1.769)])), c(-1.769)]))
        t = step(b.op("Add", [step(b.op("Mul", [step(b.op("Mul", [v, v])), c(-0.1444)])), c(0.5)]))
        xs = step(b.op("Add", [x, c(0.000000000001)]))
        sgn = step(b.op("Div", [xs, step(b.op("Abs", [xs]))]))
        t = step(b.op("Add", [step(b.op("Mul", [t, sgn])), c(0.5)]))
        b.op("Mul", [x, t], node.output[0])
        return True
    cube = step(b.op("Mul", [step(b.op("Mul", [x, x])), x]))  # gelu.py L30-42, L93-113
    y = step(b.op("Mul", [step(b.op("Add", [x, step(b.op("Mul", [cube, c(0.044715)]))])), c(1.5957691)]))
    right = step(b.op("Exp", [step(b.op("Min", [y, c(0.0)]))]))
    e = step(b.op("Exp", [step(b.op("Neg", [b.op("Abs", [y])]))]))
    left = step(b.op("Div", [x, step(b.op("Add", [e, c(1.0)]))]))
    b.op("Mul", [left, right], node.output[0])
    return True


def _layer_norm(b, node, kernel, ctx, original_inputs):
    """layer_norm.py L574-709 (static), dynamic/layer_norm.py L459-580 (the template)."""
    if sum(1 for o in node.output if o) > 1:  # ONNX LayerNormalization's Mean/InvStdDev outputs: not the kernel's
        ctx.notes[node.name] = "LayerNormalization's Mean/InvStdDev outputs are used: left to onnxruntime's op"
        return None
    dims = ctx.shapes.get(original_inputs[0])
    axis = int(_attr(node, "axis", -1))
    eps = float(_attr(node, "epsilon", 1e-5))
    if dims is None and axis >= 0:
        ctx.notes[node.name] = "LayerNorm with an unknown input rank: computed by onnxruntime's op in fp32"
        return None
    rank = len(dims) if dims is not None else None
    axes = list(range(axis, rank)) if axis >= 0 else list(range(axis, 0))
    x, gamma, beta = node.input[0], node.input[1], (node.input[2] if len(node.input) > 2 and node.input[2] else None)
    params = dict(kernel.params)
    r = kernel.recipe
    fp16 = r in ("layer_norm_fp16", "layer_norm_keep_fp16")
    known = rank is not None and _static_over(dims, axes)
    if fp16 and not known:
        ctx.notes[node.name] = "fp16 sums of the LayerNorm not emulated (normalised dims not static here): summed in fp32"
    tree = fp16 and known
    n = int(np.prod([dims[a] for a in axes])) if known else None
    step = b.r16 if fp16 else (lambda t: t)
    if fp16:
        cof = b.f16(1.0 / n) if n else b.op("Reciprocal", [b.op("Cast", [b.op("ReduceProd", [
            b.op("Gather", [b.op("Shape", [x]), b.const(axes, np.int64)])], keepdims=1)], to=1)])
    else:
        cof = b.const(np.float32(1.0 / n)) if n else None

    def total(t):
        if tree:
            return b.tree16(t, tuple(dims), axes, 1)
        summed = b.reduce("ReduceSum", t, axes) if cof is not None else b.reduce("ReduceMean", t, axes)
        return step(summed)

    if r == "layer_norm_keep_fp16":  # sum before scaling (L645-655)
        mean = step(b.op("Mul", [total(x), cof]))
        d = step(b.op("Sub", [x, mean]))
        var = step(b.op("Mul", [total(step(b.op("Mul", [d, d]))), cof]))
    else:
        mean = total(step(b.op("Mul", [x, cof])) if cof is not None else x)
        if r == "layer_norm_template":
            mean = b.r16(mean)  # mean_16 = cast_to(mean, fp16); back to fp32 (dynamic L531-533)
        d = step(b.op("Sub", [x, mean]))
        sq = step(b.op("Mul", [d, d]))
        var = total(step(b.op("Mul", [sq, cof])) if cof is not None else sq)
        if r == "layer_norm_template":
            var = b.r16(var)  # L541-543
    eps_c = b.f16(eps) if fp16 else b.const(np.float32(eps))
    added = step(b.op("Add", [var, eps_c]))
    if params.get("normalize") == "sqrt" and not fp16:
        rstd = b.op("Div", [b.const(1.0), b.op("Sqrt", [added])])
    else:
        rstd = step(b.op("Exp", [step(b.op("Mul", [step(b.op("Log", [added])), b.const(-0.5)]))]))
    normed = step(b.op("Mul", [d, rstd]))
    scaled = step(b.op("Mul", [gamma, normed]))
    if beta is None:
        b.op("Identity", [scaled], node.output[0])
    else:
        b.op("Add", [scaled, beta], node.output[0])
    return True


def _exp16(b, node, kernel, ctx, original_inputs):
    """fp32 input on Ascend310: cast to fp16, vexp in fp16, cast back (dynamic/exp.py L66-68, L89-90)."""
    b.op("Identity", [b.r16(b.op("Exp", [b.r16(node.input[0])]))], node.output[0])
    return True


_RECIPES = {
    "exp_fp16": _exp16,
    "softmax": _softmax, "softmax_exp16": _softmax, "softmax_fp32_exp16": _softmax,
    "log_softmax": _log_softmax, "log_softmax_fp16": _log_softmax,
    "reduce_mean_fp16": _reduce_fp16, "reduce_sum_fp16": _reduce_fp16,
    "sigmoid": _sigmoid, "sigmoid_clamped": _sigmoid, "sigmoid_poly": _sigmoid, "sigmoid_fp32_exp16": _sigmoid,
    "tanh_fp16": _tanh, "tanh_fp32_exp16": _tanh, "tanh_fast": _tanh, "tanh_fast_fp16": _tanh,
    "pow_lnexp16": _pow,
    "bninference": _bninference, "bninference_fp16": _bninference, "bninference_fp32": _bninference,
    "gelu_tanh": _gelu, "gelu_tanh_fp16": _gelu, "gelu_fast": _gelu, "gelu_fast_fp16": _gelu,
    "layer_norm": _layer_norm, "layer_norm_fp16": _layer_norm, "layer_norm_template": _layer_norm,
    "layer_norm_keep_fp16": _layer_norm, "layer_norm_fp32_input": _layer_norm,
}
# ops whose weights the kernel reads through its own host conversion (the generic rounding skips them)
RAW_WEIGHT_INPUTS = {"bninference": (1, 2, 3, 4), "bninference_fp16": (1, 2, 3, 4), "bninference_fp32": (1, 2, 3, 4)}
