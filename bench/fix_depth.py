"""Benchmark: fix on deep models whose every block breaks alike (issue 49, item 1).

    python bench/fix_depth.py [--blocks 4,8,16,32] [--json OUT.json]

The RMSNorm stack of ``tests/fix/deep_models.py`` (each block's mean of squares ~1e5, beyond fp16's
65504, a final norm and a head), with Hugging Face-style scoped names (``/model/layers.N/...``) and with
flat names (``/Pow_12``: the blocks found by structure). For each depth: ascendpipe's evaluations (target:
output cosine >= 0.99), whether the answer restores the model in an independent check (converted again
with the answer, run on onnxruntime, numpy's cosine against the fp32 logits), the kept ops and the wall
time; and the same search growing one cause per attempt (only the first failure's advice: the search
before issue 49), capped at 40 evaluations, for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fix import deep_models as dm  # noqa: E402

CAP = 40


def _cosine(model: Path, feeds: dict, work: Path, keep, fusion) -> float:
    import onnxruntime as ort

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    converted = convert_model(model, work, resolve({"precision_mode": "force_fp16", "keep_dtype": list(keep),
                                                    "fusion_switch": dict(fusion)}))
    run = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    t, g = run(converted.model_path).astype(np.float64).ravel(), run(model).astype(np.float64).ravel()
    if not np.isfinite(t).all() or not np.linalg.norm(t):
        return 0.0
    return float(t @ g / (np.linalg.norm(t) * np.linalg.norm(g)))


def _one_cause_per_attempt():
    """The grow step before issue 49: the first failure's advice only (no other causes, no siblings)."""
    from ascendpipe.fix import propose

    original = propose.by_cause
    propose.by_cause = lambda result: propose.advised(result.failure)
    return lambda: setattr(propose, "by_cause", original)


def run_one(blocks: int, names: str, work: Path, joined: bool) -> dict:
    from ascendpipe.fix.run import fix_standalone

    model = dm.rmsnorm_stack(work / f"deep{blocks}{names}.onnx", blocks=blocks, names=names)
    feeds = dm.inputs()
    np.save(work / "x.npy", feeds["hidden"])
    undo = None if joined else _one_cause_per_attempt()
    started = time.monotonic()
    try:
        report = fix_standalone(model, input_path=work / "x.npy", max_attempts=CAP,
                                output=work / f"out{blocks}{names}{joined}")
    finally:
        if undo:
            undo()
    wall = time.monotonic() - started
    restores = report.outcome.passed and _cosine(model, feeds, work / "check", report.keep_dtype,
                                                 report.fusion_switch) >= 0.99
    return {"blocks": blocks, "names": names, "search": "by cause" if joined else "one cause per attempt",
            "evaluations": len(report.outcome.attempts), "passed": report.outcome.passed, "restores": restores,
            "kept": len(report.keep_dtype), "by_range": len(report.summary["by_range"]),
            "passes_off": list(report.fusion_switch), "wall_s": round(wall, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="4,8,16,32")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ascendpipe-bench-depth-") as scratch:
        for blocks in (int(b) for b in args.blocks.split(",")):
            for names in ("hf", "flat"):
                for joined in (True, False):
                    work = Path(scratch) / f"{blocks}-{names}-{joined}"
                    work.mkdir()
                    row = run_one(blocks, names, work, joined)
                    rows.append(row)
                    print(f"{blocks:>3} blocks  {names:<4}  {row['search']:<22}  {row['evaluations']:>3} evaluations  "
                          f"{'restored' if row['restores'] else 'NOT restored':<12}  kept {row['kept']:>3} "
                          f"({row['by_range']} by range), passes off {row['passes_off'] or '-'}  [{row['wall_s']} s]",
                          flush=True)
    ours = [r for r in rows if r["search"] == "by cause"]
    print(f"\nby cause: restores {sum(r['restores'] for r in ours)}/{len(ours)}, at most "
          f"{max(r['evaluations'] for r in ours)} evaluations (32 blocks: "
          f"{', '.join(str(r['evaluations']) for r in ours if r['blocks'] == 32) or 'not run'})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
