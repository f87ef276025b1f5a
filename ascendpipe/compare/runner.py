"""Compare two dump directories tensor by tensor (I/O layer over metrics, mapping, order, advisor).

Rows are computed on a few threads (``row_workers``: numpy releases the GIL in its loops); each
holds only the two tensors of its pair and their work arrays, so peak memory is about that many of
the largest pairs plus a constant.

Several batches (one golden and one target dump per batch) are compared one by one; each op's row is
the one of its worst batch (``worst_rows``), with the batch's number and how many batches failed, and
the first failure and its advice are judged on those rows.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ascendpipe.compare import (advisor, cube, fills, mapping, mechanism, msaccucmp, order, pairpass, standard,
                                statistics, thresholds as thr, wording)
from ascendpipe.compare.mechanism import FP16_MIN_NORMAL
from ascendpipe.compare.metrics import FP16_MAX, magnitude_max, tensor_metrics
from ascendpipe.compare.dumpindex import (  # noqa: F401  (graph_info: the compare's callers import it from here)
    _as_dump, _load_tensor, dump_graph, graph_info, load_index, model_output_indices)
from ascendpipe.compare.pairpass import pair_pass


def is_float_dtype(dtype: str | None) -> bool:
    """A dtype fp16 could stand for (float16/32/64, bfloat16); integers, bools and unknown ones are not."""
    return str(dtype or "").startswith(("float", "bfloat"))


def _overflow(target_entry: dict, m: dict | None, golden_max: float | None, target_max: float | None) -> str | None:
    """'target': the target holds inf/NaN (where golden is finite) or reaches 65504 in fp16;
    'fp16_range': the golden exceeds fp16's range though the target did not overflow."""
    if m is not None:
        nonfinite = m["nonfinite_mismatch"] > 0
    else:
        nonfinite = bool(target_entry.get("nan") or target_entry.get("inf")) if target_entry else False
    saturated = target_entry is not None and target_entry.get("dtype") == "float16" and (target_max or 0.0) >= FP16_MAX
    if nonfinite or saturated:
        return "target"
    if golden_max is not None and golden_max > FP16_MAX:
        return "fp16_range"
    return None


def _overflow_reason(target_entry: dict | None, m: dict | None) -> str:
    """What the overflowing target holds, as read from its values: inf/NaN where the golden is finite
    (inf_nan mode), or fp16's largest value (saturation mode stores an overflow as +-65504)."""
    if m is not None:
        nonfinite = m["nonfinite_mismatch"] > 0
    else:
        nonfinite = bool(target_entry and (target_entry.get("nan") or target_entry.get("inf")))
    if nonfinite:
        return "target overflows fp16: it holds inf/NaN where the golden is finite"
    return "target overflows fp16: it holds ±65504, fp16's largest value (saturated)"


def _widened(array: np.ndarray) -> np.ndarray:
    """A float16 array as float32 (exact, numpy only: ``pairpass.widen_into``); any other as it is."""
    if array.dtype != np.float16:
        return array
    # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it (1,))
    return pairpass.widen_into(np.require(array, requirements="C"), np.empty(array.shape, np.float32))


def _magnitude(entry: dict, array: np.ndarray) -> float:
    """Largest finite |x|: from the dump index's min/max (over finite values, written with the tensor)
    when it has them, else read from the array (a dump imported from elsewhere may lack them)."""
    if "min" in entry and "max" in entry and "nan" in entry and "inf" in entry:
        low, high = entry["min"], entry["max"]
        if low is None or high is None:
            return 0.0
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            return float(max(abs(low), abs(high)))
    return magnitude_max(array)


def _row(pos: int, pair: mapping.Pair, golden_dir, target_dir, limits: dict, outputs: set) -> dict:
    g, t = pair.golden, pair.target
    main = t or g
    row = {
        "index": pos,
        "op_name": main.get("op_name", main["name"]),
        "op_type": main.get("op_type", ""),
        "tensor": main["name"],
        "golden_tensor": g["name"] if g else None,
        "golden_ops": pair.golden_ops,
        "shape": list(main.get("shape", [])),
        "dtype": t.get("dtype") if t else None,
        "golden_dtype": g.get("dtype") if g else None,
        "golden_op": g.get("op_name", g["name"]) if g else None,
        "golden_op_type": g.get("op_type", "") if g else None,
        "side": pair.side,
        "fused": pair.fused,
        "note": pair.note,
        "is_output": bool({main["name"], g["name"] if g else None} & outputs),
    }
    m = None
    golden_max = target_max = None
    cells, messages = dict.fromkeys(msaccucmp.ALGORITHMS, msaccucmp.NAN), []  # msaccucmp's cells for a one-sided row
    stat = None
    if g and t and t.get("not_compared"):  # a device tensor not laid out as the golden: no number (acl_dump)
        row["note"] = "; ".join(x for x in (row["note"], f"not compared ({t['not_compared']})") if x)
        row["not_compared"] = t["not_compared"]  # no verdict reads this row as passing (summary, terminal)
    elif g and t and (statistics.summarised(g) or statistics.summarised(t)):
        # a dump within a disk budget kept this pair as statistics: what they prove, never a cosine
        stat = statistics.pair(g, t, limits)
        golden_max, target_max = statistics.abs_max(g), statistics.abs_max(t)
        row.update(stats_only=True, statistics={k: stat[k] for k in ("golden", "target", "diff", "relative", "warning",
                                                                     "bounds")})
        row["note"] = "; ".join(x for x in (row["note"], statistics.NOTE) if x)
        messages = [statistics.NOTE]
    elif g and t and _one_pass((golden_map := _load_tensor(golden_dir, g)).array,
                               (target_map := _load_tensor(target_dir, t)).array):
        # float16/float32 beyond a block: msaccucmp's cells and our metrics in one streamed pass
        golden, target = golden_map.array, target_map.array
        golden_max, target_max = _magnitude(g, golden), _magnitude(t, target)

        def drop(start, stop):  # a large pair's pages are handed back as each pass reads them
            golden_map.drop(start, stop)
            target_map.drop(start, stop)

        large = golden.nbytes + target.nbytes > DROP_BYTES
        cells, messages, m, flushed = pair_pass(golden, target, target_file=str(Path(target_dir) / t["file"]),
                                                golden_file=str(Path(golden_dir) / g["file"]),
                                                drop=drop if large else None)
        if m["fail_reason"]:
            row["note"] = "; ".join(x for x in (row["note"], m["fail_reason"]) if x)
        row.update(_value_facts(golden, target, row, flushed=flushed))
        row["fill"] = _fill(golden, target, golden_max, limits)
        del golden, target, golden_map, target_map, drop
    elif g and t:
        # a float16 side is read as float32 once: both metric modules widen it anyway, each pass would
        # redo numpy's slow float16 cast, and the values are the same
        golden, target = _widened(np.asarray(golden_map.array)), _widened(np.asarray(target_map.array))
        del golden_map, target_map
        golden_max, target_max = _magnitude(g, golden), _magnitude(t, target)
        cells, messages = msaccucmp.cells(golden, target, target_file=str(Path(target_dir) / t["file"]),
                                          golden_file=str(Path(golden_dir) / g["file"]))
        if golden.size == 0 and target.size == 0:  # nothing to compare: no number, never a cosine of 0
            row["empty"] = True
            row["note"] = "; ".join(x for x in (row["note"], EMPTY_NOTE) if x)
        else:
            try:
                m = tensor_metrics(golden, target)
            except ValueError as exc:
                row["note"] = str(exc)
            else:
                if m["fail_reason"]:  # why our decision has no metric for this tensor (inf/NaN)
                    row["note"] = "; ".join(x for x in (row["note"], m["fail_reason"]) if x)
                row.update(_value_facts(golden, target, row))
                row["fill"] = _fill(golden, target, golden_max, limits)
        del golden, target
    elif g:
        golden_max = max(abs(float(g.get("min", 0.0) or 0.0)), abs(float(g.get("max", 0.0) or 0.0)))
    elif t:
        target_max = max(abs(float(t.get("min", 0.0) or 0.0)), abs(float(t.get("max", 0.0) or 0.0)))
    row["msaccucmp"] = cells
    row["compare_fail_reason"] = ",".join(messages)
    row["float_tensor"] = is_float_dtype((g or t).get("dtype"))
    if not row["float_tensor"]:  # an int32 accumulator beyond 65504 is not an fp16 overflow: fp16 never holds it
        golden_max = target_max = None
    if stat is not None:
        overflow, reasons = stat["overflow"], list(stat["reasons"])
        if overflow is None and golden_max is not None and golden_max > FP16_MAX:
            overflow = "fp16_range"
    else:
        overflow = _overflow(t, m, golden_max, target_max)
        reasons = thr.violations(m, limits) if m else []
        if overflow == "target":
            reasons.insert(0, _overflow_reason(t, m))
    row.update(_metric_fields(m, cells))
    if stat is not None:  # the counts the full compare reads from the tensors, from the entries
        row.update(golden_nan=stat["golden"]["nan"], golden_inf=stat["golden"]["inf"],
                   target_nan=stat["target"]["nan"], target_inf=stat["target"]["inf"])
    row.update(overflow=overflow, golden_abs_max=golden_max, target_abs_max=target_max, failed=bool(reasons) and pair.side == "both" or overflow == "target",
               reasons=reasons)
    # what our decision read (see thresholds): its own keys, apart from msaccucmp's values
    row.update(exact_cosine=None if m is None else m["exact_cosine"],
               significant_mean_rel_error=None if m is None else _finite_or_none(m["significant_mean_rel_error"]),
               decision=None if m is None else {k: _finite_or_none(float(m[key])) for k, key in thr.DECISION_KEY.items()}
               | {"rmse_fp16_floor": _finite_or_none(m["rmse_fp16_floor"])})
    return row


EMPTY_NOTE = "not compared (empty)"


def _fill(golden: np.ndarray, target: np.ndarray, golden_max: float | None, limits: dict) -> dict | None:
    """A mask's fill value beyond fp16's range (``compare.fills``), looked for only where the golden
    goes beyond 65504 (the one extra pass is then paid)."""
    if golden_max is None or golden_max <= FP16_MAX or not (is_float_dtype(golden.dtype.name)
                                                              and is_float_dtype(target.dtype.name)):
        return None
    return fills.fill_facts(golden, target, limits)


# a pair above this many bytes hands its pages back as it is read (npymap): two 100 MB rows at once
# would otherwise hold 300 MB of mapped pages; below it, mapping the pages again in each of the three
# passes would cost more (~0.7 ns per float32) than the memory is worth
DROP_BYTES = 64 << 20


def _one_pass(golden: np.ndarray, target: np.ndarray) -> bool:
    """Whether ``pairpass`` computes the pair: float16/float32, the same size, beyond one block."""
    return pairpass.supported(golden, target) and golden.size > msaccucmp.BLOCK


def _value_facts(golden: np.ndarray, target: np.ndarray, row: dict, flushed: int | None = None) -> dict:
    """What the mechanisms read from the values (see ``mechanism``): ``flushed``, how many nonzero golden
    values below fp16's normal range the target holds as 0 (an underflow; counted here unless given);
    for a DequantizeLinear output, ``quant_step``: the golden's grid (its smallest gap between distinct values)."""
    facts: dict = {"flushed": 0 if flushed is None else flushed}
    zero = target == 0 if flushed is None else None
    if zero is not None and zero.any():
        g = golden[zero] if golden.shape == target.shape else golden.reshape(-1)[zero.reshape(-1)]
        facts["flushed"] = int(np.count_nonzero((g != 0) & (np.abs(g) < FP16_MIN_NORMAL)))
    if (row.get("golden_op_type") or row.get("op_type")) == "DequantizeLinear" and golden.size > 1:
        values = np.unique(golden[np.isfinite(golden)])
        gaps = np.diff(values)
        gaps = gaps[gaps > 0]
        if gaps.size:
            facts["quant_step"] = float(gaps.min())
    return facts


def _finite_or_none(value):
    return value if isinstance(value, float) and math.isfinite(value) else None


# row key -> msaccucmp's column: these row values are msaccucmp's (the CSV's text, as numbers)
MSACCUCMP_KEYS = {"cosine": "CosineSimilarity", "max_abs_error": "MaxAbsoluteError", "mean_abs_error": "MeanAbsoluteError",
                  "rmse": "RootMeanSquareError", "max_rel_error": "MaxRelativeError", "mean_rel_error": "MeanRelativeError",
                  "accumulated_rel_error": "AccumulatedRelativeError", "relative_euclidean": "RelativeEuclideanDistance",
                  "kl": "KullbackLeiblerDivergence"}


def _metric_fields(m: dict | None, cells: dict[str, str]) -> dict:
    fields = {k: msaccucmp.number(cells.get(column)) for k, column in MSACCUCMP_KEYS.items()}
    keys = ("target_mean", "target_std", "golden_mean", "golden_std", "golden_nan", "golden_inf", "target_nan", "target_inf")
    return fields | {k: (None if m is None else m[k]) for k in keys}


MAX_ROW_WORKERS = 4  # each holds one tensor pair and its work arrays: memory grows with the count


def row_workers() -> int:
    """Threads computing rows: numpy releases the GIL in its loops, so pairs run on several cores."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_ROW_WORKERS, cpus))


def _map_rows(make_row, pairs: list) -> list[dict]:
    """``make_row(i, pair)`` for every pair, in order, on ``row_workers()`` threads."""
    from ascendpipe import ticker

    workers = min(row_workers(), len(pairs))
    if workers <= 1:
        try:
            rows = []
            for i, p in enumerate(pairs):
                rows.append(make_row(i, p))
                ticker.report(i + 1, len(pairs), "tensors compared")
            return rows
        finally:
            pairpass.release()  # this thread's kept arrays (pairpass): the process may go on without a compare
    from concurrent.futures import ThreadPoolExecutor

    # the largest pairs first, so the last rows to finish are small ones and no thread waits alone on a
    # big one at the end; the rows are returned in order all the same
    order = _largest_first(pairs)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="compare-row")
    try:
        futures = {i: pool.submit(make_row, i, pairs[i]) for i in order}
        rows = []
        for i in range(len(pairs)):
            rows.append(futures[i].result())
            ticker.report(i + 1, len(pairs), "tensors compared")
        return rows
    finally:  # on an error or Ctrl-C, the rows not started are dropped rather than computed first
        pool.shutdown(wait=True, cancel_futures=True)  # its threads' kept arrays go with them


def _largest_first(pairs: list) -> list[int]:
    """The pairs' positions, the most elements first (a stable sort: equal ones in graph order)."""
    return sorted(range(len(pairs)), key=lambda i: -_pair_elements(pairs[i]))


def _pair_elements(pair) -> int:
    """The elements a pair compares (0 for a one-sided one, or what is not a ``mapping.Pair``)."""
    if not isinstance(pair, mapping.Pair) or not (pair.golden and pair.target):
        return 0
    shape = pair.target.get("shape") or []
    return math.prod(shape) if all(isinstance(d, int) for d in shape) else 0


def batch_rows(golden_dir, target_dir, *, limits: dict, tensor_map: dict, op_map: dict,
               outputs: set, pre_rows: list[dict] | None = None, origins: dict | None = None) -> list[dict]:
    """The rows of one batch, in graph order: ``pre_rows`` (complete rows, e.g. the AIPP check) first."""
    golden_index, target_index = load_index(golden_dir, "golden dump"), load_index(target_dir, "target dump")
    pairs = order.order_pairs(mapping.pair_tensors(golden_index["tensors"], target_index["tensors"],
                                                   tensor_map=tensor_map, op_map=op_map, origins=origins))
    pre = [dict(r, index=i, pre=True) for i, r in enumerate(pre_rows or [])]
    rows = pre + _map_rows(lambda i, p: _row(len(pre) + i, p, golden_dir, target_dir, limits, outputs), pairs)
    if not outputs and rows:  # no graph: the last compared tensor stands for the output
        compared = [r for r in rows if r["side"] == "both"]
        if compared:
            compared[-1]["is_output"] = True
    return rows


def _badness(row: dict) -> tuple:
    """Sort key of a row among its batches: failed, then overflowing, then lower cosine, then larger
    relative Euclidean distance. A compared tensor without metrics (inf/NaN) counts as the worst cosine."""
    cos, red = _cosine_of(row), row.get("relative_euclidean")
    if cos is not None and math.isfinite(cos):
        cos_bad = 1.0 - cos
    else:
        cos_bad = 3.0 if row.get("side") == "both" else -1.0
    red = red if red is not None and math.isfinite(red) else 0.0
    return (bool(row.get("failed")), row.get("overflow") == "target", cos_bad, red)


def worst_rows(rows_by_batch: list[list[dict]]) -> list[dict]:
    """One row per op: its worst batch's row, with ``batch`` (that batch, from 0), ``batches`` and
    ``failed_batches``; ``golden_abs_max`` is the peak over every batch (what fp16 must hold)."""
    if not rows_by_batch:
        return []
    merged = []
    for position, first in enumerate(rows_by_batch[0]):
        key = (first["tensor"], first.get("golden_tensor"))
        versions = [first]
        for k, rows in enumerate(rows_by_batch[1:], start=1):
            same = rows[position] if position < len(rows) else None
            if same is None or (same["tensor"], same.get("golden_tensor")) != key:
                raise ValueError(f"batch {k} has other tensors than batch 0 at row {position}: the batches' dumps differ")
            versions.append(same)
        worst = max(range(len(versions)), key=lambda k: _badness(versions[k]))
        row = dict(versions[worst], batch=worst, batches=len(versions),
                   failed_batches=sum(1 for v in versions if v.get("failed")))
        peaks = [v["golden_abs_max"] for v in versions if v.get("golden_abs_max") is not None]
        row["golden_abs_max"] = max(peaks) if peaks else None
        if row["overflow"] is None and any(v["overflow"] == "fp16_range" for v in versions):
            row["overflow"] = "fp16_range"
        merged.append(row)
    return merged


def compare_dumps(
    golden_dir: Path | list[Path],
    target_dir: Path | list[Path],
    *,
    limits: dict | None = None,
    strategy: str = "first-overall",
    fused_map: dict | None = None,
    om_json: dict | None = None,
    precision_plan: dict | None = None,
    graph: dict | None = None,
    stage: str = "compare",
    convert_stage: str = "convert",
    target_settings: dict | None = None,
    pre_rows: list[dict] | list[list[dict]] | None = None,
) -> dict:
    """The whole comparison: {"rows", "first_failure", "failures", "summary"} (rows in graph order).

    ``golden_dir`` and ``target_dir``: one dump each, or one per batch (lists of the same length).
    ``pre_rows``: checks that come before every op (the AIPP check), already complete rows (with several
    batches, one list per batch); a failing one is picked by every strategy, ahead of the ops.
    ``target_settings``: the target's convert.json."""
    golden_dirs = [_as_dump(d) for d in golden_dir] if isinstance(golden_dir, (list, tuple)) else [_as_dump(golden_dir)]
    target_dirs = [_as_dump(d) for d in target_dir] if isinstance(target_dir, (list, tuple)) else [_as_dump(target_dir)]
    if len(golden_dirs) != len(target_dirs) or not golden_dirs:
        raise ValueError(f"{len(golden_dirs)} golden dumps for {len(target_dirs)} target dumps")
    if pre_rows and isinstance(pre_rows[0], dict):
        pre_rows = [pre_rows]
    pre_by_batch = list(pre_rows or []) + [[]] * (len(golden_dirs) - len(pre_rows or []))
    limits = limits or thr.resolve()
    tensor_map, op_map, rules = mapping.fused_map_parts(fused_map)
    origins = None
    if om_json:
        op_map = {**mapping.om_original_op_names(om_json), **op_map}
        rules = {**mapping.om_fusion_passes(om_json), **rules}
        origins = mapping.om_output_origins(om_json)  # msaccucmp's per-output mapping
    if graph is None:
        graph = dump_graph(golden_dirs[0])
    outputs = set(graph.get("outputs") or [])
    per_batch = [batch_rows(g, t, limits=limits, tensor_map=tensor_map, op_map=op_map, outputs=outputs, pre_rows=pre,
                            origins=origins)
                 for g, t, pre in zip(golden_dirs, target_dirs, pre_by_batch)]
    rows = worst_rows(per_batch)
    golden_npu = _tensor_positions(rows, graph, golden_dirs[0], target_dirs[0])
    for r in rows:  # the ATC fusion pass that made a fused op (fused_map.json "rules", the OM's pass_name)
        r["pass_name"] = rules.get(r["op_name"]) if r.get("fused") else None
    producers = graph.get("producers")
    mode = wording.overflow_mode(precision_plan, target_settings)  # what an overflow becomes on the target
    reach, outputs_pass = mechanism.annotate(rows, producers, precision_plan, mode)
    pre_failed = [i for i, r in enumerate(rows) if r.get("pre") and r["failed"]]
    # a failing preprocessing check feeds every input: it is picked ahead of the ops, as before
    picked = order.select_failures(rows, strategy, output_ops=graph.get("output_ops"), producers=producers,
                                   eligible=reach | set(pre_failed) | own_overflows(rows, producers, outputs_pass))
    picked = pre_failed + [i for i in picked if i not in pre_failed]
    failures = [advisor.describe_failure(rows, i, precision_plan=precision_plan, fusion_rules=rules,
                                         producers=producers, stage=convert_stage,
                                         target_settings=target_settings) for i in picked]
    if failures and not rows[failures[0]["index"]].get("pre"):
        advisor.note_unresolved(failures[0], rows, producers, reach)
        soc = (target_settings or {}).get("soc_version")
        blocked = (cube.cube_blocked(rows, producers, soc)
                   or cube.kernel_blocked(rows, (precision_plan or {}).get("nodes"), soc))
        if blocked:
            advisor.note_blocked(failures[0], blocked)
    for failure in failures:
        row = rows[failure["index"]]
        failure.update(batch=row["batch"], batches=row["batches"], failed_batches=row["failed_batches"])
    # the first failure whose error reaches the outputs, where the first named is an own overflow absorbed on
    # the way: what restores these outputs starts there (fix grows from it; the named one is the common cause)
    reaching_failure = failures[0] if failures else None
    if failures and not rows[failures[0]["index"]].get("reaches_output") and not rows[failures[0]["index"]].get("pre"):
        alt = order.select_failures(rows, "first-overall", producers=producers, eligible=reach)
        reaching_failure = advisor.describe_failure(rows, alt[0], precision_plan=precision_plan, fusion_rules=rules,
                                                    producers=producers, stage=convert_stage,
                                                    target_settings=target_settings) if alt else None
    # the first op beyond thresholds, whether or not it reaches an output (msit's order would name it first)
    diverged = order.select_failures(rows, "first-overall", producers=producers)
    first_divergence = mechanism.divergence(rows[diverged[0]]) if diverged else None
    # outputs beyond the thresholds that meet the device's own accuracy standard: no cause is blamed
    judged = standard.judge(rows)
    verdict = mechanism.verdict(rows, failures, outputs_pass, mode)
    if outputs_pass is False and judged and judged["met"] and not any(r.get("pre") and r["failed"] for r in rows):
        failures, reaching_failure = [], None
        verdict = standard.verdict_text(judged, rows, mechanism.contained_tail(rows))
    summary = summarize(rows, failures)
    summary["batches"] = len(golden_dirs)
    summary["outputs_pass"] = outputs_pass
    summary["outputs_meet_standard"] = judged["met"] if judged else None
    return {"rows": rows, "first_failure": failures[0] if failures else None, "failures": failures,
            "first_reaching_failure": reaching_failure, "standard": judged,
            "first_divergence": first_divergence, "contained": mechanism.contained_items(rows),
            "verdict": verdict, "overflow_mode": mode,
            "summary": summary, "thresholds": limits, "strategy": strategy, "golden_is_npu_dump": golden_npu,
            "precision_plan": precision_plan}  # for report.html's device dtypes; not in result.json


def own_overflows(rows: list[dict], producers: dict[str, list[str]] | None, outputs_pass: bool | None) -> set[int]:
    """When the outputs fail: the overflow origins of computed values (``order.overflow_origins``,
    mechanism ``overflow``), also those whose error is absorbed before the outputs (an RMSNorm's
    inf -> 0 under a residual add that passes). The same op overflowing on its own is named in every
    graph and input it overflows in, a decoder's prefill and decode alike, whichever of its errors
    happens to reach the outputs there (issue 40)."""
    if outputs_pass is not False:
        return set()
    return {i for i in order.overflow_origins(rows, producers) if rows[i].get("mechanism") == "overflow"}


def _tensor_positions(rows: list[dict], graph: dict, golden_dir: Path, target_dir: Path) -> bool:
    """Set each row's ``output_index`` (the tensor's position among its op's outputs: the target model's,
    else the golden's, else its count among the op's rows) and say whether the golden is an NPU dump
    (an OM's: msaccucmp then keeps its Address column)."""
    golden_index = load_index(golden_dir, "golden dump")
    target_index = load_index(target_dir, "target dump")
    golden_pos = graph["output_index"] if "output_index" in graph else model_output_indices(golden_index.get("model"))
    target_graph = target_index.get("graph") if isinstance(target_index.get("graph"), dict) else {}
    target_pos = target_graph.get("output_index") or model_output_indices(target_index.get("model"))
    seen: dict[str, int] = {}
    for r in rows:
        k = seen.get(r["op_name"], 0)
        seen[r["op_name"]] = k + 1
        position = target_pos.get(r["tensor"]) if r.get("side") != "golden_only" else None
        if position is None:
            position = golden_pos.get(r.get("golden_tensor") or r["tensor"])
        r["output_index"] = k if position is None else position
    return str(golden_index.get("model") or "").endswith(".om")


def _cosine_of(row: dict) -> float | None:
    """The cosine the decision reads: the exact one where the row has it (see metrics), else msit's."""
    exact = row.get("exact_cosine")
    return exact if exact is not None else row.get("cosine")


def _golden_nonfinite(row: dict) -> bool:
    return row["side"] == "both" and bool(row.get("golden_nan") or row.get("golden_inf"))


def first_golden_nonfinite(rows: list[dict]) -> dict | None:
    return next((r for r in rows if _golden_nonfinite(r)), None)


def summarize(rows: list[dict], failures: list[dict]) -> dict:
    """The stage metrics: first_failure_index, failed_ops, min_cosine, output_cosine (exact cosines), overflow_ops."""
    # A NaN cosine means a compared tensor holds inf/NaN (msit computes no metric): count it as 0.0 here.
    # An empty tensor has no cosine at all: it is left out of every figure ("not compared (empty)").
    def cos(r):
        return 0.0 if math.isnan(_cosine_of(r)) else _cosine_of(r)

    cosines = [cos(r) for r in rows if _cosine_of(r) is not None and not r.get("empty")]
    out = [cos(r) for r in rows if r["is_output"] and _cosine_of(r) is not None and not r.get("empty")]
    return {
        "first_failure_index": failures[0]["index"] if failures else None,
        "failed_ops": sum(1 for r in rows if r["failed"]),
        "min_cosine": min(cosines) if cosines else None,
        "output_cosine": min(out) if out else None,
        # true overflows (beyond 65504): not a flushed epsilon's Log(0), not a saturated mask's -inf
        "overflow_ops": sum(1 for r in rows if r["overflow"] == "target" and r.get("mechanism") in (None, "overflow")),
        "contained_ops": sum(1 for r in rows if r.get("contained")),
        "empty_tensors": sum(1 for r in rows if r.get("empty")),
        "compared_tensors": sum(1 for r in rows if r["side"] == "both"),
        # pairs without metrics because the golden itself holds NaN/inf (msit computes none either):
        # NaN or inf in the inputs, or the fp32 model overflowing on its own
        "golden_nonfinite": sum(1 for r in rows if _golden_nonfinite(r)),
        # paired device tensors whose layout could not be read as the golden's (acl_dump): no number for them
        "not_compared": sum(1 for r in rows if r.get("not_compared")),
        # pairs of a dump within a disk budget kept as statistics: no cosine, failed only where they prove it
        "statistics_only": sum(1 for r in rows if r.get("stats_only")),
        "golden_only": sum(1 for r in rows if r["side"] == "golden_only"),
        "target_only": sum(1 for r in rows if r["side"] == "target_only"),
    }
