"""What the explorer reads from run records, shared by the page model (``shape``) and its variants
tables (``variants``): flattened params, cell text, stage names, key metrics, fix attempts. Pure; a leaf."""

from __future__ import annotations

import json
import math

# Metrics an engineer looks at first, in this order; any other numeric metric follows.
KEY_METRICS = ("mAP", "top1", "accuracy", "acc", "rank1", "map50", "map", "top5", "rank5", "output_cosine", "min_cosine",
               "failed_ops", "overflow_ops", "latency_ms", "throughput")
# Settings always shown in the variants table when present, whether or not they vary.
KEY_PARAMS = ("precision_mode", "precision_mode_v2", "keep_dtype")
MAX_SETTING_COLUMNS = 12
BUILT = ("ran", "restored", "fresh")
NO_VARIANT = "—"


def flat(d, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (as ``ascendpipe diff`` flattens)."""
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def show(v) -> str:
    """A value as a table cell shows it."""
    if v is None:
        return NO_VARIANT
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list) and all(not isinstance(x, (list, dict)) for x in v):
        return ", ".join(show(x) for x in v) if v else "[]"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    return str(v)


def canon(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def split_name(name: str) -> tuple[str, str | None]:
    base, at, variant = name.partition("@")
    return base, (variant if at else None)


def metric_rank(name: str, keys: list | tuple = ()) -> tuple:
    """Sort key of ``base.metric`` columns: the pipelines' key metrics (``keys``, from their eval
    stages' tasks) first, then the other KEY_METRICS in that order, then the rest by name."""
    if name in keys:
        return (0, list(keys).index(name), name)
    metric = name.split(".", 1)[1] if "." in name else name
    try:
        return (1, KEY_METRICS.index(metric), name)
    except ValueError:
        return (2, 0, name)


def key_columns(runs: list[dict]) -> list[str]:
    """``base.metric`` of each eval stage's key metric (mAP50_95 for detection, top1 for
    classification, mAP for reid: ``ascendpipe.contract.KEY_METRIC``), variant stages' first."""
    from ascendpipe.contract import key_metric

    found: dict[str, bool] = {}
    for run in runs:
        for name, st in (run.get("stages") or {}).items():
            metric = key_metric(st.get("kind"), st.get("params"))
            if metric:
                col = f"{split_name(name)[0]}.{metric}"
                found[col] = found.get(col, False) or split_name(name)[1] is not None
    return sorted(found, key=lambda c: not found[c])


# the params a fix attempt changes, as its label shows them
_FIX_PARAMS = {"keep_dtype": "keep", "fusion_switch": "", "skip_layers": "float"}


def fix_label(run: dict) -> str | None:
    """What a ``fix`` attempt tried, from its argv's ``--set`` lines: ``keep /ReduceSum, /Sqrt ·
    TbeReduceElemwiseFusionPass off``; ``the pipeline's settings`` for the baseline and the restore
    (no remedy set). None for a run fix did not make."""
    if not is_fix_attempt(run):
        return None
    parts = []
    for arg in run.get("argv") or []:
        if not str(arg).startswith("--set="):
            continue
        key, _, value = str(arg)[len("--set="):].partition("=")
        param = key.rsplit(".", 1)[-1]
        if param not in _FIX_PARAMS:
            continue
        import yaml  # the --set grammar: the value is YAML (fix writes JSON, a person may write [a,b])

        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        if isinstance(parsed, dict):
            parts += [f"{k} {v}" for k, v in parsed.items()]
        elif isinstance(parsed, list):
            parts.append(f"{_FIX_PARAMS[param]} {', '.join(map(str, parsed))}" if parsed else f"{param} []")
        else:
            parts.append(f"{param} {parsed}")
    return " · ".join(parts) if parts else "the pipeline's settings"


def is_fix_attempt(run: dict) -> bool:
    """A build that ``ascendpipe fix`` made (its argv says so): one attempt of a remedy search."""
    argv = list(run.get("argv") or [])
    return len(argv) >= 2 and argv[1] == "fix"


def first_failure(st: dict) -> str | None:
    ff = (st.get("info") or {}).get("first_failure")
    if not isinstance(ff, dict) or not ff.get("op_name"):
        return None
    kind = ff.get("kind")
    return f"{ff['op_name']} ({kind})" if kind else ff["op_name"]
