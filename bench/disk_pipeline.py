"""Bench: the disk a big model costs in a pipeline (issue 49, item 8).

A 2.4 GB external-data model (``convert_external.build``: 9 MatMuls, its weights in
``model.onnx.data``, as the report's decoder) in a pipeline of a ``source`` stage and three convert
variants: ``origin`` (must_keep_origin_dtype: no weight rounded), ``fp16`` (force_fp16: every weight
rounded, a new 2.4 GB), ``keep`` (Ascend910B1 with one MatMul kept: 8 of 9 rounded, the kept one read
from the source's bytes). Measured with ``du -sb`` (hard links counted once within one ``du``):
build/ and cache/ apart and together, against the bound: the model once plus what each variant really
writes (its own weights file, ``model.emulated.data``), and the sum of every file's size (what each
output and object cost as its own copy, as before this work: 9.6 GB in build/, 8.9 GB in cache/).
Then a no-op build, and a status after the weights file is rewritten (it names the file).

    python bench/disk_pipeline.py [--matmuls 9] [--work bench/.models/disk] [--keep]

Everything is written under ``--work`` (about 9.5 GB at the default size) and removed at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare_vs_polygraphy import measure  # noqa: E402  (wall time and peak RSS of a command)
from convert_external import build  # noqa: E402  (the 2.4 GB model, written one weight at a time)

PIPELINE = """\
stages:
  src: {kind: source, model: models/model.onnx, params: {full_check: false}}
  convert:
    kind: convert
    model: src
    matrix:
      origin: {precision_mode: must_keep_origin_dtype}
      fp16: {precision_mode: force_fp16}
      keep: {keep_dtype: [matmul0], soc_version: Ascend910B1}
"""
VARIANTS = ("origin", "fp16", "keep")


def du(*paths: Path) -> int:
    """Bytes ``du -sb`` counts for ``paths`` together (each inode once)."""
    out = subprocess.run(["du", "-sbc", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def every_file(*paths: Path) -> int:
    """The sum of every file's size: what they cost as copies."""
    return sum(p.stat().st_size for path in paths for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matmuls", type=int, default=9)
    ap.add_argument("--work", default=str(HERE / ".models" / "disk"))
    ap.add_argument("--keep", action="store_true", help="leave the workspace in --work")
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    (work / "models").mkdir(parents=True)
    (work / ".ascendpipe").mkdir()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {args.matmuls} MatMuls; file system of {work}: "
          f"{subprocess.run(['stat', '-f', '-c', '%T', str(work)], capture_output=True, text=True).stdout.strip()}")
    try:
        weights = build(work / "models" / "model.onnx", args.matmuls, 8)
        (work / "pipeline.yaml").write_text(PIPELINE)
        env_cwd = os.getcwd()
        os.chdir(work)
        try:
            first = measure([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "-q"])
            build_dir, cache = work / "build", work / "cache"
            own = {v: (build_dir / f"convert__{v}" / "model.emulated.data") for v in VARIANTS}
            changed = {v: p.stat().st_size if p.exists() else 0 for v, p in own.items()}
            bound = weights + sum(changed.values())
            together, build_only, cache_only = du(build_dir, cache), du(build_dir), du(cache)
            copies = every_file(build_dir) + every_file(cache)
            records = {v: json.loads((build_dir / f"convert__{v}" / "convert.json").read_text())["external_data"]
                       for v in VARIANTS}
            noops = []
            for _ in range(3):  # the first decides (it hashes what the build linked once more), then the memo
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "-q"], check=True,
                               capture_output=True)
                noops.append(time.perf_counter() - started)
            with open(work / "models" / "model.onnx.data", "r+b") as data:  # one weight's first value changed
                data.write(b"\x00\x00\x80\x3f")
            status = json.loads(subprocess.run([sys.executable, "-m", "ascendpipe", "status", "pipeline.yaml",
                                                "--json"], capture_output=True, text=True).stdout)
        finally:
            os.chdir(env_cwd)
        gb = 1e9
        print(f"model: {weights / gb:.2f} GB of weights; build: {first['wall']:.1f} s, peak RSS "
              f"{first['peak_rss_mb']:.0f} MB; no-op builds after it {', '.join(f'{t:.2f}' for t in noops)} s")
        for v in VARIANTS:
            print(f"  convert@{v}: rounded {records[v]['rounded']} weights, own file {changed[v] / gb:.2f} GB, "
                  f"source files {records[v]['source_files']}")
        print("| measure | bytes |")
        print("| --- | --- |")
        print(f"| du build/ | {build_only / gb:.2f} GB |")
        print(f"| du cache/ | {cache_only / gb:.2f} GB |")
        print(f"| du build/ cache/ (each inode once) | {together / gb:.2f} GB |")
        print(f"| bound: the model once + each variant's own file | {bound / gb:.2f} GB |")
        print(f"| every file as its own copy | {copies / gb:.2f} GB |")
        print(f"within the bound: {'yes' if together <= bound * 1.01 else 'NO'} "
              f"({(together - bound) / 1e6:+.1f} MB: graphs, plans, records)")
        print(f"status after rewriting model.onnx.data: src {status['stages']['src']['state']}: "
              f"{status['stages']['src']['reasons']}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
