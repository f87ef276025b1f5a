"""Turn what the user names (a model, a converted model dir, a dump dir) into dump dirs, then compare.

Used by both the ``compare`` stage kind and the ``ascendpipe compare`` command. onnx/onnxruntime
are imported only when a model has to be dumped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascendpipe.backends.dump_budget import StatisticsFirst, parse_budget  # noqa: F401 (stages read it here)
from ascendpipe.backends.dump_retention import folder_bytes, prune_dumps
from ascendpipe.contract import OM_MODEL_FILE as OM_FILE
from ascendpipe.contract import QUANTIZE_RECORD
from ascendpipe.errors import Location, UserError



@dataclass
class Side:
    dump_dir: Path | None = None  # an existing dump
    model: Path | None = None  # an .onnx to dump
    om_dir: Path | None = None  # an ascend convert dir (model.om + convert.json): dumped on the device
    fused_map: dict | None = None
    precision_plan: dict | None = None
    om_json: dict | None = None
    settings: dict | None = None  # a converted model dir's convert.json
    quantization: dict | None = None  # a quantize stage's quantize.json (the target is a fake-quant model)
    source_stage: str | None = None  # a dump stage's dump: the stage that made its model (source.json)


DUMP_SOURCE = "source.json"  # in a dump stage's folder: {"stage", "kind", "model_dir"} of the model it dumped


def _dump_source(dump_dir: Path) -> tuple[Path | None, str | None]:
    """A dump stage's model folder and the stage that made it (e.g. convert@fp16), from ``source.json``:
    a compare of the dump reads the conversion's files there and advises as for the converted model."""
    record = _read_json(Path(dump_dir) / DUMP_SOURCE)
    if not isinstance(record, dict):
        return None, None
    folder = (Path(dump_dir) / str(record.get("model_dir") or "")).resolve() if record.get("model_dir") else None
    stage = record.get("stage") if record.get("kind") == "convert" else None
    return (folder if folder is not None and folder.is_dir() else None), stage


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})", Location(file=str(path))) from None


def resolve_side(path: Path, role: str) -> Side:
    """A dump dir (has index.json), a converted model dir (model.onnx, or on the ascend backend model.om +
    model.json + convert.json), or an .onnx."""
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
        elif (path / OM_FILE).is_file() and not any(path.glob("*.onnx")):
            side.om_dir = path
        else:
            models = sorted(path.glob("*.onnx"))
            if len(models) != 1:
                found = ", ".join(m.name for m in models) or "none"
                raise UserError(f"{role} dir '{path}' has no index.json and not exactly one .onnx model (found {found})",
                                Location(file=str(path), field=role))
            side.model = models[0]
    if side.dump_dir is not None:
        made_in, side.source_stage = _dump_source(side.dump_dir)
        if made_in is not None:
            folder = made_in
    side.fused_map = _read_json(folder / "fused_map.json")
    side.precision_plan = _read_json(folder / "precision_plan.json")
    side.om_json = _read_json(folder / "model.json")
    side.settings = flat_settings(_read_json(folder / "convert.json"))
    side.quantization = _read_json(folder / QUANTIZE_RECORD)
    return side


def flat_settings(record: dict | None) -> dict | None:
    """convert.json as the advisor and AIPP check read it: the ascend backend nests the resolved
    settings under "settings" (beside the atc argv and the OM facts); the emulator writes them flat."""
    if not record or not isinstance(record.get("settings"), dict):
        return record
    return {**{k: v for k, v in record.items() if k != "settings"}, **record["settings"]}


def input_specs(model: Path) -> list:
    """The model's real inputs as ``ascendpipe.inputs.InputSpec`` (read from the graph, no session)."""
    from ascendpipe.onnxgraph import read_input_specs

    return read_input_specs(model)


def om_input_specs(om_dir: Path) -> list:
    """An ascend convert dir's input specs, from its convert.json (what the OM was built for)."""
    from ascendpipe.inputs import InputSpec

    record = _read_json(Path(om_dir) / "convert.json")
    if not record or not isinstance(record.get("inputs"), list):
        raise UserError(f"{om_dir} has model.om but no convert.json with its inputs; compare the output of an "
                        "ascend convert stage", Location(file=str(om_dir), field="target"))
    return [InputSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in record["inputs"]]


def make_feed_batches(model: Path | None, input_path: Path | None, seed: int, *, field: str = "inputs",
                      specs: list | None = None, batch_axes: dict | None = None) -> tuple[list[dict[str, np.ndarray]], str]:
    """Every batch of a .npy/.npz/directory (``ascendpipe.inputs.load_inputs``: all samples of a file as
    one batch, or batches of a fixed-batch model's size, the last one padded), or one seeded random batch
    (said in the returned note). ``specs`` (e.g. an OM's, whose batch may be fixed where the ONNX's is
    not) replace the model's."""
    from ascendpipe.inputs import load_inputs, random_inputs

    specs = input_specs(model) if specs is None else specs
    if input_path is None:
        feeds = dict(random_inputs(specs, seed=seed, batch_axes=batch_axes))
        described = ", ".join(f"{n} {list(a.shape)} {a.dtype.name}" for n, a in feeds.items())
        return [feeds], f"no input given: seeded random input (seed {seed}): {described}"
    input_path = Path(input_path)
    if not input_path.exists():
        raise UserError(f"input '{input_path}' does not exist", Location(file=str(input_path), field=field))
    try:
        batches = load_inputs(input_path, specs, batch_axes=batch_axes)
    except UserError as err:
        raise err.with_location(field=field) from None
    note = f"input: {input_path}"
    if len(batches) > 1:
        note += f" ({len(batches)} batches, each compared)"
    return [dict(b) for b in batches], note


def make_feeds(model: Path | None, input_path: Path | None, seed: int, *, field: str = "inputs",
               specs: list | None = None, batch_axes: dict | None = None) -> tuple[dict[str, np.ndarray], str]:
    """The first batch of ``make_feed_batches`` (for callers that run one batch), and its note."""
    batches, note = make_feed_batches(model, input_path, seed, field=field, specs=specs, batch_axes=batch_axes)
    if len(batches) > 1:
        note = f"input: {input_path} (first batch of {len(batches)})"
    return batches[0], note


def dump(model: Path, feeds: dict, out_dir: Path, *, fusions: bool, gate=None, full=None) -> Path:
    """``full``: the tensors written in full, the rest as statistics (None: every one in full)."""
    from ascendpipe.backends.onnxruntime.dump import dump_model

    index = Path(dump_model(model, feeds, out_dir, fusions=fusions, gate=gate, full=full))
    return index.parent if index.name == "index.json" else index


@dataclass
class Preprocessing:
    golden_feeds: dict[str, np.ndarray] | None  # None: the golden takes the target's feeds
    rows: list[dict]  # the AIPP check rows (before every op)
    note: str | None


def _input_shape_of(settings: dict | None, name: str) -> list | None:
    """The dims convert.json's ``input_shape`` gives input ``name`` (a mapping or ATC's text), or None."""
    given = (settings or {}).get("input_shape")
    if isinstance(given, str) and given:
        from ascendpipe.precision.input_shape import parse_input_shape

        try:
            given = parse_input_shape(given)
        except UserError:
            return None
    dims = given.get(name) if isinstance(given, dict) else None
    return list(dims) if isinstance(dims, list) else None


def aipp_preprocessing(golden_model: Path | None, settings: dict | None, target_feeds: dict, golden_inputs: Path | None,
                       seed: int, stage: str, golden_batch: dict | None = None) -> Preprocessing:
    """With AIPP in the target's settings: the golden's feeds (``golden_inputs``, else the AIPP reference of the
    target's uint8 input) and the AIPP check rows. Without AIPP: the golden reads ``golden_inputs`` if given.
    ``golden_batch``: the batch of ``golden_inputs`` that goes with ``target_feeds`` (default: its first)."""
    from ascendpipe.compare import aipp_check
    from ascendpipe.precision import aipp

    blocks = list((settings or {}).get("aipp") or [])
    golden_feeds = None
    if golden_inputs is not None:
        if golden_model is None:
            raise UserError("golden_inputs needs a golden model to feed, not a dump", Location(field="golden_inputs"))
        golden_feeds = golden_batch
        if golden_feeds is None:
            golden_feeds, _ = make_feeds(golden_model, golden_inputs, seed, field="golden_inputs")
    if not blocks:
        return Preprocessing(golden_feeds, [], f"golden input: {golden_inputs}" if golden_inputs else None)
    if golden_model is None:
        return Preprocessing(None, [], "the target applies AIPP but the golden is a dump: AIPP not checked")
    specs = input_specs(golden_model)
    feeds = dict(golden_feeds) if golden_feeds is not None else {k: v for k, v in target_feeds.items()}
    rows = []
    for i, block in enumerate(blocks):
        rank = block.get("related_input_rank", 0)
        if not isinstance(rank, int) or not 0 <= rank < len(specs):
            raise UserError(f"AIPP related_input_rank {rank} is not a golden model input", Location(field="aipp"))
        spec_in = specs[rank]
        # a dynamic export's C, H, W: the convert's input_shape fixes them, as ATC's --input_shape does for the OM
        fixed = _input_shape_of(settings, spec_in.name)
        dims = fixed[1:] if fixed and len(fixed) == len(spec_in.shape) else spec_in.shape[1:]
        chw = tuple(d if isinstance(d, int) and d > 0 else 1 for d in dims)
        spec = aipp.aipp_spec(block, chw, "convert.json")
        u8 = target_feeds.get(spec_in.name)
        if u8 is None:
            raise UserError(f"the target has no input '{spec_in.name}' for AIPP", Location(field="aipp"))
        if golden_feeds is None:
            feeds[spec_in.name] = aipp_check.device_input(spec, u8)
        else:
            rows.append(aipp_check.check_row(spec, i, spec_in.name, u8, golden_feeds[spec_in.name], blocks=blocks,
                                             stage=stage))
    if golden_feeds is None:
        note = ("the training preprocessing was not checked (no golden_inputs): the golden model is fed the AIPP "
                "reference output of the target's uint8 input")
    else:
        note = f"AIPP checked against the training preprocessing in {golden_inputs}"
    return Preprocessing(feeds, rows, note)


def dump_om_side(side: Side, feeds: dict, out_dir: Path, *, backend: str, log=None, run_command=None,
                 stage: str = "compare") -> Path:
    """Dump a device-model convert dir (model.om) through the backend that runs it
    (``Backend.dump_model``); a backend that does not run OMs is a located user error."""
    from ascendpipe.backends import registry

    runner = registry.get(backend)
    if Path(OM_FILE).suffix not in runner.device_models:
        able = " or ".join(f"--backend {name}" for name in registry.running(Path(OM_FILE).suffix))
        raise UserError(f"target '{side.om_dir}' is an OM (an ascend convert): compare it with {able}, "
                        "or compare a dump dir", Location(file=str(side.om_dir), field="target"))
    return Path(runner.dump_model(side.om_dir, feeds, out_dir, log=log, run_command=run_command, stage=stage))


def compare_feed_batches(g: Side, t: Side, input_path: Path | None, seed: int,
                         batch_axes: dict | None = None) -> tuple[list[dict | None], str | None]:
    """The target's feeds, one per batch (the golden's too, unless AIPP or golden_inputs say otherwise),
    and their note. An OM target is fed by its own input specs: its batch may be fixed where the golden
    ONNX's is not. A side given as a dump holds one batch: then only the first batch is compared."""
    if t.om_dir is not None:
        batches, note = make_feed_batches(None, input_path, seed, specs=om_input_specs(t.om_dir), batch_axes=batch_axes)
    elif g.model or t.model:
        batches, note = make_feed_batches(t.model or g.model, input_path, seed, batch_axes=batch_axes)
    else:
        return [None], None
    if len(batches) > 1 and (g.dump_dir is not None or t.dump_dir is not None):
        note = f"input: {input_path} (first batch of {len(batches)}: a side given as a dump holds one batch)"
        batches = batches[:1]
    return batches, note


def compare_feeds(g: Side, t: Side, input_path: Path | None, seed: int) -> tuple[dict | None, str | None]:
    """The first batch of ``compare_feed_batches`` and its note (for one run, e.g. msit beside ours)."""
    batches, note = compare_feed_batches(g, t, input_path, seed)
    return batches[0], note


def _batch_dir(work_dir: Path, name: str, k: int) -> Path:
    """Batch 0's dump keeps the plain name (golden_dump, target_dump); batch k > 0 gets a suffix."""
    return Path(work_dir) / (name if k == 0 else f"{name}_b{k}")


def golden_dump(model: Path, feeds: dict, folder: Path, cache, gate=None, full=None) -> tuple[object, bool]:
    """The golden's dump for ``feeds``: from the shared cache (``store.dump_cache.DumpCache``: made
    once for every compare stage that wants it), or, without a cache, dumped into ``folder``.
    Returns (the dump: a folder or a ``CachedDump``, whether this call ran the model). ``full``: as ``dump``."""
    some = {} if full is None else {"full": full}
    if cache is None:
        return dump(model, feeds, folder, fusions=False, gate=gate, **some), True
    from ascendpipe.backends.onnxruntime.dump import cache_key

    return cache.get_or_make(cache_key(model, feeds, fusions=False, **some),
                             lambda scratch: dump(model, feeds, scratch, fusions=False, gate=gate, **some))


def run_compare(golden: Path, target: Path, *, input_path: Path | None, work_dir: Path, limits: dict,
                strategy: str = "first-overall", seed: int = 0, convert_stage: str | None = "convert",
                golden_inputs: Path | None = None, backend: str = "onnxruntime", log=None, run_command=None,
                stage: str = "compare", batch_axes: dict | None = None, dump_cache=None, keep: str = "all",
                keep_max: int | None = None, events: dict | None = None,
                dump_budget="auto") -> tuple[dict, str | None]:
    """Resolve both sides, dump what needs dumping under ``work_dir``, compare. Returns (result, input note).

    ``convert_stage``: the stage the advice's paste lines name; None: the one a dump target's
    ``source.json`` names, else ``convert``.
    ``input_path`` feeds the target (and the golden, unless ``golden_inputs`` is given or the target
    applies AIPP: see ``aipp_preprocessing``). An OM target (ascend backend) is dumped on the device
    with the CANN tools (``log``, ``run_command``: the stage's log and tool runner).
    ``dump_cache``: golden dumps come from (and go to) this shared cache instead of ``work_dir``.
    ``keep`` / ``keep_max``: which tensors of the dumps under ``work_dir`` stay after the compare
    (``dump_retention.prune_dumps``). ``summary.dumps`` says what was kept and its bytes; ``events`` (if given)
    receives what varies from run to run: whether this call dumped each golden batch itself.
    ``dump_budget``: the disk the dumps may take (``dump_budget.parse_budget``: bytes, 'auto', None for no
    limit); past it both ONNX sides are dumped as statistics and only the tensors around the first failure
    in full (``statistics_first``); ``summary.statistics_first`` says so."""
    from ascendpipe.compare.runner import compare_dumps, graph_info
    from ascendpipe.store.objects import CorruptObject

    g, t = resolve_side(golden, "golden"), resolve_side(target, "target")
    # None: the caller does not know the stage that made the target (a dump stage's dump says it)
    convert_stage = convert_stage or t.source_stage or "convert"
    if g.om_dir is not None:
        raise UserError(f"golden '{golden}' is an OM; the golden is the fp32 .onnx (or its dump)",
                        Location(file=str(golden), field="golden"))
    notes = []
    batches, note = compare_feed_batches(g, t, input_path, seed, batch_axes)
    if note:
        notes.append(note)
    nonfinite = nonfinite_inputs(batches)
    if nonfinite:
        notes.append(f"the inputs hold {nonfinite}: every tensor computed from them is NaN/inf on both sides, "
                     "and is not compared")
    golden_batches = None
    if golden_inputs is not None and g.model is not None:
        golden_specs = None
        fixed_batch = t.om_dir is not None or ((t.settings or {}).get("shapes") or {}).get("mode") == "static"
        if fixed_batch and batches and batches[0]:  # an OM's fixed batch (the convert's input_shape): the golden's samples batched alike
            from dataclasses import replace

            rows = next(iter(batches[0].values())).shape[0]
            golden_specs = [replace(s, shape=(rows, *s.shape[1:])) if s.axis == 0 and s.shape else s
                            for s in input_specs(g.model)]
        golden_batches, _ = make_feed_batches(g.model, golden_inputs, seed, field="golden_inputs", batch_axes=batch_axes,
                                              specs=golden_specs)
        if len(golden_batches) < len(batches):
            raise UserError(f"golden_inputs '{golden_inputs}' gives {len(golden_batches)} batches for the target's "
                            f"{len(batches)}; give the same samples, preprocessed for the golden",
                            Location(file=str(golden_inputs), field="golden_inputs"))
    golden_feeds_by_batch, target_dumps, pre_rows = [], [], []
    for k, feeds in enumerate(batches):
        # a dump target was fed by its dump stage, not through AIPP here: its AIPP is not checked
        pre = aipp_preprocessing(g.model, None if t.dump_dir is not None else t.settings, feeds or {},
                                 golden_inputs, seed, convert_stage,
                                 golden_batch=golden_batches[k] if golden_batches else None)
        if pre.note and k == 0:
            notes.append(pre.note)
        golden_feeds_by_batch.append(pre.golden_feeds if pre.golden_feeds is not None else feeds)
        if t.om_dir is not None:
            target_dumps.append(dump_om_side(t, feeds, _batch_dir(work_dir, "target_dump", k), backend=backend,
                                             log=log, run_command=run_command, stage=stage))
        elif t.dump_dir is not None:
            target_dumps.append(t.dump_dir)
        pre_rows.append(pre.rows)
    graph = graph_info(g.model) if g.model else None
    made = []
    budgeted = StatisticsFirst.start(g, t, batches, golden_feeds_by_batch, dump_budget, work_dir)

    def golden_dumps(gate=None):
        if g.dump_dir is not None:
            return [g.dump_dir] * len(batches)
        dumps = []
        for k, feeds in enumerate(golden_feeds_by_batch):
            found, ran = golden_dump(g.model, feeds, _batch_dir(work_dir, "golden_dump", k), dump_cache, gate,
                                     **budgeted.dump_kwargs())
            dumps.append(found)
            made.append(ran)
        return dumps

    def target_model_dumps(gate=None):
        return [dump(t.model, feeds, _batch_dir(work_dir, "target_dump", k), fusions=True, gate=gate,
                     **budgeted.dump_kwargs()) for k, feeds in enumerate(batches)]

    def compare(goldens):
        return compare_dumps(goldens, target_dumps, limits=limits, strategy=strategy, fused_map=t.fused_map,
                             om_json=t.om_json, precision_plan=t.precision_plan, graph=graph,
                             convert_stage=convert_stage, target_settings=t.settings, pre_rows=pre_rows)

    if t.om_dir is not None or t.dump_dir is not None:
        goldens = golden_dumps()
    elif g.dump_dir is not None or _cores() < 2:
        target_dumps = target_model_dumps()
        goldens = golden_dumps()
    else:
        target_dumps, goldens = _dump_both(target_model_dumps, golden_dumps)
    try:
        result = compare(goldens)
    except CorruptObject as exc:  # a shared golden's object went bad: it was removed; dump it again
        if log is not None:
            log.write(f"compare: {exc}; dumping the golden again\n")
        for found in goldens:
            if hasattr(found, "key"):
                dump_cache.drop(found.key)
        made.clear()
        goldens = golden_dumps()
        result = compare(goldens)
    if budgeted.active:  # statistics first: the first failure's neighbourhood dumped again in full
        budgeted.narrow(result, (graph or {}).get("producers"), len(batches))
        made.clear()
        target_dumps, goldens = target_model_dumps(), golden_dumps()
        result = compare(goldens)
        result["summary"]["statistics_first"] = budgeted.record(target_dumps + goldens)
    _refuse_nothing_compared(result, target)
    if t.quantization:
        from ascendpipe.compare.quant_advice import quantization_report

        quantization_report(result, t.quantization, (graph or {}).get("producers"))
    local = [Path(d) for d in target_dumps + goldens if not hasattr(d, "key") and _inside(d, work_dir)]
    kept = prune_dumps(result["rows"], local, keep=keep, keep_max=keep_max, first=result.get("first_failure"),
                       producers=(graph or {}).get("producers"))
    shared = [{"batch": k, "key": d.key, "digest": d.digest, "bytes": d.bytes} for k, d in enumerate(goldens)
              if hasattr(d, "key")]
    local_target = [Path(d) for d in target_dumps if _inside(d, work_dir)]
    result["summary"]["dumps"] = {
        "keep": keep, "keep_max": keep_max, "kept_tensors": kept["tensors"], "of_tensors": kept["of"],
        "bytes_kept": sum(folder_bytes(d) for d in local),
        "target_bytes": sum(folder_bytes(d) for d in local_target),
        "golden_shared": shared, "golden_shared_bytes": sum(x["bytes"] for x in shared),
    }
    if events is not None:
        events["golden_dumped"] = list(made)
    return result, "; ".join(notes) or None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _dump_both(target_dumps, golden_dumps) -> tuple[list, list]:
    """``target_dumps(gate)`` on a worker thread and ``golden_dumps(gate)`` on this one, at the same
    time, sharing one memory gate (``memory_gate``: each fills the cores the other leaves idle while
    it writes, within a memory allowance of a few segments). The dumps are the same as made one
    after the other. A failure (or Ctrl-C) on either side closes the gate, so the other dump stops
    at its next run; the target's own failure is raised first, as it would be made one after the other."""
    from concurrent.futures import ThreadPoolExecutor

    from ascendpipe.backends.onnxruntime.dump import TOGETHER_BYTES
    from ascendpipe.backends.onnxruntime.memory_gate import GateClosed, MemoryGate

    gate = MemoryGate(TOGETHER_BYTES)

    def target_side():
        try:
            return target_dumps(gate)
        except BaseException:
            gate.close()
            raise

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="target-dump") as pool:
        from ascendpipe import ticker

        target = pool.submit(ticker.carry(target_side, "target:"))  # its counts apart from the golden's
        try:
            goldens = golden_dumps(gate)
            return target.result(), goldens
        except BaseException:  # either side failed, or Ctrl-C while waiting for either
            gate.close()
            error = target.exception()
            if error is not None and not isinstance(error, GateClosed):
                raise error from None
            raise


def _refuse_nothing_compared(result: dict, target: Path) -> None:
    """A compare whose sides share no tensor has no verdict to give: 'no op fails' would be a false pass."""
    rows, summary = result["rows"], result["summary"]
    if summary["compared_tensors"] or not rows:
        return
    golden = next((r["golden_tensor"] for r in rows if r["side"] == "golden_only"), None)
    target_name = next((r["tensor"] for r in rows if r["side"] == "target_only"), None)
    example = ", ".join(x for x in (f"golden '{golden}'" if golden else "", f"target '{target_name}'" if target_name else "") if x)
    raise UserError(f"nothing to compare: no target tensor pairs with a golden one ({summary['golden_only']} golden-only, "
                    f"{summary['target_only']} target-only{'; e.g. ' + example if example else ''}): the two models name "
                    "their tensors differently; compare the target with the model it was converted from, or their dumps",
                    Location(file=str(target), field="target"))


def nonfinite_inputs(batches: list) -> str | None:
    """'x: 1 NaN, y: 2 inf' for the float feeds holding NaN or inf (over every batch), else None."""
    import numpy as np

    from ascendpipe.tensorstats import tensor_stats

    counts: dict[str, list[int]] = {}
    for feeds in batches:
        for name, array in (feeds or {}).items():
            stats = tensor_stats(np.asarray(array))
            if stats["nan"] or stats["inf"]:
                nan_inf = counts.setdefault(name, [0, 0])
                nan_inf[0] += stats["nan"]
                nan_inf[1] += stats["inf"]
    parts = [f"{name}: " + ", ".join(f"{n} {what}" for n, what in zip(c, ("NaN", "inf")) if n)
             for name, c in sorted(counts.items())]
    return ", ".join(parts) or None


def _inside(path, folder: Path) -> bool:
    if hasattr(path, "key"):
        return False
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
        return True
    except ValueError:
        return False
