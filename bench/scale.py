"""Scale-out: wall time of a 64-variant sweep of 1-second stages on 1, 2, 4 and 8 Ray workers.

Each point is a fresh workspace and a fresh local Ray instance with N logical CPUs (one stage per
CPU, so N workers at once); the stages sleep, so two real cores are enough to show the scaling of
the scheduling itself: the driver's deciding, keying and recording, Ray's task dispatch. Peer in
the same run: the local executor (doit threads) with -j 8.

    .venv/bin/python bench/scale.py [--variants 64] [--seconds 1] [--workers 1,2,4,8] [--remote URL]

Prints per point the Ray start time with its N workers warmed up (not in the build time: a cluster
and its workers outlive builds), the build
wall time, and the speed-up against 1 worker (the goal is >= 6x at 8).

``--golden``: instead, a real compare pipeline on Ray with a remote cache on a moto S3 server
started here (``moto[server]``): a detector (``tests.modelzoo.text_detector``, ``--size``) converted
``--variants`` ways, each compared against the fp32 golden on 2 workers. Printed per build: the
compare stages, golden dumps made and reused (each stage's record: ``info.golden_dumped_here``),
the dumps named in the remote, and the wall time; first the build that makes the golden, then a
fresh clone on a host whose worker cache is empty (a new host), which reads it from the remote.
Before the shared remote dump, every compare stage dumped its golden: made = compare stages.

    .venv/bin/python bench/scale.py --golden [--size 320] [--variants 4]
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


GOLDEN_PIPELINE = """\
remote: {remote}
backend: onnxruntime
stages:
  convert:
    kind: convert
    model: model.onnx
    matrix:
      precision_mode: [{modes}]
  compare:
    kind: compare
    golden: model.onnx
    target: convert
    inputs: x.npy
"""
MODES = ("force_fp32", "force_fp16", "allow_mix_precision", "allow_fp32_to_fp16")


def golden_once_on_ray(size: int, variants: int) -> None:
    """The golden of ``variants`` compare stages on Ray with a moto S3 remote: dumped once, then
    restored from the remote by a fresh clone on an empty worker cache."""
    import shutil
    import uuid

    import numpy as np
    import logging

    from moto.server import ThreadedMotoServer

    from tests import modelzoo

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)  # a line per request, and moto's own tracebacks of retried requests
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_CONFIG_FILE": os.devnull,
                       "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    import s3fs

    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
    remote = f"s3://{bucket}/cache"
    base = tempfile.mkdtemp(prefix="ascendpipe-golden-")
    host_cache = os.path.join(base, "worker-cache")
    os.environ["ASCENDPIPE_WORKER_CACHE"] = host_cache  # before Ray starts: its workers inherit it
    first = os.path.join(base, "a")
    os.makedirs(os.path.join(first, ".ascendpipe"))
    with open(os.path.join(first, "pipeline.yaml"), "w") as f:
        f.write(GOLDEN_PIPELINE.format(remote=remote, modes=", ".join(MODES[:variants])))
    modelzoo.text_detector(os.path.join(first, "model.onnx"), size=size)
    np.save(os.path.join(first, "x.npy"), modelzoo.text_detector_inputs(0, size=size)["image"])
    clone = os.path.join(base, "b")
    os.makedirs(os.path.join(clone, ".ascendpipe"))
    for name in ("pipeline.yaml", "model.onnx", "x.npy"):
        shutil.copy2(os.path.join(first, name), clone)

    import ray

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    print(f"detector {size}x{size}, {variants} compare stages of one golden, Ray with 2 workers, remote {remote} (moto)")
    print(f"{'build':<40} {'compares':>8} {'made':>5} {'reused':>6} {'in remote':>9} {'wall s':>7}")
    ray.init(address="local", num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    try:
        warm_up(ray, 2)
        for label, root, force in (("first workspace", first, False), ("fresh clone, empty worker cache", clone, True)):
            if force:
                shutil.rmtree(host_cache, ignore_errors=True)  # a new host: nothing cached on it
            started = time.perf_counter()
            run = ascendpipe.build(os.path.join(root, "pipeline.yaml"), executor="ray", force=force, quiet=True,
                                   stream=io.StringIO())
            wall = time.perf_counter() - started
            bad = {n: s["state"] for n, s in run["stages"].items() if s["state"] != "ran"}
            if bad:
                raise SystemExit(f"not every stage ran: {bad}")
            dumped = [d for n, s in run["stages"].items() if n.startswith("compare@") for d in s["info"]["golden_dumped_here"]]
            in_remote = len(fs.find(f"{bucket}/cache/dumps"))
            print(f"{label:<40} {len(dumped):>8} {sum(dumped):>5} {len(dumped) - sum(dumped):>6} {in_remote:>9} {wall:>7.2f}",
                  flush=True)
    finally:
        ray.shutdown()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    print("made: golden dumps run by the build's compare stages; before the shared remote dump, made = compares")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--remote", default=None, help="exchange files through this remote cache (s3://... or a folder)")
    ap.add_argument("--golden", action="store_true", help="the shared golden dump of compare stages on Ray with a moto remote")
    ap.add_argument("--size", type=int, default=320, help="--golden: the detector's input size")
    args = ap.parse_args()
    if args.golden:
        golden_once_on_ray(args.size, min(max(args.variants if args.variants != 64 else 4, 1), len(MODES)))
        return
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
