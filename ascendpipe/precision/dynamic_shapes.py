"""The shapes an OM takes: ATC's ``--input_shape`` (derived or given) and its dynamic gears, resolved from
the model's inputs and a stage's params, and the check that a feed is one the OM would take. Pure.

ATC's rules, each checked here with its source:
- a model input with a non-fixed dim needs ``--input_shape`` ("If the original model has a non-fixed shape,
  --input_shape is required": hiascend 850 ``atlasatcparam_16_0016``);
- ``--dynamic_batch_size`` "1,2,4,8": with ``--input_shape`` whose first dim is ``-1``; mutually exclusive
  with ``--dynamic_image_size``, ``--dynamic_dims``, ``--input_shape_range``; (1, 100] gears, each in
  [1, 2048] (hiascend 800/850 ``atlasatcparam_16_0018``, AOE ``aoerc_16_0027``);
- ``--dynamic_image_size`` "h,w;h,w": ``-1`` at an input's H and W; the same exclusivity and gear count
  (``atlasatcparam_16_0018``'s "See Also"; the H/W placement as ATC's dynamic image size examples show);
- ``--dynamic_dims`` "d1,d2;d3,d4": each gear gives one value per ``-1`` in ``--input_shape``, in order;
  (1, 100] gears; with ``--input_format``; not with ``--insert_op_conf`` (``atlasatcparam_16_0020``);
- ``--input_shape_range`` / ranges ``lo~hi`` in ``--input_shape``: not with the gears (``atlasatc_16_0051``);
  not on Atlas 200/300/500 inference products, i.e. Ascend310 (``aclpythondevg_0047``: "Atlas 200/300/500
  推理产品不支持该特性"), nor on Atlas 200I/500 A2 inference products, i.e. Ascend310B* (CANN 8.0
  ``atlasatcparam_16_0016``, --input_shape: "设置shape范围(动态shape)。Atlas 200/300/500 推理产品、Atlas
  200I/500 A2 推理产品不支持设置shape范围"; the same in 8.0.RC2 ``atlasatc_16_0050``).
"""

from __future__ import annotations

from ascendpipe.errors import Location, UserError, few
from ascendpipe.precision.input_shape import dim_range, format_input_shape, has_range, is_fixed, parse_input_shape

GEAR_OPTIONS = ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims")
SHAPE_OPTIONS = ("input_shape", *GEAR_OPTIONS, "input_shape_range")
MAX_GEARS = 100
MAX_BATCH = 2048
NO_RANGE_SOCS = ("Ascend310",)  # exactly: Ascend310P is another family (it takes ranges)
NO_RANGE_PREFIXES = ("Ascend310B",)  # Atlas 200I/500 A2 (the Orange Pi AIpro's Ascend310B1): no ranges either


def takes_ranges(soc_version: str | None) -> bool:
    """Whether ATC builds a shape-range (dynamic shape) OM for this SoC (see the module docstring)."""
    return not (soc_version in NO_RANGE_SOCS or str(soc_version or "").startswith(NO_RANGE_PREFIXES))


class ShapePlan:
    """What the OM takes: ``input_shape`` (name -> dims as ATC gets them), a gear option and its gears,
    and ``accepted``: one {name: fixed dims} per gear (one for a static OM; none for a range OM)."""

    def __init__(self, input_shape: dict[str, list], option: str | None, gears: list[list[int]],
                 accepted: list[dict[str, list[int]]], derived: bool, shape_range: dict[str, list] | None = None):
        self.input_shape, self.option, self.gears = input_shape, option, gears
        self.accepted, self.derived, self.shape_range = accepted, derived, shape_range

    @property
    def mode(self) -> str:
        if self.option:
            return self.option
        return "range" if self.shape_range or (self.input_shape and not all(map(is_fixed, self.input_shape.values()))) \
            else "static"

    def atc_options(self) -> list[str]:
        """The argv options (``--input_shape`` and a gear option) ATC and AOE get."""
        argv = [f"--input_shape={format_input_shape(self.input_shape)}"] if self.input_shape else []
        if self.option:
            argv.append(f"--{self.option}={format_gears(self.option, self.gears)}")
        if self.shape_range:
            argv.append("--input_shape_range=" + ";".join(
                f"{n}:[{','.join(str(d) for d in dims)}]" for n, dims in self.shape_range.items()))
        return argv

    def record(self) -> dict:
        """convert.json's ``shapes``: what the OM takes (infer and dump feed only these)."""
        return {"mode": self.mode, "input_shape": format_input_shape(self.input_shape) if self.input_shape else None,
                "derived": self.derived, "option": self.option, "gears": self.gears, "accepted": self.accepted,
                "range": {n: [list(dim_range(d)) for d in dims] for n, dims in self._ranges().items()} or None}

    def _ranges(self) -> dict[str, list]:
        if self.shape_range:
            return self.shape_range
        return {n: dims for n, dims in self.input_shape.items() if not is_fixed(dims)} if self.mode == "range" else {}


def format_gears(option: str, gears: list[list[int]]) -> str:
    if option == "dynamic_batch_size":
        return ",".join(str(g[0]) for g in gears)
    return ";".join(",".join(str(v) for v in g) for g in gears)


def _ints(text: str, option: str, where: Location) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise UserError(f"{option} '{text}' is not a comma list of integers", where) from None
    return values


def parse_gears(option: str, value, where: Location) -> list[list[int]]:
    """A gear option as given (ATC's string, or a YAML list) -> one list of ints per gear."""
    if isinstance(value, (list, tuple)):
        gears = [[int(v)] if not isinstance(v, (list, tuple)) else [int(x) for x in v] for v in value]
    elif option == "dynamic_batch_size":
        gears = [[v] for v in _ints(str(value), option, where)]
    else:
        gears = [_ints(g, option, where) for g in str(value).split(";") if g.strip()]
    if not 1 < len(gears) <= MAX_GEARS:
        raise UserError(f"{option} needs 2 to {MAX_GEARS} gears, given {len(gears)} (ATC: the gear count is in "
                        f"(1, 100], atlasatcparam_16_0018/0020)", where)
    if option == "dynamic_batch_size" and any(not 1 <= g[0] <= MAX_BATCH for g in gears):
        raise UserError(f"{option}: each batch size must be in [1, {MAX_BATCH}] (ATC, atlasatcparam_16_0018)", where)
    if option == "dynamic_image_size" and any(len(g) != 2 for g in gears):
        raise UserError(f"{option}: each gear is 'h,w' (e.g. \"224,224;448,448\")", where)
    if len({len(g) for g in gears}) != 1 or any(v < 1 for g in gears for v in g):
        raise UserError(f"{option}: every gear needs the same number of positive values", where)
    return gears


def _model_dims(spec) -> list:
    return [d if isinstance(d, int) and d >= 0 else -1 for d in spec.shape]  # 0: a pinned empty dim


def _derive(specs, option: str | None, examples: dict[str, list[int]] | None, where: Location) -> dict[str, list]:
    """``--input_shape`` from the model's inputs and what the pipeline feeds (the export's example shapes):
    every non-fixed dim takes the example's size, except the dims a gear option makes dynamic (-1); without
    an example an open batch axis (dim 0) becomes 1 (infer and dump re-batch samples along it), any other
    open dim is a located error."""
    shape: dict[str, list] = {}
    for spec in specs:
        dims = _model_dims(spec)
        if -1 not in dims:
            shape[spec.name] = dims
            continue
        example = (examples or {}).get(spec.name)
        dynamic = [axis for axis, d in enumerate(dims) if d == -1]
        keep = {"dynamic_batch_size": {0}, "dynamic_image_size": {len(dims) - 2, len(dims) - 1},
                "dynamic_dims": set(dynamic)}.get(option or "", set())
        if example is None or len(example) != len(dims):
            if set(dynamic) - keep <= {0}:
                # only the batch axis is open: samples are re-batched along it, so batch 1 takes any feed
                shape[spec.name] = [(-1 if axis in keep else 1) if d == -1 else d for axis, d in enumerate(dims)]
                continue
            raise UserError(
                f"atc needs --input_shape: input '{spec.name}' has a non-fixed dim ({_show(spec.shape)}), and no "
                f"example shape is known for it (ATC: 'If the original model has a non-fixed shape, --input_shape "
                f"is required', atlasatcparam_16_0016)", Location(stage=where.stage, field="input_shape"),
                hint=f"set params.input_shape, e.g. {spec.name}:{','.join(str(d if d >= 0 else 1) for d in dims)}, "
                     f"or a gear option (dynamic_batch_size: \"1,2,4,8\")")
        shape[spec.name] = [(-1 if axis in keep else example[axis]) if d == -1 else d for axis, d in enumerate(dims)]
    return shape


def _show(shape) -> str:
    return "[" + ",".join(str(d) if isinstance(d, int) and d >= 0 else (d or "?") if isinstance(d, str) else "?"
                          for d in shape) + "]"


def resolve(specs, params: dict, *, soc_version: str | None = None, examples: dict[str, list[int]] | None = None,
            aipp: bool = False, stage: str | None = None) -> ShapePlan:
    """The OM's shapes for a convert stage: ``specs`` the ONNX's inputs (InputSpec), ``params`` the stage's
    (input_shape, the gear options, input_shape_range), ``examples`` the shapes the pipeline feeds the
    model (an export stage's input_shapes), when known."""
    def at(field):
        return Location(stage=stage, field=field)

    names = [s.name for s in specs]
    given = [o for o in (*GEAR_OPTIONS, "input_shape_range") if params.get(o) not in (None, "", [])]
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)} cannot be combined: ATC takes one of dynamic_batch_size, "
                        f"dynamic_image_size, dynamic_dims, input_shape_range (atlasatcparam_16_0018)", at(given[1]))
    option = next((o for o in given if o in GEAR_OPTIONS), None)
    if option == "dynamic_dims" and aipp:
        raise UserError("dynamic_dims cannot be combined with AIPP (insert_op_conf) (ATC, atlasatcparam_16_0020)",
                        at("dynamic_dims"))
    raw = params.get("input_shape")
    if raw not in (None, "", {}):
        shape = parse_input_shape(format_input_shape(raw) if isinstance(raw, dict) else str(raw), at("input_shape"))
        derived = False
    else:
        shape, derived = _derive(specs, option, examples, at("input_shape")), True
        if all(isinstance(d, int) and d >= 0 for s in specs for d in s.shape) and not option:
            shape = {}  # a fixed model needs no --input_shape (ATC: optional then)
    for name in shape:
        if name not in names:
            raise UserError(f"input_shape names '{name}', which is not a model input; inputs: {few(names)}",
                            at("input_shape"))
    shape_range = None
    if params.get("input_shape_range") not in (None, "", [], {}):
        text = str(params["input_shape_range"]).replace("[", "").replace("]", "")
        shape_range = parse_input_shape(text, at("input_shape_range"))
        for name in shape_range:
            if name not in names:
                raise UserError(f"input_shape_range names '{name}', which is not a model input; inputs: "
                                f"{few(names)}", at("input_shape_range"))
    if (shape_range or (shape and has_range(shape)) or (shape and not option and
                                                         not all(map(is_fixed, shape.values())))) \
            and not takes_ranges(soc_version):
        product = "Atlas 200I/500 A2 inference" if str(soc_version).startswith("Ascend310B") else \
            "Atlas 200/300/500 inference"
        raise UserError(f"{soc_version} ({product}) does not run a shape-range model (-1 or lo~hi without a gear "
                        f"option; aclpythondevg_0047, atlasatcparam_16_0016): give fixed dims or a gear option",
                        at("input_shape"))
    gears: list[list[int]] = []
    accepted: list[dict[str, list[int]]] = []
    if option:
        gears = parse_gears(option, params[option], at(option))
        accepted = _gear_shapes(option, gears, shape, at(option))
    elif shape and all(map(is_fixed, shape.values())) and not shape_range:
        fixed = {s.name: _model_dims(s) for s in specs}
        fixed.update(shape)
        accepted = [fixed] if all(map(is_fixed, fixed.values())) else []
    elif not shape and not shape_range:
        accepted = [{s.name: list(s.shape) for s in specs}]
    return ShapePlan(shape, option, gears, accepted, derived, shape_range)


def _gear_shapes(option: str, gears: list[list[int]], shape: dict[str, list], where: Location) -> list[dict]:
    """One {name: dims} per gear: the gear's values in place of the -1 dims ATC's rules allow."""
    if any(isinstance(d, str) for dims in shape.values() for d in dims):
        raise UserError(f"{option} takes -1 dims in input_shape, not ranges lo~hi (atlasatcparam_16_0018)", where)
    minus = [(n, axis) for n, dims in shape.items() for axis, d in enumerate(dims) if d == -1]
    if not minus:
        raise UserError(f"{option} needs input_shape with -1 at the dims it varies (ATC: set the dim to -1, "
                        f"atlasatcparam_16_0018/0020); input_shape is {format_input_shape(shape)}", where)
    if option == "dynamic_batch_size" and any(axis != 0 for _, axis in minus):
        raise UserError("dynamic_batch_size varies only the first dim: input_shape may have -1 only there "
                        "(ATC: 'the first place of the shape is set to -1', atlasatcparam_16_0018); "
                        "use dynamic_dims for other dims", where)
    if option == "dynamic_image_size":
        by_name: dict[str, list[int]] = {}
        for n, axis in minus:
            by_name.setdefault(n, []).append(axis)
        if any(len(axes) != 2 or axes != [len(shape[n]) - 2, len(shape[n]) - 1] for n, axes in by_name.items()):
            raise UserError("dynamic_image_size needs -1 at exactly an input's H and W (its last two dims) in "
                            "input_shape", where)
    if option == "dynamic_dims" and any(len(g) != len(minus) for g in gears):
        raise UserError(f"dynamic_dims: each gear needs {len(minus)} values, one per -1 in input_shape, in order "
                        f"(ATC, atlasatcparam_16_0020)", where)
    accepted = []
    for gear in gears:
        dims = {n: list(d) for n, d in shape.items()}
        if option == "dynamic_batch_size":
            for n, axis in minus:
                dims[n][axis] = gear[0]
        elif option == "dynamic_image_size":
            for n in {n for n, _ in minus}:
                dims[n][-2], dims[n][-1] = gear
        else:
            for (n, axis), value in zip(minus, gear):
                dims[n][axis] = value
        accepted.append(dims)
    return accepted


def feed_error(record: dict, feed: dict[str, tuple], *, stage: str | None = None) -> UserError | None:
    """Why the OM would refuse ``feed`` (name -> shape), or None: a feed must match one accepted gear
    exactly (ais_bench: "tensorsize ... filesize ... not match"), or lie in the range of a range OM."""
    where = Location(stage=stage, field="inputs")
    accepted = record.get("accepted") or []
    shapes = {n: list(s) for n, s in feed.items()}
    if record.get("mode") in ("static", "dynamic_batch_size") and accepted:
        # ascendpipe re-batches samples along axis 0 to the OM's batch (a static OM's, a batch-gear OM's
        # largest gear), padding the last: only the other dims must be the OM's
        largest = max(accepted, key=lambda g: next(iter(g.values()), [0])[:1] or [0])
        if all(n in shapes and len(shapes[n]) == len(d) and shapes[n][1:] == list(d[1:]) for n, d in largest.items()):
            return None
    if accepted:
        if any(all(shapes.get(n) == list(dims) for n, dims in gear.items()) for gear in accepted):
            return None
        takes = " | ".join(";".join(f"{n}:{','.join(map(str, d))}" for n, d in g.items()) for g in accepted)
        given = ";".join(f"{n}:{','.join(map(str, s))}" for n, s in shapes.items())
        return UserError(f"the OM takes {takes} ({record.get('mode')}), not {given}: the device would refuse this "
                         f"feed", where, hint="feed that shape, or convert with a gear option that includes it")
    for name, ranges in (record.get("range") or {}).items():
        have = shapes.get(name)
        if have is None or len(have) != len(ranges) or any(
                v < lo or (hi is not None and v > hi) for v, (lo, hi) in zip(have, ranges)):
            return UserError(f"input '{name}' {have} is outside the OM's shape range {ranges}", where)
    return None


def om_input_specs(record: dict, onnx_inputs: list[dict]) -> list[dict]:
    """convert.json's ``inputs``: the ONNX's inputs with the dims the OM fixes (a static OM: every dim; a
    batch-gear OM: the batch is its largest gear, so feeds are padded to it; other gears stay dynamic)."""
    accepted = record.get("accepted") or []
    out = []
    for spec in onnx_inputs:
        dims = list(spec["shape"])
        if accepted:
            values = [g[spec["name"]] for g in accepted if spec["name"] in g]
            if values:
                dims = [column[0] if len(set(column)) == 1 else
                        (max(column) if record.get("mode") == "dynamic_batch_size" and axis == 0 else "gear")
                        for axis, column in enumerate(zip(*values))]
        out.append({**spec, "shape": dims})
    return out


# ---- the emulator's side (I/O: the model's specs and its convert.json) ------------------------------------

def aipp_feed_shapes(record: dict, converted_specs) -> dict:
    """With AIPP the OM's data input is the camera's uint8 NHWC image (AIPP's ``src_image_size``), not the
    float NCHW tensor ``input_shape`` gives the ONNX: each accepted shape of an AIPP input takes the
    converted model's dims, its batch the gear's (``input_shape``'s N), so infer, dump and compare feed the
    uint8 images the device takes. An input AIPP does not touch keeps its shape."""
    by_name = {s.name: s for s in converted_specs}
    for gear in record.get("accepted") or []:
        for name, dims in list(gear.items()):
            spec = by_name.get(name)
            if spec is None or spec.dtype != "uint8" or len(spec.shape) != len(dims) or len(dims) != 4:
                continue
            rest = list(spec.shape[1:])
            if not all(isinstance(d, int) and d > 0 for d in rest):  # NCHW's H, W, C in NHWC order
                rest = [dims[2], dims[3], dims[1]]
            gear[name] = [dims[0], *rest]
    record["aipp_inputs"] = sorted(n for n, spec in by_name.items() if spec.dtype == "uint8") or None
    return record


def record_emulated_shapes(model, params: dict, out_dir, soc_version: str | None = None) -> dict | None:
    """On onnxruntime: when a convert stage gives input_shape or a gear option, add the shapes the OM would
    take to its convert.json (``shapes``), so infer and dump refuse a feed the device would refuse."""
    import json
    from pathlib import Path

    from ascendpipe.fsutil import write_json_atomic
    from ascendpipe.onnxgraph import read_input_specs

    if all(params.get(o) in (None, "", [], {}) for o in SHAPE_OPTIONS):
        return None
    aipp = bool(params.get("aipp") or params.get("insert_op_conf"))
    record = resolve(read_input_specs(Path(model)), params, soc_version=soc_version, aipp=aipp).record()
    converted = Path(out_dir) / "model.onnx"
    if aipp and converted.is_file():
        aipp_feed_shapes(record, read_input_specs(converted))
    path = Path(out_dir) / "convert.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data["shapes"] = record
    write_json_atomic(path, data)
    return record


def check_feeds(ctx, batches) -> None:
    """Refuse the first batch the OM would not take, from the ``shapes`` its convert folder records
    (either backend); a model that is not a convert output (no record) takes any feed."""
    import json
    from pathlib import Path

    source = ctx.inputs.get("model")
    path = Path(source) / "convert.json" if source is not None and Path(source).is_dir() else None
    if path is None or not path.is_file():
        return
    shapes = json.loads(path.read_text()).get("shapes")
    model = Path(source) / "model.onnx"
    if shapes and "aipp_inputs" not in shapes and model.is_file():  # recorded before AIPP feeds were: the OM's own
        from ascendpipe.onnxgraph import read_input_specs

        aipp_feed_shapes(shapes, read_input_specs(model))
    for batch in batches if shapes else []:
        err = feed_error(shapes, {n: tuple(a.shape) for n, a in batch.items()}, stage=ctx.name)
        if err is not None:
            raise err
