"""ais_bench (``python3 -m ais_bench``): argv, output finder, and the summary JSON.

Formats: the ais_bench README (Ascend tools). The summary is turned into
the emulator's summary shape (``latency_ms: {min,max,mean,median,p99}``, ``throughput``) with the
raw fields kept beside it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

OUTFMTS = ("NPY", "BIN", "TXT")
_TS_DIR = re.compile(r"^\d{4}_\d{2}_\d{2}-\d{2}_\d{2}_\d{2}$")
LATENCY_KEYS = ("NPU_compute_time", "H2D_latency", "D2H_latency")


def infer_argv(python: str | Path, *, model: Path, inputs: list[Path] | None, output: Path,
               outfmt: str = "NPY", loop: int | None = None, warmup_count: int | None = None,
               device: int | None = None, batchsize: int | None = None, output_dirname: str | None = None,
               acl_json_path: Path | None = None, extra: list[str] | None = None) -> list[str]:
    """Options are given as separate tokens, as ais_bench's argparse documents them."""
    if outfmt not in OUTFMTS:
        raise ValueError(f"outfmt must be one of {OUTFMTS}")
    argv = [str(python), "-m", "ais_bench", "--model", str(model)]
    if inputs:
        argv += ["--input", ",".join(str(p) for p in inputs)]
    argv += ["--output", str(output)]
    if output_dirname:
        argv += ["--output_dirname", output_dirname]
    argv += ["--outfmt", outfmt]
    for flag, value in (("--loop", loop), ("--warmup_count", warmup_count), ("--device", device),
                        ("--batchsize", batchsize), ("--acl_json_path", acl_json_path)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + list(extra or [])


def dynamic_args(shapes: dict | None, feed: dict[str, tuple] | None) -> list[str]:
    """The ais_bench option that picks the OM's gear for ``feed`` (name -> shape), from convert.json's
    ``shapes``: ``--dymBatch N``, ``--dymHW H,W``, ``--dymDims name:d,..;..`` or ``--dymShape`` for a range
    OM (ais_bench ``infer/__main__.py`` ``set_session_options``: one of them, else a static batch).
    Without a feed (a dry run) the value is a placeholder, except a batch gear: feeds are padded to its largest."""
    mode = (shapes or {}).get("mode", "static")
    if mode == "static":
        return []
    if mode == "dynamic_batch_size":
        batch = next(iter(feed.values()))[0] if feed else max(g[0] for g in shapes["gears"])
        return ["--dymBatch", str(batch)]
    if feed is None:
        flag = {"dynamic_image_size": "--dymHW", "dynamic_dims": "--dymDims"}.get(mode, "--dymShape")
        return [flag, "<the feed's gear>"]
    if mode == "dynamic_image_size":
        varied = next(n for n, dims in shapes["accepted"][0].items()
                      if len({tuple(g[n][-2:]) for g in shapes["accepted"]}) > 1)
        return ["--dymHW", ",".join(str(d) for d in feed[varied][-2:])]
    text = ";".join(f"{n}:{','.join(str(d) for d in shape)}" for n, shape in feed.items())
    return ["--dymDims" if mode == "dynamic_dims" else "--dymShape", text]


def find_summary(output: Path) -> Path | None:
    """``{output}/{ts}_summary.json`` (newest when there are several)."""
    found = sorted(output.glob("*_summary.json"))
    return found[-1] if found else None


def find_result_dir(output: Path, output_dirname: str | None = None) -> Path | None:
    if output_dirname:
        path = output / output_dirname
        return path if path.is_dir() else None
    found = sorted(p for p in output.iterdir() if p.is_dir() and _TS_DIR.match(p.name))
    return found[-1] if found else None


# ais_bench writes "percentile(<scale>%)" (scale 99, infer/summary.py ``Summary.record``); other summary
# writers (benchmark wrappers, older tools) spell a percentile "P99", "p99", "percentile99" or "99%".
_PERCENTILE = re.compile(r"^(?:percentile\(?\s*|p|tp)?(\d+(?:\.\d+)?)\s*%?\)?$", re.IGNORECASE)


def _num(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def percentiles(block: dict) -> dict[float, float]:
    """Every percentile a summary block holds, by its rank: {99.0: value, ...}, whatever the layout."""
    out = {}
    for key, value in block.items():
        match = _PERCENTILE.match(str(key).strip())
        if match and key not in ("min", "max", "mean", "median", "count") and _num(value) is not None:
            out[float(match.group(1))] = _num(value)
    return out


def _stats(block: Any, samples: Any = None) -> dict[str, float | None]:
    """min/max/mean/median/p99/count of one summary block. Layouts: ais_bench's (``percentile(99%)``,
    ``count``), the multi-thread one (``mean`` and ``count`` only), older ones without ``count``, and
    ``P99``-style keys. A value the block lacks comes from ``samples`` (the run's latency list) when
    that is a plain list of numbers; the multi-thread list holds [start, end] pairs, not latencies."""
    block = block if isinstance(block, dict) else {}
    stats = {"min": _num(block.get("min")), "max": _num(block.get("max")), "mean": _num(block.get("mean")),
             "median": _num(block.get("median")), "p99": percentiles(block).get(99.0), "count": _num(block.get("count"))}
    values = [_num(v) for v in samples] if isinstance(samples, list) else []
    if values and all(v is not None for v in values):
        import numpy as np

        computed = {"min": min(values), "max": max(values), "mean": float(np.mean(values)),
                    "median": float(np.median(values)), "p99": float(np.percentile(values, 99)), "count": len(values)}
        stats = {k: computed[k] if v is None else v for k, v in stats.items()}
    return stats


def parse_summary(data: dict) -> dict[str, Any]:
    """The summary in the emulator's shape; ``raw`` keeps every field ais_bench wrote."""
    if "NPU_compute_time" not in data:
        raise ValueError("not an ais_bench summary: no NPU_compute_time")
    latency = _stats(data.get("NPU_compute_time"), data.get("npu_compute_time_list"))
    count = latency.pop("count")
    return {
        "latency_ms": latency,
        "throughput": float(data["throughput"]) if data.get("throughput") is not None else None,
        "count": int(count) if count is not None else len(data.get("npu_compute_time_list") or []),
        "h2d_latency_ms": _stats(data.get("H2D_latency")),
        "d2h_latency_ms": _stats(data.get("D2H_latency")),
        "source": "ais_bench",
        "raw": data,
    }
