"""Stages as Ray tasks on a small local Ray instance: a 16-variant matrix byte-identical to the
local executor, workers exchanging files only through the remote cache, a worker killed
mid-stage, a lost node (a two-node cluster on this machine), resources the cluster cannot give."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import ascendpipe
from tests.scale.conftest import states
from tests.scale.test_remote import ALL, PIPELINE

MATRIX = """\
stages:
  convert:
    kind: convert
    model: m.onnx
    matrix:
      precision_mode: [force_fp16, allow_fp32_to_fp16, force_fp32, must_keep_origin_dtype]
      op_select_implmode: [high_performance, high_precision, high_precision_for_all, high_performance_for_all]
  summary:
    kind: run
    cmd: python3 step.py COUNTER data/summary.txt build/convert__force_fp16-high_precision/convert.json
    deps: [step.py, build/convert__force_fp16-high_precision]
    outs: [data/summary.txt]
"""


def _matrix_ws(make_ws, name):
    from tests.modelzoo import l2norm_model

    ws = make_ws(name)
    ws.pipeline(MATRIX)
    l2norm_model(ws.root / "m.onnx", features=16)
    return ws


def test_matrix_of_16_variants_on_ray_matches_the_local_executor(make_ws, ray_local):
    # one workspace, built twice: locally, then every stage again on Ray
    ws = _matrix_ws(make_ws, "ws")
    run = ws.build()
    assert len(run["stages"]) == 17 and set(states(run).values()) == {"ran"}
    local_files = {**ws.files(), **ws.files("data")}
    assert len(local_files) > 16 * 3
    run_ray = ws.build(executor="ray", force=True)
    assert set(states(run_ray).values()) == {"ran"}
    assert {**ws.files(), **ws.files("data")} == local_files
    assert {n: s["outputs"] for n, s in run_ray["stages"].items()} == {n: s["outputs"] for n, s in run["stages"].items()}
    on_ray = ws
    # every stage ran in a Ray worker process, not in this one (the driver)
    workers = {s["info"]["ray_worker"]["pid"] for s in run_ray["stages"].values()}
    assert os.getpid() not in workers
    # staleness stays with the driver: nothing to do now, and Ray is not even asked
    assert set(states(on_ray.build(executor="ray")).values()) == {"fresh"}


def test_workers_exchange_files_through_the_remote_cache(make_ws, bucket, ray_local):
    local = make_ws("local")
    local.pipeline(PIPELINE.replace("REMOTE", bucket))
    local.write("input.txt", "some input\n")
    run = local.build(use_remote=False)
    assert local.ran() == ALL

    on_ray = local.clone("ray")
    run_ray = on_ray.build(executor="ray")
    assert states(run_ray) == dict.fromkeys(ALL, "ran")
    assert on_ray.ran() == ALL
    assert on_ray.files("data") == local.files("data")
    assert {n: s["outputs"] for n, s in run_ray["stages"].items()} == {n: s["outputs"] for n, s in run["stages"].items()}

    # what the workers built is in the remote: a third workspace restores everything, runs nothing
    third = local.clone("third")
    assert states(third.build()) == dict.fromkeys(ALL, "restored")
    assert third.ran() == []
    assert third.files("data") == local.files("data")


KILLABLE = """\
stages:
  first:
    kind: run
    cmd: python3 step.py COUNTER data/first.txt step.py
    deps: [step.py]
    outs: [data/first.txt]
  slow:
    kind: run
    cmd: python3 slow.py
    deps: [data/first.txt, slow.py]
    outs: [data/slow.txt]
"""

# finds the Ray worker running it (a 'ray::' process up its parent chain), says so, and waits to
# be killed; a second attempt (the flag is there) completes at once
SLOW_PY = """\
import os, time
with open("data/slow.txt", "w") as f:
    f.write("partial")
if os.path.exists("attempt.flag") and os.environ.get("SECOND_TRY_COMPLETES", "1") == "1":
    open("data/slow.txt", "a").write(" complete")
    raise SystemExit(0)
pid = os.getppid()
while pid > 1:
    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    if cmd.startswith(b"ray::"):
        break
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
with open("attempt.flag.tmp", "w") as f:
    f.write(str(pid))
os.replace("attempt.flag.tmp", "attempt.flag")
time.sleep(120)
"""


def _build_in_thread(ws, **kw):
    box = {}

    def target():
        try:
            box["run"] = ws.build(executor="ray", **kw)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def _kill_worker_when_started(ws, thread):
    flag = ws.root / "attempt.flag"
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert thread.is_alive(), "the build ended before the stage started"
        assert time.monotonic() < deadline, "the stage never started"
        time.sleep(0.05)
    pid = int(flag.read_text())
    os.kill(pid, signal.SIGKILL)
    return pid


def test_a_worker_killed_mid_stage_is_retried(make_ws, ray_local):
    ws = make_ws("ws")
    ws.pipeline(KILLABLE)
    ws.write("slow.py", SLOW_PY)
    thread, box = _build_in_thread(ws, retries=1)
    killed = _kill_worker_when_started(ws, thread)
    thread.join(180)
    assert "error" not in box, box.get("error")
    run = box["run"]
    assert states(run) == {"first": "ran", "slow": "ran"}
    assert run["stages"]["slow"]["info"]["ray_worker"]["pid"] != killed
    assert (ws.root / "data/slow.txt").read_text() == "partial complete"
    assert states(ws.build()) == {"first": "fresh", "slow": "fresh"}


def test_a_worker_killed_with_no_retries_left_is_reported_and_nothing_recorded(make_ws, ray_local):
    ws = make_ws("ws")
    ws.pipeline(KILLABLE)
    ws.write("slow.py", SLOW_PY)
    thread, box = _build_in_thread(ws, retries=0)
    _kill_worker_when_started(ws, thread)
    thread.join(180)
    assert "error" not in box, box.get("error")
    run = box["run"]
    assert states(run) == {"first": "ran", "slow": "failed"}
    assert "Ray worker was lost 1 time" in run["stages"]["slow"]["error"]
    status = ascendpipe.status(str(ws.root / "pipeline.yaml"))
    assert status["stages"]["first"]["state"] == "fresh"
    assert status["stages"]["slow"] == {"state": "stale", "reasons": ["never built"]}
    run = ws.build(executor="ray")
    assert states(run) == {"first": "fresh", "slow": "ran"}
    assert (ws.root / "data/slow.txt").read_text() == "partial complete"


def test_a_failing_stage_is_reported_not_retried(make_ws, ray_local):
    ws = make_ws("ws")
    ws.pipeline("""\
        stages:
          bad:
            kind: run
            cmd: python3 step.py COUNTER data/x.txt && exit 3
            deps: [step.py]
            outs: [data/x.txt]
        """)
    run = ws.build(executor="ray", retries=2)
    assert states(run) == {"bad": "failed"}
    assert "command exited with code 3" in run["stages"]["bad"]["error"]
    assert ws.ran() == ["bad"]  # once: a stage's own failure is not a lost worker
    log = (ws.root / run["stages"]["bad"]["log"]).read_text()
    assert "exit 3" in log


def test_resources_the_cluster_cannot_give_fail_the_stage_clearly(make_ws, ray_local):
    ws = make_ws("ws")
    ws.pipeline("""\
        stages:
          tune:
            kind: run
            cmd: python3 step.py COUNTER data/x.txt
            deps: [step.py]
            outs: [data/x.txt]
            resources: {NPU: 4, CPU: 1, memory: 64MB}
          profile:
            kind: run
            cmd: python3 step.py COUNTER data/y.txt
            deps: [step.py]
            outs: [data/y.txt]
            resources: {fast_disk: 1}
        """)
    run = ws.build(executor="ray", keep_going=True)
    assert states(run) == {"tune": "failed", "profile": "failed"}
    assert run["stages"]["tune"]["error"] == "needs NPU: 4 but the Ray cluster has 2 in all"
    assert run["stages"]["profile"]["error"] == "needs fast_disk: 1 but the Ray cluster has none in all"
    assert ws.ran() == []


def test_one_npu_per_stage_sets_its_visible_device(make_ws, ray_local):
    ws = make_ws("ws")
    ws.pipeline("""\
        stages:
          infer:
            kind: run
            cmd: echo "$ASCEND_RT_VISIBLE_DEVICES" > data/device-{{ params.i }}.txt
            outs: ["data/device-{{ params.i }}.txt"]
            matrix:
              i: [0, 1, 2, 3]
            resources: {NPU: 1}
        """)
    (ws.root / "data").mkdir()
    run = ws.build(executor="ray")
    assert set(states(run).values()) == {"ran"}
    devices = [(ws.root / f"data/device-{i}.txt").read_text().strip() for i in range(4)]
    # Ray's accelerator support hands each task one of the node's two NPUs, by its own id
    assert set(devices) <= {"0", "1"} and all(devices), devices


def test_stage_resources_reach_ray(make_ws, ray_local):
    ws = make_ws("ws")
    ws.pipeline("""\
        stages:
          big:
            kind: run
            cmd: python3 -c "import os; open('data/cpus.txt', 'w').write(os.environ.get('OMP_NUM_THREADS', '?'))"
            outs: [data/cpus.txt]
            resources: {CPU: 2}
        """)
    run = ws.build(executor="ray")
    assert states(run) == {"big": "ran"}
    # Ray sets OMP_NUM_THREADS to the task's CPU count: the stage got 2 CPUs
    assert (ws.root / "data/cpus.txt").read_text() == "2"


def test_shared_mode_refuses_a_worker_that_cannot_see_the_workspace(make_ws):
    from ascendpipe.engine.worker import run_job

    reply = run_job({"mode": "shared", "root": str(make_ws("elsewhere").root), "run_id": 1, "token": "abc"})
    assert reply["ok"] is False
    assert "cannot see the workspace" in reply["error"] and "remote:" in reply["error"]


@pytest.mark.parametrize("address", ["127.0.0.1:1"])
def test_an_unreachable_cluster_is_one_clear_line(make_ws, address):
    pytest.importorskip("ray", reason="needs ray")
    import subprocess
    import sys

    ws = make_ws("ws")
    ws.pipeline(KILLABLE)
    ws.write("slow.py", SLOW_PY)
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--executor", "ray", "--address", address],
                          cwd=ws.root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"ascendpipe: error: cannot start or reach the Ray cluster at {address}")


def test_built_in_kinds_run_on_workers_from_a_folder_remote(make_ws, ray_local, tmp_path):
    local = _matrix_ws(make_ws, "local")
    run = local.build(stages=["convert@force_fp16-high_performance", "convert@force_fp32-high_performance"])
    on_ray = local.clone("ray")
    (on_ray.root / ".ascendpipe/config.json").write_text('{"remote": "%s"}' % (tmp_path / "folder-remote"))
    run_ray = on_ray.build(stages=["convert@force_fp16-high_performance", "convert@force_fp32-high_performance"], executor="ray")
    assert set(states(run_ray).values()) == {"ran"}
    # the same bytes: outputs record workspace paths relative to the workspace, so neither the
    # clone's folder nor the worker's scratch folder shows in them (convert.json included)
    ours, theirs = on_ray.files(), local.files()
    assert ours == theirs and len(ours) >= 6 and any(k.endswith("convert.json") for k in ours)
    assert {n: s["outputs"] for n, s in run_ray["stages"].items()} == {n: s["outputs"] for n, s in run["stages"].items()}
    assert run_ray["stages"]["convert@force_fp32-high_performance"]["metrics"] == run["stages"]["convert@force_fp32-high_performance"]["metrics"]
    assert (tmp_path / "folder-remote/runs").is_dir()


def test_a_corrupted_input_in_the_remote_is_uploaded_again_never_used(make_ws, ray_local, tmp_path):
    from ascendpipe.store.hashing import hash_file

    folder = tmp_path / "folder-remote"
    ws = make_ws("ws")
    ws.pipeline(PIPELINE.replace("REMOTE", str(folder)))
    ws.write("input.txt", "some input\n")
    first = ws.build(executor="ray")
    assert set(states(first).values()) == {"ran"}
    digest = hash_file(str(ws.root / "step.py"))
    obj = folder / "objects" / digest[:2] / digest[2:]
    assert obj.read_bytes() == (ws.root / "step.py").read_bytes()
    obj.write_bytes(b"print('tampered')\n")
    ws.ran()
    # the workers' own cache holds a good copy from the first build: drop it, as on a new host
    import shutil

    shutil.rmtree(os.path.join(os.environ["ASCENDPIPE_WORKER_CACHE"], "objects"))
    run = ws.build(executor="ray", force=True, stages=["prepare"])
    assert states(run) == {"prepare": "ran"}
    assert ws.ran() == ["prepare"]  # the real step.py ran (the tampered one writes no counter line)
    assert obj.read_bytes() == (ws.root / "step.py").read_bytes()
    assert run["stages"]["prepare"]["outputs"] == first["stages"]["prepare"]["outputs"]


LOST_NODE = """\
import io, os, sys, threading, time
import ray
from ray.cluster_utils import Cluster
import ascendpipe

retries = int(sys.argv[1])
small = {"object_store_memory": 100 * 1024 * 1024}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **small})
node = cluster.add_node(num_cpus=1, resources={"doomed": 1}, **small)
ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
box = {}
thread = threading.Thread(target=lambda: box.update(run=ascendpipe.build(
    "pipeline.yaml", executor="ray", retries=retries, quiet=True, stream=io.StringIO())))
thread.start()
deadline = time.time() + 120
while not os.path.exists("attempt.flag"):
    assert time.time() < deadline and thread.is_alive()
    time.sleep(0.05)
cluster.remove_node(node)  # the node running the stage is lost
if retries:
    cluster.add_node(num_cpus=1, resources={"doomed": 1}, **small)  # and another one joins
thread.join(120)
stage = box["run"]["stages"]["slow"]
print("RESULT", stage["state"], stage.get("error"))
ray.shutdown()
cluster.shutdown()
"""


@pytest.mark.parametrize("retries", [1, 0])
def test_a_lost_node_is_survived(make_ws, retries):
    """A two-node cluster on this machine (ray.cluster_utils); its own process, as one process
    holds one Ray connection."""
    pytest.importorskip("ray", reason="needs ray (pip install -e '.[ray]' in the clone; .ci/run does)")
    import subprocess
    import sys

    ws = make_ws("ws")
    ws.pipeline(KILLABLE.replace("outs: [data/slow.txt]", "outs: [data/slow.txt]\n    resources: {doomed: 1}"))
    ws.write("slow.py", SLOW_PY)
    ws.write("lost_node.py", LOST_NODE)
    proc = subprocess.run([sys.executable, "lost_node.py", str(retries)], cwd=ws.root, capture_output=True, text=True, timeout=400)
    result = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert result, proc.stdout[-2000:] + proc.stderr[-3000:]
    status = ascendpipe.status(str(ws.root / "pipeline.yaml"))
    if retries:
        assert result[0] == "RESULT ran None"
        assert (ws.root / "data/slow.txt").read_text() == "partial complete"
        assert status["stages"]["slow"]["state"] == "fresh"
    else:
        assert result[0].startswith("RESULT failed its Ray worker was lost 1 time (NodeDiedError")
        assert status["stages"]["slow"] == {"state": "stale", "reasons": ["never built"]}
