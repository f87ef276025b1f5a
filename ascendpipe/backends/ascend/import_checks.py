"""What ``ascendpipe import`` reads, checked before it is believed (pure).

A file made elsewhere is untrusted: a required column missing, a cell of the wrong type, a negative
count or time, or NaN where a number belongs is one ``UserError`` naming the file, the row (the CSV's
line) or the JSON field, and the column, never a summary of nothing (``1 op rows, 0 op types``).
Cells the tools themselves leave empty are accepted: msprof writes ``N/A`` where it has no value
(``--task-time=l0``), msit ``NaN`` in a metric it could not compute.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any, Iterator

from ascendpipe.errors import Location, UserError

EMPTY = ("", "N/A", "NA")  # msprof: no value
NAN = ("nan",)

# -- CSV ---------------------------------------------------------------------------------------
COMPARE_REQUIRED = ("NPUDump", "OpType", "GroundTruth", "CosineSimilarity")
COMPARE_NONNEGATIVE = ("MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
                       "KullbackLeiblerDivergence", "MeanAbsoluteError", "RootMeanSquareError",
                       "MaxRelativeError", "MeanRelativeError")
COMPARE_YES_NO = ("IsNpuOps", "IsOutputNode", "IsPrecisionError", "Failed", "OverFlow")
OP_SUMMARY_REQUIRED = ("Op Name", "OP Type", "Task Duration(us)")
OP_SUMMARY_TIMES = ("Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)")
OP_STATISTIC_REQUIRED = ("OP Type", "Count", "Total Time(us)")
OP_STATISTIC_TIMES = ("Total Time(us)", "Avg Time(us)", "Min Time(us)", "Max Time(us)", "Ratio(%)")
KL_SLACK = 1e-6  # msaccucmp's float sums can put a KL of identical tensors a hair below 0


def _fail(file: str, line, message: str) -> UserError:
    """``line``: None, a header line number, or (line number, row number) of a CSV row."""
    if isinstance(line, tuple):
        line, row = line
        message = f"row {row}, {message}"
    return UserError(message, Location(file=file, line=line))


def csv_rows(text: str, file: str, required: tuple[str, ...], what: str) -> Iterator[tuple[tuple[int, int], dict[str, str]]]:
    """((line number, row number), {column: cell}) of each non-blank row; the header must hold ``required``
    (msprof's old ``Block Dim`` spellings count as theirs) and each row as many cells as the header."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    records = _records(reader, file)
    header = [h.strip() for h in next(records, None) or []]
    missing = [c for c in required if c not in header]
    if missing:
        raise _fail(file, 1, f"the {what} header has no column {', '.join(repr(c) for c in missing)} "
                             f"(required: {', '.join(required)}); give the file the tool wrote, header included")
    counts: dict[str, int] = {}
    columns = []
    for name in header:  # msit's second DataType/Address are the golden's: DataType.1, as pandas names them
        columns.append(name if name not in counts else f"{name}.{counts[name]}")
        counts[name] = counts.get(name, 0) + 1
    count = 0
    for raw in records:
        if not any(c.strip() for c in raw):
            continue
        count += 1
        line = (reader.line_num, count)
        if len(raw) != len(columns):
            raise _fail(file, line, f"has {len(raw)} cells where the header has {len(columns)} columns; "
                                    f"the file is cut or was edited by hand")
        yield line, dict(zip(columns, raw))
    if count == 0:
        raise _fail(file, None, f"the {what} has a header and no rows: nothing to import")


def _records(reader, file: str) -> Iterator[list[str]]:
    """The reader's rows; what the csv module cannot read (a cell over its 128 KiB limit) is one line."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _fail(file, reader.line_num, f"not a CSV the tools write: {exc}") from None


def _number(file: str, line: tuple[int, int], column: str, cell: str, *, nan_ok: bool, inf_ok: bool,
            minimum: float | None = 0.0, integer: bool = False, slack: float = 0.0) -> float | None:
    text = cell.strip()
    if text in EMPTY:
        return None
    try:
        value = float(text)
    except ValueError:
        raise _fail(file, line, f"column '{column}': {text!r} is not a number") from None
    if math.isnan(value):
        if nan_ok:
            return None
        raise _fail(file, line, f"column '{column}': NaN where a number belongs")
    if math.isinf(value) and not inf_ok:
        raise _fail(file, line, f"column '{column}': {text} where a finite number belongs")
    if integer and not value.is_integer():
        raise _fail(file, line, f"column '{column}': {text} is not a whole number")
    if minimum is not None and value < minimum - slack:
        raise _fail(file, line, f"column '{column}': {text} is negative; a count or time is 0 or more")
    return value


def check_compare_csv(text: str, file: str) -> list[dict[str, str]]:
    """An msit / msaccucmp ``result_*.csv`` (or ours); returns the raw cells of each row, in order."""
    rows = []
    for line, rec in csv_rows(text, file, COMPARE_REQUIRED, "compare CSV"):
        if "Index" in rec:
            _number(file, line, "Index", rec["Index"], nan_ok=False, inf_ok=False, integer=True)
        cosine = _number(file, line, "CosineSimilarity", rec["CosineSimilarity"], nan_ok=True, inf_ok=False,
                         minimum=None)
        if cosine is not None and not -1.0 - 1e-6 <= cosine <= 1.0 + 1e-6:
            raise _fail(file, line, f"column 'CosineSimilarity': {rec['CosineSimilarity'].strip()} is outside [-1, 1]")
        for column in COMPARE_NONNEGATIVE:
            if column in rec:  # a metric msit could not compute is NaN; an overflow makes it inf
                _number(file, line, column, rec[column], nan_ok=True, inf_ok=True,
                        slack=KL_SLACK if column == "KullbackLeiblerDivergence" else 0.0)
        for column in COMPARE_YES_NO:
            cell = rec.get(column, "").strip()
            if cell and cell.upper() not in ("YES", "NO"):
                raise _fail(file, line, f"column '{column}': {cell!r} is neither YES nor NO")
        rows.append(rec)
    return rows


def check_msprof_csv(text: str, file: str, kind: str) -> None:
    """An msprof ``op_summary`` (kind ``op_summary``) or ``op_statistic`` CSV."""
    renames = {"Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num"}
    text = text.lstrip("\ufeff")
    head, _, body = text.partition("\n")
    head = ",".join(renames.get(h.strip(), h) for h in next(csv.reader([head]), []))
    required, times = ((OP_SUMMARY_REQUIRED, OP_SUMMARY_TIMES) if kind == "op_summary"
                       else (OP_STATISTIC_REQUIRED, OP_STATISTIC_TIMES))
    for line, rec in csv_rows(head + "\n" + body, file, required, f"msprof {kind} CSV"):
        for column in times:
            if column in rec:
                _number(file, line, column, rec[column], nan_ok=False, inf_ok=False)
        if "Count" in rec:
            _number(file, line, "Count", rec["Count"], nan_ok=False, inf_ok=False, integer=True)


# -- JSON --------------------------------------------------------------------------------------
AIS_BLOCKS = ("NPU_compute_time", "H2D_latency", "D2H_latency")
AOE_NUMBERS = ("tuning_time(s)", "performance_after_tune(us)", "performance_before_tune(us)",
               "model_baseline_performance(ms)", "model_result_performance(ms)")
AOE_TEXTS = ("tuning_name", "op_name", "op_type", "opat_tuning_result", "update_mode")
AOE_PERCENTS = ("performance_improvement", "model_performance_improvement")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_number(file: str, field: str, value: Any, *, integer: bool = False, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if not _is_number(value):
        raise _fail(file, None, f"field {field}: {json_text(value)} is not a number")
    if math.isnan(value):
        raise _fail(file, None, f"field {field}: NaN where a number belongs")
    if math.isinf(value):
        raise _fail(file, None, f"field {field}: {value} where a finite number belongs")
    if integer and not float(value).is_integer():
        raise _fail(file, None, f"field {field}: {value} is not a whole number")
    if value < 0:
        raise _fail(file, None, f"field {field}: {value} is negative; a count or time is 0 or more")


def json_text(value: Any) -> str:
    import json

    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def check_ais_summary(data: dict, file: str) -> None:
    """An ais_bench ``*_summary.json``: each latency block an object of non-negative numbers
    (``count`` whole), ``throughput`` a non-negative number, the latency list numbers or
    [start, end] pairs of them."""
    for block_name in AIS_BLOCKS:
        if block_name not in data:
            continue
        block = data[block_name]
        if not isinstance(block, dict):
            raise _fail(file, None, f"field {block_name}: expected an object of latencies in ms, got {json_text(block)}")
        for key, value in block.items():
            _json_number(file, f"{block_name}.{key}", value, integer=key == "count", nullable=True)  # null: not measured
    if "throughput" in data:
        _json_number(file, "throughput", data["throughput"], nullable=True)
    samples = data.get("npu_compute_time_list")
    if samples is not None:
        if not isinstance(samples, list):
            raise _fail(file, None, f"field npu_compute_time_list: expected a list, got {json_text(samples)}")
        for index, value in enumerate(samples):
            for part, item in enumerate(value if isinstance(value, list) else [value]):
                where = f"npu_compute_time_list[{index}]" + (f"[{part}]" if isinstance(value, list) else "")
                _json_number(file, where, item)


def check_aoe_result(data: Any, file: str) -> None:
    """An AOE result in any of its layouts: the known fields anywhere in it have their types (names
    and results text, times non-negative numbers, improvements ``N%`` or numbers), each operator and
    report item is an object. Walked without recursion (the document may be deep)."""
    stack: list[tuple[str, Any, str | None]] = [("", data, None)]
    while stack:
        path, node, parent_key = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                field = f"{path}.{key}" if path else str(key)
                if key in AOE_NUMBERS:
                    _json_number(file, field, value)
                elif key in AOE_TEXTS:
                    if not isinstance(value, str):
                        raise _fail(file, None, f"field {field}: {json_text(value)} is not text")
                elif key in AOE_PERCENTS:
                    _percent(file, field, value)
                else:
                    stack.append((field, value, str(key)))
        elif isinstance(node, list):
            entries = path == "" or (parent_key is not None and (parent_key.endswith("_operators")
                                                                 or parent_key.startswith("report")))
            for index, value in enumerate(node):
                field = f"{path}[{index}]"
                if entries and not isinstance(value, dict):
                    raise _fail(file, None, f"field {field}: expected an object, got {json_text(value)}")
                stack.append((field, value, None))


def _percent(file: str, field: str, value: Any) -> None:
    if value is None or value == "":
        return
    if _is_number(value):
        if math.isfinite(value):
            return
    elif isinstance(value, str):
        try:
            number = float(value.strip().rstrip("%"))
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return
    raise _fail(file, None, f"field {field}: {json_text(value)} is not a percentage (e.g. \"35.35%\")")
