"""Turn what the user names (a model, a converted model dir, a dump dir) into dump dirs, then compare.

Used by both the ``compare`` stage kind and the ``ascendpipe compare`` command. onnx/onnxruntime
are imported only when a model has to be dumped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascendpipe.errors import Location, UserError

_NP_DTYPES = {1: np.float32, 10: np.float16, 11: np.float64, 6: np.int32, 7: np.int64, 2: np.uint8, 3: np.int8, 9: np.bool_}


@dataclass
class Side:
    dump_dir: Path | None = None  # an existing dump
    model: Path | None = None  # an .onnx to dump
    fused_map: dict | None = None
    precision_plan: dict | None = None
    om_json: dict | None = None


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})", Location(file=str(path))) from None


def resolve_side(path: Path, role: str) -> Side:
    """A dump dir (has index.json), a converted model dir (model.onnx / model.json + maps), or an .onnx."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{role} '{path}' does not exist; give an .onnx model, a converted model dir or a dump dir",
                        Location(file=str(path), field=role))
    if path.is_file():
        if path.suffix != ".onnx":
            raise UserError(f"{role} '{path}' is not an .onnx model; give a model, a converted model dir or a dump dir",
                            Location(file=str(path), field=role))
        side = Side(model=path)
        folder = path.parent
    else:
        folder = path
        side = Side()
        if (path / "index.json").is_file():
            side.dump_dir = path
        elif (path / "dump" / "index.json").is_file():
            side.dump_dir = path / "dump"
        else:
            models = sorted(path.glob("*.onnx"))
            if len(models) != 1:
                found = ", ".join(m.name for m in models) or "none"
                raise UserError(f"{role} dir '{path}' has no index.json and not exactly one .onnx model (found {found})",
                                Location(file=str(path), field=role))
            side.model = models[0]
    side.fused_map = _read_json(folder / "fused_map.json")
    side.precision_plan = _read_json(folder / "precision_plan.json")
    side.om_json = _read_json(folder / "model.json")
    return side


def input_specs(model: Path) -> list[tuple[str, tuple[int, ...], type]]:
    """(name, shape, numpy dtype) of the model's real inputs; symbolic dims become 1."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    specs = []
    for value in graph.input:
        if value.name in inits:
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tensor.shape.dim)
        specs.append((value.name, shape, _NP_DTYPES.get(tensor.elem_type, np.float32)))
    return specs


def make_feeds(model: Path, input_path: Path | None, seed: int) -> tuple[dict[str, np.ndarray], str]:
    """Feeds from a .npy/.npz, or seeded random ones (said in the returned note)."""
    specs = input_specs(model)
    if input_path is None:
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, shape, dtype in specs:
            if np.issubdtype(dtype, np.floating):
                feeds[name] = rng.standard_normal(shape).astype(dtype)
            else:
                feeds[name] = rng.integers(0, 2 if dtype is np.bool_ else 255, shape).astype(dtype)
        described = ", ".join(f"{n} {list(s)} {np.dtype(d).name}" for n, s, d in specs)
        return feeds, f"no input given: seeded random input (seed {seed}): {described}"
    input_path = Path(input_path)
    if not input_path.is_file():
        raise UserError(f"input '{input_path}' does not exist", Location(file=str(input_path), field="inputs"))
    loaded = np.load(input_path, allow_pickle=False)
    if isinstance(loaded, np.ndarray):
        if len(specs) != 1:
            raise UserError(f"model has {len(specs)} inputs ({', '.join(s[0] for s in specs)}); give an .npz keyed by input name",
                            Location(file=str(input_path), field="inputs"))
        arrays = {specs[0][0]: loaded}
    else:
        arrays = {k: loaded[k] for k in loaded.files}
    feeds = {}
    for name, shape, dtype in specs:
        if name not in arrays:
            raise UserError(f"input '{name}' missing from {input_path} (has {', '.join(arrays)})", Location(file=str(input_path), field="inputs"))
        feeds[name] = arrays[name].astype(dtype, copy=False)
    return feeds, f"input: {input_path}"


def dump(model: Path, feeds: dict, out_dir: Path, *, fusions: bool) -> Path:
    from ascendpipe.backends.onnxruntime.dump import dump_model

    index = Path(dump_model(model, feeds, out_dir, fusions=fusions))
    return index.parent if index.name == "index.json" else index


def run_compare(golden: Path, target: Path, *, input_path: Path | None, work_dir: Path, limits: dict,
                strategy: str = "first-overall", seed: int = 0, convert_stage: str = "convert") -> tuple[dict, str | None]:
    """Resolve both sides, dump what needs dumping under ``work_dir``, compare. Returns (result, input note)."""
    from ascendpipe.compare.runner import compare_dumps, graph_info

    g, t = resolve_side(golden, "golden"), resolve_side(target, "target")
    note = None
    feeds = None
    if g.model or t.model:
        feeds, note = make_feeds(g.model or t.model, input_path, seed)
    golden_dump = g.dump_dir or dump(g.model, feeds, Path(work_dir) / "golden_dump", fusions=False)
    target_dump = t.dump_dir or dump(t.model, feeds, Path(work_dir) / "target_dump", fusions=True)
    graph = graph_info(g.model) if g.model else None
    result = compare_dumps(golden_dump, target_dump, limits=limits, strategy=strategy, fused_map=t.fused_map,
                           om_json=t.om_json, precision_plan=t.precision_plan, graph=graph, convert_stage=convert_stage)
    return result, note
