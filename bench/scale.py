"""Scale-out: wall time of a 64-variant sweep of 1-second stages on 1, 2, 4 and 8 Ray workers.

Each point is a fresh workspace and a fresh local Ray instance with N logical CPUs (one stage per
CPU, so N workers at once); the stages sleep, so two real cores are enough to show the scaling of
the scheduling itself: the driver's deciding, keying and recording, Ray's task dispatch. Peer in
the same run: the local executor (doit threads) with -j 8.

    .venv/bin/python bench/scale.py [--variants 64] [--seconds 1] [--workers 1,2,4,8] [--remote URL]

Prints per point the Ray start time with its N workers warmed up (not in the build time: a cluster
and its workers outlive builds), the build
wall time, and the speed-up against 1 worker (the goal is >= 6x at 8).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ascendpipe  # noqa: E402

PIPELINE = """\
stages:
  sweep:
    kind: run
    cmd: sleep {seconds} && echo {{{{ params.i }}}} > data/out-{{{{ params.i }}}}.txt
    outs: ["data/out-{{{{ params.i }}}}.txt"]
    matrix:
      i: [{values}]
"""


def workspace(variants: int, seconds: float, remote: str | None) -> str:
    root = tempfile.mkdtemp(prefix="ascendpipe-scale-")
    os.makedirs(os.path.join(root, ".ascendpipe"))
    os.makedirs(os.path.join(root, "data"))
    text = PIPELINE.format(seconds=seconds, values=", ".join(str(i) for i in range(variants)))
    if remote:
        text = f"remote: {remote}/{os.path.basename(root)}\n" + text
    with open(os.path.join(root, "pipeline.yaml"), "w") as f:
        f.write(text)
    return os.path.join(root, "pipeline.yaml")


def timed_build(path: str, **kw) -> float:
    started = time.perf_counter()
    run = ascendpipe.build(path, quiet=True, stream=io.StringIO(), **kw)
    elapsed = time.perf_counter() - started
    bad = {n: s["state"] for n, s in run["stages"].items() if s["state"] != "ran"}
    if bad:
        raise SystemExit(f"not every stage ran: {bad}")
    return elapsed


def warm_up(ray, n: int) -> None:
    """Start the N worker processes before timing (a cluster's workers outlive builds; starting
    Python processes on 2 busy cores would otherwise be most of what is measured)."""
    from ascendpipe.engine.worker import run_job  # noqa: F401 - imported in the workers too

    @ray.remote(num_cpus=1)
    def ready(seconds):
        import ascendpipe.engine.worker  # noqa: F401

        time.sleep(seconds)
        return os.getpid()

    pids = set(ray.get([ready.remote(1.0) for _ in range(n)]))
    if len(pids) < n:
        ray.get([ready.remote(1.0) for _ in range(n)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--remote", default=None, help="exchange files through this remote cache (s3://... or a folder)")
    args = ap.parse_args()
    import ray

    counts = [int(x) for x in args.workers.split(",")]
    ideal = args.variants * args.seconds
    print(f"{args.variants} stages of {args.seconds:g} s each ({ideal:g} s of work), cpus on this machine: {os.cpu_count()}")
    print(f"{'executor':<22} {'start s':>8} {'build s':>8} {'speed-up':>9} {'ideal':>6}")
    base = None
    for n in counts:
        path = workspace(args.variants, args.seconds, args.remote)
        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=n, object_store_memory=100 * 1024 * 1024, include_dashboard=False,
                 logging_level="WARNING", log_to_driver=False)
        warm_up(ray, n)
        start = time.perf_counter() - t0
        try:
            wall = timed_build(path, executor="ray")
        finally:
            ray.shutdown()
        base = base or wall * counts[0]
        print(f"{'ray, ' + str(n) + ' workers':<22} {start:>8.2f} {wall:>8.2f} {base / wall:>8.2f}x {n:>5}x", flush=True)
    path = workspace(args.variants, args.seconds, None)
    wall = timed_build(path, jobs=8)
    print(f"{'local, -j 8 (peer)':<22} {'-':>8} {wall:>8.2f} {base / wall:>8.2f}x {8:>5}x")
    print("speed-up: against 1 Ray worker in this run")


if __name__ == "__main__":
    main()
