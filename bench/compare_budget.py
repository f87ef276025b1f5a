"""Bench: a long-sequence decoder compare within a disk budget (issue 49 item 9), against full dumps.

    PYTHONPATH=$PWD python bench/compare_budget.py [--seq 512 2048] [--budget-mb 16] [--json OUT.json]

The model is the plain-torch LLaMA-style decoder layer of ``tests/fix/transformer_models.py`` (RMSNorm,
RoPE, SDPA over a KV cache, SiLU FFN), its embeddings scaled past fp16's range (RMSNorm's mean of squares
~1.6e5: the failure of issue 40 and 49), converted for Ascend310B1 (saturation). For each prompt length
``seq`` (a prefill with an empty cache: the attention scores grow with seq^2) it runs one compare with no
budget (every tensor of both sides in full) and one with ``--budget-mb``, and prints the bytes the two
dumps hold on disk (tensor files and index), the seconds, the rows compared by statistics only, and
whether both name the same first failure (op, mechanism). The budget is the compare's ``dump_budget``.
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

from tests.fix import transformer_models as tm  # noqa: E402


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _feeds(seq: int) -> dict:
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(0, tm.VOCAB, (1, seq), dtype=np.int64),
            "position_ids": (np.arange(seq, dtype=np.int64) % 64)[None, :],  # the RoPE table holds 64 positions
            "past_key": np.zeros((1, tm.HEADS, 0, tm.HEAD_DIM), np.float32),
            "past_value": np.zeros((1, tm.HEADS, 0, tm.HEAD_DIM), np.float32)}


def one(model: Path, target: Path, inputs: Path, work: Path, budget) -> dict:
    from ascendpipe.backends.compare_sources import run_compare
    from ascendpipe.compare import thresholds as thr

    started = time.perf_counter()
    result, _ = run_compare(model, target, input_path=inputs, work_dir=work, limits=thr.resolve(), dump_budget=budget)
    seconds = time.perf_counter() - started
    first = result["first_failure"] or {}
    return {"seconds": round(seconds, 2), "dump_bytes": _bytes(work / "golden_dump") + _bytes(work / "target_dump"),
            "statistics_only": result["summary"]["statistics_only"], "rows": len(result["rows"]),
            "first": f"{first.get('op_name')} ({first.get('mechanism')})",
            "statistics_first": result["summary"].get("statistics_first")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--budget-mb", type=float, default=16.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-budget-") as scratch:
        root = Path(scratch)
        model = tm.build("llama", root / "llama.onnx", scaled=True)
        target = convert_model(model, root / "conv", resolve({"soc_version": "Ascend310B1"})).model_path.parent
        for seq in args.seq:
            inputs = root / f"in{seq}.npz"
            np.savez(inputs, **_feeds(seq))
            full = one(model, target, inputs, root / f"full{seq}", None)
            budget = one(model, target, inputs, root / f"budget{seq}", int(args.budget_mb * (1 << 20)))
            row = {"seq": seq, "full": full, "budget": budget, "same_first_failure": full["first"] == budget["first"]}
            rows.append(row)
            print(f"seq {seq:5d}: full dumps {full['dump_bytes'] / 1e6:8.1f} MB in {full['seconds']:6.2f} s | budget "
                  f"{args.budget_mb:g} MB: {budget['dump_bytes'] / 1e6:8.1f} MB in {budget['seconds']:6.2f} s, "
                  f"{budget['statistics_only']} of {budget['rows']} rows statistics only | first failure "
                  f"{full['first']} / {budget['first']}{'' if row['same_first_failure'] else '  DIFFERS'}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["same_first_failure"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
