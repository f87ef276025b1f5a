"""result.csv (msit's columns, msit's order), result.json (the contract), and the terminal table."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from ascendpipe.contract import COMPARE_CSV, COMPARE_RESULT
from ascendpipe.fsutil import write_text_atomic

from ascendpipe.compare import msaccucmp
from ascendpipe.compare import shown as printed

# msaccucmp's header (msprobe/msaccucmp: vector_cmp/fusion_manager/compare_result.py:241-255, the op part
# const_manager.py:270-273) with msit's three columns appended (msit cmp_process.py:163-165). msaccucmp
# drops the Address column of a side whose dump is .npy (vector_cmp/vector_comparison.py:596-605): the
# golden's for ONNX-vs-OM, none when both sides are NPU dumps. OverFlow (only with -advisor) and
# OpSequence (only with -r/-s) are not written, as in msit's default run. The duplicated names are
# msaccucmp's (pandas reads them as DataType.1 / Address.1).
MSIT_CSV_HEADER = [
    "Index", "OpType", "NPUDump", "DataType", "Address", "GroundTruth", "DataType", "TensorIndex", "Shape",
    *msaccucmp.ALGORITHMS, "CompareFailReason", "IsNpuOps", "IsOutputNode", "IsPrecisionError",
]
MSIT_CSV_HEADER_NPU_GOLDEN = MSIT_CSV_HEADER[:7] + ["Address"] + MSIT_CSV_HEADER[7:]
# Ours, after msit's (docs/contracts.md): our pass/fail decision and what it read, and the batch shown.
OUR_CSV_COLUMNS = ["Failed", "FailReasons", "OverflowKind", "ExactCosine", "SignificantMeanRelativeError",
                   "SoftmaxKL", "WorstBatch"]
CSV_HEADER = MSIT_CSV_HEADER + OUR_CSV_COLUMNS
CONTRACT_ROW_KEYS = ("index", "op_name", "op_type", "tensor", "shape", "dtype", "cosine", "max_abs_error",
                     "max_rel_error", "rmse", "kl", "relative_euclidean", "overflow", "failed")
EXTRA_ROW_KEYS = ("golden_tensor", "golden_ops", "golden_dtype", "side", "fused", "is_output", "reasons", "note",
                  "mean_abs_error", "mean_rel_error", "accumulated_rel_error", "target_mean", "target_std",
                  "golden_mean", "golden_std", "golden_nan", "golden_inf", "target_nan", "target_inf", "golden_abs_max",
                  "exact_cosine", "significant_mean_rel_error", "batch", "batches", "failed_batches",
                  "output_index", "compare_fail_reason", "msit_precision_error", "decision",
                  "mechanism", "reaches_output", "contained", "flushed", "quant_step", "empty", "not_compared",
                  "target_abs_max", "fill", "stats_only", "statistics")


def _num(value) -> str:
    if value is None:
        return "NaN"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.9g}"
    return str(value)


def _short(value) -> str:
    """A table cell: a finite number, else "n/a" (``compare.shown``: never inf/NaN printed as a number)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"{value:.6f}" if 0.01 <= abs(value) < 1000 or value == 0 else f"{value:.3e}"
    return printed.NA


def _cells(row: dict) -> dict[str, str]:
    """msaccucmp's cells of a compared row; for a row made elsewhere (the AIPP check) its values in
    msaccucmp's text format."""
    if row.get("msaccucmp"):
        return row["msaccucmp"]
    from ascendpipe.compare.runner import MSACCUCMP_KEYS

    def six(v):
        return msaccucmp.NAN if v is None else "{:.6f}".format(v)

    cells = {column: six(row.get(key)) for key, column in MSACCUCMP_KEYS.items()}
    parts = [row.get(k) for k in ("target_mean", "target_std", "golden_mean", "golden_std")]
    cells["StandardDeviation"] = (msaccucmp.NAN if any(p is None for p in parts)
                                  else "(%.3f;%.3f),(%.3f;%.3f)" % tuple(0.0 if abs(p) < 0.001 else p for p in parts))
    return cells


def _msit_precision_error(row: dict) -> bool | None:
    """msit's IsPrecisionError of the row (msaccucmp's values, msit's fixed thresholds); None without values."""
    if row.get("side", "both") != "both":
        return None
    return msaccucmp.msit_precision_error(row.get("op_type") or "", _cells(row))


def _within_standard(result: dict) -> bool:
    """The outputs fail compare's thresholds but meet the device's accuracy standard (``compare.standard``)."""
    summary = result.get("summary") or {}
    return summary.get("outputs_pass") is False and summary.get("outputs_meet_standard") is True and (
        result.get("first_failure") is None)


def csv_header(result: dict) -> list[str]:
    msit = MSIT_CSV_HEADER_NPU_GOLDEN if result.get("golden_is_npu_dump") else MSIT_CSV_HEADER
    return msit + OUR_CSV_COLUMNS


def csv_text(result: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_header(result))
    golden_address = bool(result.get("golden_is_npu_dump"))
    outputs_seen: dict[str, int] = {}
    for row in result["rows"]:
        k = outputs_seen.get(row["op_name"], 0)
        outputs_seen[row["op_name"]] = k + 1
        position = row.get("output_index", k)
        target = row["side"] != "golden_only"
        golden = row["side"] != "target_only"
        cells = _cells(row)
        is_precision_error = _msit_precision_error(row)
        line = [row["index"], row["op_type"], row["op_name"] if target else "*", row["dtype"] or "NaN", "NaN",
                ",".join(row["golden_ops"]) if golden else "*", row["golden_dtype"] or "NaN"]
        if golden_address:
            line.append("NaN")
        line += [f"{row['op_name']}:output:{position}", "[" + ",".join(str(d) for d in row["shape"]) + "]"]
        line += [cells[name] for name in msaccucmp.ALGORITHMS]
        line += [row.get("compare_fail_reason") or "", "YES" if not golden else "NO", "YES" if row["is_output"] else "NO",
                 "YES" if is_precision_error else "NO"]
        line += ["YES" if row["failed"] else "NO", "; ".join(row.get("reasons") or []), row["overflow"] or "",
                 _num(row.get("exact_cosine")), _num(row.get("significant_mean_rel_error")),
                 _num((row.get("decision") or {}).get("kl")), row.get("batch", 0)]
        writer.writerow(line)
    return buffer.getvalue()


def _clean(value):
    """JSON has no NaN/inf: non-finite metric values become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


FUSED_NOTE = "fused into target op '"  # mapping.pair_tensors' note of a golden-only tensor inside a fused kernel
FP16_MAX = 65504.0


def golden_only_summary(rows: list[dict]) -> dict:
    """What the golden-only rows are and whether they matter (result.json ``golden_only``, the console, the
    report): tensors of the fp32 model with no tensor of their own in the target, either computed inside a
    fused kernel (compared at the kernel's output) or without any counterpart (folded away, or not in a
    target dump). They matter where they hold values beyond fp16's range inside a kernel whose output fails:
    the kernel overflows inside, where no dump sees it."""
    only = [r for r in rows if r.get("side") == "golden_only"]
    kernel_failed = {r["op_name"]: bool(r.get("failed")) for r in rows if r.get("side", "both") == "both"}
    fused, causes = [], []
    for row in only:
        note = row.get("note") or ""
        if not note.startswith(FUSED_NOTE):
            continue
        kernel = note[len(FUSED_NOTE):].rstrip("'")
        fused.append(kernel)
        peak = row.get("golden_abs_max")
        if kernel_failed.get(kernel) and isinstance(peak, (int, float)) and peak > FP16_MAX:
            causes.append({"index": row.get("index"), "op_name": row["op_name"], "kernel": kernel, "golden_abs_max": peak})
    kernels = list(dict.fromkeys(fused))
    unmatched = len(only) - len(fused)
    doc = {"count": len(only), "fused": len(fused), "no_counterpart": unmatched, "kernels": kernels[:10],
           "beyond_fp16_in_failing_kernels": causes[:10], "matters": bool(causes)}
    if not only:
        doc["explanation"] = "every golden tensor has a counterpart in the target"
        return doc
    doc["explanation"] = (
        f"{len(only)} golden-only tensors: ops of the fp32 model with no tensor of their own in the target. "
        + (f"{len(fused)} are computed inside {len(kernels)} fused kernel(s) (ATC's fusion passes), each compared at "
           f"its output, the row of the target op they were fused into ({', '.join(kernels[:3])}"
           + (", ..." if len(kernels) > 3 else "") + ")" if fused else "none is inside a fused kernel")
        + (f"; {unmatched} have no counterpart at all (folded into a constant or removed by the conversion, or "
           "absent from a target dump)" if unmatched else "")
        + ". They get no metrics of their own: an error in one shows at the compared tensor it feeds.")
    if causes:
        first = causes[0]
        doc["why_it_matters"] = (
            f"{len(causes)} of them hold golden values beyond fp16's {FP16_MAX:g} inside kernels whose output fails "
            f"(first: #{first['index']} {first['op_name']} in {first['kernel']}, |golden| up to {first['golden_abs_max']:.4g}): "
            "the kernel overflows inside, where no dump sees it; its row (pass_name) names the fusion")
    else:
        doc["why_it_matters"] = "they need no action of their own: none holds a value a failing kernel cannot"
    return doc


def golden_only_lines(result: dict) -> list[str]:
    """The console's words on the golden-only tensors (nothing when there are none)."""
    info = golden_only_summary(result["rows"])
    if not info["count"]:
        return []
    lines = [f"golden-only: {info['count']} tensors of the fp32 model have no tensor of their own in the target: "
             + (f"{info['fused']} inside fused kernels (compared at the kernel's output: "
                f"{', '.join(info['kernels'][:3])}{', ...' if len(info['kernels']) > 3 else ''})" if info["fused"] else "")
             + ("; " if info["fused"] and info["no_counterpart"] else "")
             + (f"{info['no_counterpart']} without a counterpart (folded or removed by the conversion)"
                if info["no_counterpart"] else "")
             + "; no metrics of their own, an error in one shows at the tensor it feeds"]
    if info["matters"]:
        lines.append("  they matter here: " + info["why_it_matters"])
    return lines


def contract(result: dict, input_note: str | None = None) -> dict:
    rows = [{**{k: row.get(k) for k in CONTRACT_ROW_KEYS + EXTRA_ROW_KEYS}, "pass_name": row.get("pass_name"),
             "msit_precision_error": _msit_precision_error(row)}
            for row in result["rows"]]
    doc = {"verdict": result.get("verdict"), "rows": rows, "first_failure": result["first_failure"],
           "failures": result["failures"], "first_divergence": result.get("first_divergence"),
           "first_reaching_failure": result.get("first_reaching_failure", result["first_failure"]),
           "contained": result.get("contained") or [], "standard": result.get("standard"),
           "overflow_mode": result.get("overflow_mode"),
           "summary": result["summary"], "thresholds": result["thresholds"], "strategy": result["strategy"],
           "golden_only": golden_only_summary(result["rows"])}
    if result.get("quantization"):
        doc["quantization"] = result["quantization"]
    if input_note:
        doc["input"] = input_note
    return _clean(doc)


def json_text(result: dict, input_note: str | None = None) -> str:
    return document_text(contract(result, input_note))


_ROWS = "\u2063ascendpipe rows\u2063"  # stands for the rows while the rest is indented


def document_text(doc: dict) -> str:
    """result.json's text: indented, each row on a line of its own. The same JSON as indenting it all,
    written by json's C encoder row by row (the indenting encoder is pure Python: a 270-row compare's
    700 kB took 0.12 s of its 0.13 s there)."""
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    head = json.dumps({**doc, "rows": _ROWS}, indent=2, allow_nan=False)
    marker = json.dumps(_ROWS)
    if head.count(marker) != 1:  # a value holding the marker itself: indent it all
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    body = ",\n".join("    " + json.dumps(row, allow_nan=False) for row in rows)
    return head.replace(marker, "[\n" + body + "\n  ]") + "\n"


def write_results(result: dict, out_dir: Path, input_note: str | None = None) -> dict[str, Path]:
    """result.csv, result.json and report.html in ``out_dir``."""
    from ascendpipe.compare.report import report_html

    out_dir = Path(out_dir)
    doc = contract(result, input_note)
    return {
        "csv": write_text_atomic(out_dir / COMPARE_CSV, csv_text(result)),
        "json": write_text_atomic(out_dir / COMPARE_RESULT, document_text(doc)),
        "html": write_text_atomic(out_dir / "report.html", report_html(result, doc)),
    }


_RED, _GREEN, _YELLOW, _BOLD, _RESET = "\033[31m", "\033[32m", "\033[33m", "\033[1m", "\033[0m"


def middle_cut(name: str, width: int) -> str:
    """``name`` in ``width`` characters: its start and its distinguishing tail around an ellipsis."""
    if len(name) <= width:
        return name
    head = (width - 1) // 3
    return f"{name[:head]}…{name[len(name) - (width - 1 - head):]}"


def op_labels(names: list[str], width: int = 32, widest: int = 80) -> list[str]:
    """The names as a table shows them: cut in the middle to ``width`` characters, widened (up to
    ``widest``, then in full) until no two different names read alike."""
    while True:
        cut = [middle_cut(n, width) for n in names]
        seen: dict[str, str] = {}
        if all(seen.setdefault(c, n) == n for c, n in zip(cut, names)):
            return cut
        if width >= widest:
            return list(names)
        width += 8


def terminal_text(result: dict, *, color: bool = False, worst: int = 10, input_note: str | None = None) -> str:
    """A short table of the worst ops and the first failure with its advice."""
    paint = (lambda code, text: f"{code}{text}{_RESET}") if color else (lambda code, text: text)
    rows = [r for r in result["rows"] if r["side"] == "both"]

    numbers = {id(r): printed.values(r) for r in rows}

    def badness(r):
        c = numbers[id(r)]["cosine"]
        return (not r["failed"], 0.0 if c is None else c)

    lines = []
    if input_note:
        lines.append(input_note)
    within = _within_standard(result)
    if result.get("verdict"):  # what matters first: do the outputs pass
        ok = result["first_failure"] is None and (result["summary"].get("outputs_pass") is not False)
        lines.append(paint(_GREEN if ok else (_YELLOW if within else _RED), result["verdict"]))
    s = result["summary"]
    batches = s.get("batches") or 1
    lines.append(f"compared {s['compared_tensors']} tensors ({s['golden_only']} golden-only, {s['target_only']} target-only)"
                 + (f" on {batches} batches, each op's worst shown" if batches > 1 else "")
                 + f": {s['failed_ops']} failed, {s['overflow_ops']} overflow")
    lines += [paint(_YELLOW, line) if line.startswith("  they matter") else line for line in golden_only_lines(result)]
    shown = sorted(rows, key=badness)[:worst]
    names = op_labels([r["op_name"] for r in shown])
    width = max([32] + [len(n) for n in names])
    lines.append(f"{'#':>4}  {'op':<{width}} {'type':<18} {'cosine':>10} {'max_rel':>10} {'rmse':>10}  status")
    for r, name in zip(shown, names):
        cause = r.get("mechanism") or ("overflow" if r["overflow"] == "target" else "")
        # beyond the thresholds while the outputs meet the device's standard: a divergence, not a failure
        label = "beyond" if within else "FAIL"
        status = (label + (f" {cause}" if cause and cause != "precision_loss" else "")) if r["failed"] else "ok"
        if r.get("contained"):
            status = ("contained" if r["failed"] else "ok") + (f" ({cause})" if cause else "")
        if r["overflow"] == "fp16_range" and not r["failed"]:
            status = "ok (overflows in fp16)"
        if not r["failed"] and (r.get("golden_nan") or r.get("golden_inf")):
            status = "not compared (golden NaN/inf)"
        if r.get("empty"):
            status = "not compared (empty)"
        if r.get("stats_only"):  # a dump within a disk budget: no cosine exists for it
            status = (status + " (statistics)") if r["failed"] else "statistics only"
        number = numbers[id(r)]
        line = (f"{r['index']:>4}  {name:<{width}} {r['op_type'][:18]:<18} {_short(number['cosine']):>10} "
                f"{_short(number['max_rel_error']):>10} {_short(number['rmse']):>10}  {status}")
        lines.append(paint(_RED if r["failed"] else (_YELLOW if r["overflow"] else _GREEN), line))
    unread = s.get("not_compared") or 0
    if unread:
        first_unread = next(r for r in result["rows"] if r.get("not_compared"))
        lines.append(paint(_YELLOW, f"{unread} tensors not compared: the device dump's layout was not read as the "
                                    f"golden's (first: #{first_unread['index']} {first_unread['op_name']}, "
                                    f"{first_unread['not_compared']})"))
    summarised = s.get("statistics_only") or 0
    if summarised:
        budget = s.get("statistics_first") or {}
        window = budget.get("window") or {}
        around = (f"; in full: {len(window.get('rows') or [])} rows around #{window['first']}"
                  if window.get("first") is not None else "")
        lines.append(paint(_YELLOW, f"{summarised} tensors compared by statistics only (max, min, mean, L2 norm, "
                                    f"inf/NaN: the dumps' disk budget), not in full: no cosine for them{around}"))
    unmeasured = s.get("golden_nonfinite") or 0
    if unmeasured:
        from ascendpipe.compare.runner import first_golden_nonfinite

        where = first_golden_nonfinite(result["rows"])
        lines.append(paint(_YELLOW, f"{unmeasured} tensors not compared: their golden holds NaN or inf"
                                    + (f" (first: #{where['index']} {where['op_name']})" if where else "")
                                    + "; NaN or inf in the inputs, or the fp32 model overflows by itself"))
    contained = result.get("contained") or []
    for item in contained[:5]:
        lines.append(paint(_YELLOW, f"  contained: #{item['index']} {item['op_name']} ({item['op_type']}): {item['why']}"))
    if len(contained) > 5:
        lines.append(paint(_YELLOW, f"  ... and {len(contained) - 5} more contained (result.json 'contained')"))
    first = result["first_failure"]
    if first is None and within:
        lines.append(paint(_YELLOW, "no cause blamed: the outputs meet the device's accuracy standard; the ops marked "
                                    "'beyond' diverge past compare's thresholds within it (no precision setting is "
                                    "needed for them)"))
    elif first is None and any(r["failed"] for r in rows):
        divergence = result.get("first_divergence") or {}
        lines.append(paint(_GREEN, "no failure reaches an output" + (
            f" (first divergence #{divergence['index']} {divergence['op_name']}, contained)" if divergence else "")))
    elif first is None and s.get("compared_tensors") and unread >= s["compared_tensors"]:
        lines.append(paint(_YELLOW, "nothing could be compared: no op is known to pass or fail"))
    elif first is None:
        unmeasured += unread + summarised
        lines.append(paint(_YELLOW, f"no op fails the thresholds, but {unmeasured} tensors were not compared")
                     if unmeasured else paint(_GREEN, "no op fails the thresholds"))
    else:
        where = (f" (batch {first['batch']}; fails on {first['failed_batches']} of {first['batches']} batches)"
                 if (first.get("batches") or 1) > 1 else "")
        cause = f" [{first['mechanism']}]" if first.get("mechanism") else ""
        lines.append(paint(_BOLD, f"first failure: #{first['index']} {first['op_name']} ({first['op_type']}){cause}: "
                                  f"{first['reason']}{where}"))
        for item in first["advice"]:
            lines.append(f"  advice: {item['message']}")
            if item.get("set"):
                lines.append(f"    {item['set']}")
    quant = result.get("quantization")
    if quant and quant.get("layers"):
        lines.append("quantized layers losing most (own loss = 1 - cosine beyond what their inputs lost): "
                     + ", ".join(f"{r['layer']} {r['local_loss']:.3g}" for r in quant["layers"][:5]))
    return "\n".join(lines) + "\n"
