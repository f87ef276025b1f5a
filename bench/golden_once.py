"""Bench: four compare variants of one detector, the golden dumped per variant (before) vs once (after).

Model: ``tests/modelzoo.text_detector`` (430 nodes, DBNet-shaped; ``--size 736`` is issue 21's case),
converted four ways (force_fp32, force_fp16, allow_mix_precision, allow_fp32_to_fp16). Each variant
is compared against the fp32 golden with ``run_compare``:

- before: every variant dumps the golden into its own folder (what a compare stage did until the
  shared dump cache). Target dumps are the same (compact) in both rows, so the difference is the
  golden's (and, with ``--keep failing``, the pruning's);
- after: the golden comes from one shared ``DumpCache`` (made by the first variant, read in place by
  the others), as compare stages in a pipeline do.

Printed: wall time of the four compares, golden dump runs, and disk (bytes of every folder the
compares keep, plus the cache's objects), with the ratios. ``--keep failing`` also prunes each
variant's target dump to its failing ops (the ``dump_keep`` param).

Run: ``python bench/golden_once.py [--size 320] [--width 16] [--keep all|failing]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = ("force_fp32", "force_fp16", "allow_mix_precision", "allow_fp32_to_fp16")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).exists() else 0


def run(golden: Path, targets: dict, inputs: Path, work: Path, *, shared: bool, keep: str) -> dict:
    from ascendpipe.backends.onnxruntime import dump as dumpmod
    from ascendpipe.backends.compare_sources import run_compare
    from ascendpipe.compare.thresholds import resolve
    from ascendpipe.store.dump_cache import DumpCache

    cache = DumpCache(work / "cache") if shared else None
    golden_runs = []
    real = dumpmod.dump_model

    def counting(model, feeds, out_dir, *, fusions, **kw):
        golden_runs.extend([1] if not fusions else [])
        return real(model, feeds, out_dir, fusions=fusions, **kw)

    dumpmod.dump_model = counting
    try:
        start = time.perf_counter()
        firsts = {}
        for name, target in targets.items():
            result, _ = run_compare(golden, target, input_path=inputs, work_dir=work / name, limits=resolve(),
                                    dump_cache=cache, keep=keep)
            firsts[name] = (result["first_failure"] or {}).get("op_name")
        seconds = time.perf_counter() - start
    finally:
        dumpmod.dump_model = real
    per_variant = {name: folder_bytes(work / name) for name in targets}
    return {"seconds": seconds, "golden_runs": len(golden_runs), "per_variant": per_variant,
            "cache": folder_bytes(work / "cache"), "total": sum(per_variant.values()) + folder_bytes(work / "cache"),
            "first_failures": firsts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--keep", choices=("all", "failing"), default="all")
    args = parser.parse_args()
    import numpy as np

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings
    from tests import modelzoo as mz

    with tempfile.TemporaryDirectory(prefix="bench-golden-once-") as tmp:
        tmp = Path(tmp)
        golden = mz.text_detector(tmp / "det.onnx", size=args.size, width=args.width)
        targets = {}
        for mode in VARIANTS:
            convert_model(golden, tmp / "conv" / mode, ConvertSettings(precision_mode=mode))
            targets[mode] = tmp / "conv" / mode
        np.savez(tmp / "x.npz", **mz.text_detector_inputs(size=args.size))
        before = run(golden, targets, tmp / "x.npz", tmp / "before", shared=False, keep="all")
        after = run(golden, targets, tmp / "x.npz", tmp / "after", shared=True, keep=args.keep)
    mb = 1e6
    print(f"text detector {args.size}x{args.size}, width {args.width}, 4 compare variants ({', '.join(VARIANTS)})")
    for label, r in (("before (golden per variant)", before), (f"after (golden shared, keep {args.keep})", after)):
        variants = ", ".join(f"{n} {b / mb:.0f}" for n, b in r["per_variant"].items())
        print(f"{label:<36} {r['seconds']:7.1f} s  golden dumps {r['golden_runs']}  disk {r['total'] / mb:8.1f} MB "
              f"(per variant MB: {variants}; shared cache {r['cache'] / mb:.0f})")
    print(f"ratios before/after: time {before['seconds'] / after['seconds']:.2f}x, disk {before['total'] / after['total']:.2f}x; "
          f"first failures identical: {before['first_failures'] == after['first_failures']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
