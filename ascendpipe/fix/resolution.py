"""What difference an evaluation set can show: fix never calls a change inside its noise "restored".

For Top-k (classification without a postprocess) the per-sample hits of each attempt are read from
its infer outputs, and a paired bootstrap over the samples (``BOOTSTRAP`` resamples, seeded) gives
the 95% interval of a difference between two attempts: a change whose interval holds 0 is noise.
For other metrics (mAP of ReID or detection, a postprocessed classification) the per-sample
contributions are the eval's business; the floor is the smallest step one of the N samples (queries,
images) can move a mean over them, 1/N, said as such.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

BOOTSTRAP = 2000
LEVEL = 0.95


def sample_count(stage, workspace: Path) -> int | None:
    """How many samples the eval stage scores (labels, queries, or ground-truth images)."""
    labels = stage.inputs.get("labels") if isinstance(stage.inputs, dict) else None
    if not labels:
        return None
    base = Path(workspace) / labels
    task = stage.params.get("task")
    name = {"classification": "labels.npy", "reid": "query_ids.npy", "detection": "ground_truth.json"}.get(task)
    if name is None:
        return None
    path = base if base.is_file() else base / name
    from ascendpipe.errors import UserError
    from ascendpipe.userfile import load_json

    try:
        if path.suffix == ".json":
            return len(load_json(path, "ground truth"))
        return int(np.load(path, mmap_mode="r", allow_pickle=False).size)  # its header's count: nothing read
    except (OSError, ValueError, TypeError, UserError):
        return None


def topk_of(metric: str) -> int | None:
    found = re.fullmatch(r"top(\d+)", metric)
    return int(found.group(1)) if found else None


def sample_hits(stage, workspace: Path, metric: str, build_dir: Path) -> np.ndarray | None:
    """Per-sample 0/1 Top-k hits of the eval stage's current outputs (None where the metric is not a plain
    Top-k of one output)."""
    from ascendpipe.errors import Location, UserError
    from ascendpipe.metrics import topk_accuracy
    from ascendpipe.stages.eval import pick_output, read_outputs

    k = topk_of(metric)
    if k is None or stage.params.get("task") != "classification" or stage.params.get("postprocess"):
        return None
    outputs, labels = stage.inputs.get("outputs"), stage.inputs.get("labels")
    if not outputs or not labels:
        return None
    base = Path(workspace) / labels
    try:
        scores = pick_output(read_outputs(Path(workspace) / outputs, Location(stage=stage.name)),
                             stage.params.get("output_name"), Location(stage=stage.name))
        from ascendpipe.npyheader import load_npy

        truth = load_npy(base if base.is_file() else base / "labels.npy", label="labels").reshape(-1)
        scores = np.asarray(scores).reshape(truth.size, -1)
        # topk_accuracy's own rule (ties and NaN count against the sample), one sample at a time
        return np.array([topk_accuracy(scores[i:i + 1], truth[i:i + 1], k) for i in range(truth.size)])
    except (UserError, OSError, ValueError):
        return None


def paired_interval(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """The LEVEL bootstrap interval of mean(a) - mean(b) over paired samples."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    if not d.any():
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, d.size, (BOOTSTRAP, d.size))
    means = d[picks].mean(axis=1)
    tail = (1 - LEVEL) / 2 * 100
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def bootstrap_resolution(hits: np.ndarray, seed: int = 0) -> float:
    """The smallest difference this set shows for a metric near mean(hits): the half-width of the
    LEVEL bootstrap interval of the mean, at least one sample (1/N)."""
    hits = np.asarray(hits, np.float64)
    rng = np.random.default_rng(seed)
    means = hits[rng.integers(0, hits.size, (BOOTSTRAP, hits.size))].mean(axis=1)
    tail = (1 - LEVEL) / 2 * 100
    half = (np.percentile(means, 100 - tail) - np.percentile(means, tail)) / 2
    return float(max(half, 1.0 / hits.size))


def judge(samples: int | None, tolerance: float, baseline, final, *, hits_baseline=None, hits_final=None,
          hits_golden=None) -> dict:
    """The resolution block of fix.json and whether the answer's change is real.

    ``baseline`` / ``final``: the metric with no remedy and with the answer. Returns {"samples",
    "resolution", "method", "tolerance_below_resolution", "change", "change_interval",
    "inside_noise", "note"}."""
    out: dict = {"samples": samples, "resolution": None, "method": None, "tolerance_below_resolution": None,
                 "change": None, "change_interval": None, "inside_noise": None, "note": None}
    if hits_golden is not None and len(hits_golden):
        out["resolution"], out["method"] = bootstrap_resolution(hits_golden), (
            f"bootstrap over {len(hits_golden)} samples ({int(LEVEL * 100)}% interval half-width, at least 1/N)")
    elif samples:
        out["resolution"], out["method"] = 1.0 / samples, f"one of {samples} samples (1/N)"
    if out["resolution"] is None:
        return out
    notes = []
    if tolerance < out["resolution"]:
        out["tolerance_below_resolution"] = True
        notes.append(f"the tolerance asked ({tolerance:.3g}) is below what the evaluation set can show "
                     f"(~{out['resolution']:.3g}, {out['method']}): a difference that small is noise; "
                     "a larger evaluation set would resolve it")
    else:
        out["tolerance_below_resolution"] = False
    if baseline is not None and final is not None:
        out["change"] = float(final) - float(baseline)
        if hits_baseline is not None and hits_final is not None:
            low, high = paired_interval(hits_final, hits_baseline)
            out["change_interval"] = [low, high]
            out["inside_noise"] = low <= 0.0 <= high
        else:
            out["inside_noise"] = abs(out["change"]) < out["resolution"]
        if out["inside_noise"]:
            notes.append(f"the remedy's change of the metric ({float(baseline):.6g} -> {float(final):.6g}, "
                         f"{out['change']:+.3g}) is inside the evaluation set's noise: not shown to restore anything")
    out["note"] = "; ".join(notes) or None
    return out
