"""The remote cache on a real S3 server (moto on 127.0.0.1): push, a fresh clone that restores
everything without running, pull, corrupted and missing remote objects, an unreachable remote."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

import ascendpipe
from tests.scale.conftest import states

PIPELINE = """\
remote: REMOTE
stages:
  prepare:
    kind: run
    cmd: python3 step.py COUNTER data/raw/ input.txt
    deps: [step.py, input.txt]
    outs: [data/raw]
    params: {n: 16}
  train:
    kind: run
    cmd: python3 step.py COUNTER data/model-{{ params.lr }}.txt data/raw/a.txt
    deps: [step.py, data/raw]
    outs: ["data/model-{{ params.lr }}.txt"]
    matrix:
      lr: [0.1, 0.01]
  report:
    kind: run
    cmd: python3 step.py COUNTER data/report.txt data/model-0.1.txt data/model-0.01.txt
    deps: [step.py, data/model-0.1.txt, data/model-0.01.txt]
    outs: [data/report.txt]
"""
ALL = ["prepare", "report", "train@0.01", "train@0.1"]


def _pipeline(ws, url):
    ws.pipeline(PIPELINE.replace("REMOTE", url))
    ws.write("input.txt", "some input\n")


def _data(ws):
    return ws.files("data")


def test_push_then_fresh_clone_builds_with_nothing_running(make_ws, bucket):
    a = make_ws("a")
    _pipeline(a, bucket)
    run = a.build()
    assert states(run) == dict.fromkeys(ALL, "ran")
    assert a.ran() == ALL
    pushed = ascendpipe.push(str(a.root / "pipeline.yaml"))
    assert {n: s["state"] for n, s in pushed["stages"].items()} == dict.fromkeys(ALL, "pushed")
    # prepare's folder: manifest + 2 files; three single files
    assert pushed["objects_uploaded"] == 3 + 3
    again = ascendpipe.push(str(a.root / "pipeline.yaml"))
    assert again["objects_uploaded"] == 0

    b = a.clone("b")
    run_b = b.build()
    assert states(run_b) == dict.fromkeys(ALL, "restored")
    assert b.ran() == []
    assert _data(b) == _data(a)
    # the clone's records are whole: metrics, keys, outputs as in the original
    assert {n: s["outputs"] for n, s in run_b["stages"].items()} == {n: s["outputs"] for n, s in run["stages"].items()}
    assert states(b.build()) == dict.fromkeys(ALL, "fresh")


def test_pull_restores_into_a_fresh_clone(make_ws, bucket):
    a = make_ws("a")
    _pipeline(a, bucket)
    a.build()
    a.ran()
    ascendpipe.push(str(a.root / "pipeline.yaml"), ["train@0.1"])  # and what it needs: prepare
    b = a.clone("b")
    run = ascendpipe.pull(str(b.root / "pipeline.yaml"))
    got = states(run)
    assert got["prepare"] == "restored" and got["train@0.1"] == "restored"
    assert got["train@0.01"] == "failed"  # never pushed: reported, never run
    assert "not in the local or remote cache" in run["stages"]["train@0.01"]["error"]
    assert got["report"] == "skipped"
    assert b.ran() == []
    assert (b.root / "data/model-0.1.txt").read_bytes() == (a.root / "data/model-0.1.txt").read_bytes()
    # what pull could not restore is simply built next time
    run = b.build()
    assert states(run) == {"prepare": "fresh", "train@0.1": "fresh", "train@0.01": "ran", "report": "ran"}


def _remote_fs():
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def test_corrupted_remote_object_is_rebuilt_never_used(make_ws, bucket):
    a = make_ws("a")
    _pipeline(a, bucket)
    run = a.build()
    a.ran()
    ascendpipe.push(str(a.root / "pipeline.yaml"))
    digest = run["stages"]["train@0.1"]["outputs"]["data/model-0.1.txt"]
    obj = f"{bucket[len('s3://'):]}/objects/{digest[:2]}/{digest[2:]}"
    fs = _remote_fs()
    fs.pipe_file(obj, b"tampered")

    b = a.clone("b")
    run_b = b.build()
    got = states(run_b)
    assert got["train@0.1"] == "ran"
    assert got["prepare"] == "restored" and got["train@0.01"] == "restored"
    assert b.ran() == ["train@0.1"]
    assert (b.root / "data/model-0.1.txt").read_bytes() == (a.root / "data/model-0.1.txt").read_bytes()
    assert not fs.exists(obj)  # deleted from the remote, so a push replaces it
    assert ascendpipe.push(str(b.root / "pipeline.yaml"))["objects_uploaded"] == 1
    assert fs.cat_file(obj) == (a.root / "data/model-0.1.txt").read_bytes()


def test_missing_remote_object_is_rebuilt(make_ws, bucket):
    a = make_ws("a")
    _pipeline(a, bucket)
    run = a.build()
    a.ran()
    ascendpipe.push(str(a.root / "pipeline.yaml"))
    manifest = run["stages"]["prepare"]["outputs"]["data/raw"]
    fs = _remote_fs()
    entries = json.loads(fs.cat_file(f"{bucket[5:]}/objects/{manifest[:2]}/{manifest[2:]}"))
    one = entries[0]["hash"]
    fs.rm_file(f"{bucket[5:]}/objects/{one[:2]}/{one[2:]}")
    b = a.clone("b")
    run_b = b.build()
    assert states(run_b)["prepare"] == "ran"
    assert states(run_b)["report"] == "restored"  # same inputs again: early cutoff through the remote
    assert _data(b) == _data(a)


def test_credentials_never_reach_the_records(make_ws, bucket):
    a = make_ws("a")
    _pipeline(a, bucket)
    a.build()
    ascendpipe.push(str(a.root / "pipeline.yaml"))
    shown = json.dumps(ascendpipe.show("latest", workspace=str(a.root)))
    db = (a.root / ".ascendpipe/ascendpipe.db").read_bytes()
    for secret in (os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_ACCESS_KEY_ID"]):
        assert secret.encode() not in db and secret not in shown
    fs = _remote_fs()
    for path in fs.find(bucket[5:] + "/runs"):
        assert b"testing" not in fs.cat_file(path)


def test_unreachable_remote_is_one_clear_line(make_ws, s3_server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # a port nothing listens on once closed
    ws = make_ws("a")
    _pipeline(ws, "s3://nobucket/prefix")
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{dead}"}
    proc = subprocess.run(
        [sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml"], cwd=ws.root, env=env,
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "remote cache s3://nobucket/prefix unreachable" in lines[0]
    assert "Traceback" not in proc.stderr
    assert ws.ran() == []  # nothing ran, nothing lost
    # and without the remote it builds
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--no-remote", "-q"],
                          cwd=ws.root, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_a_missing_bucket_is_one_clear_line(make_ws, s3_server):
    ws = make_ws("a")
    _pipeline(ws, "s3://no-such-bucket-here/prefix")
    from ascendpipe.errors import UserError

    with pytest.raises(UserError, match="the bucket does not exist"):
        ws.build()


def test_noop_build_with_a_remote_never_contacts_it(make_ws, bucket):
    ws = make_ws("a")
    _pipeline(ws, bucket)
    ws.build()
    ws.ran()
    # point the remote at a dead endpoint: a no-op build must not notice
    saved = os.environ["AWS_ENDPOINT_URL"]
    os.environ["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    try:
        assert set(states(ws.build()).values()) == {"fresh"}
    finally:
        os.environ["AWS_ENDPOINT_URL"] = saved


def test_workspace_config_overrides_the_pipeline_remote(make_ws, bucket, tmp_path):
    ws = make_ws("a")
    _pipeline(ws, "s3://unused-bucket/x")
    folder = tmp_path / "folder-remote"
    (ws.root / ".ascendpipe/config.json").write_text(json.dumps({"remote": str(folder)}))
    ws.build()
    out = io.StringIO()
    res = ascendpipe.push(str(ws.root / "pipeline.yaml"), stream=out)
    assert res["remote"] == str(folder)
    assert len(list((folder / "runs").rglob("*.json"))) == 4
    b = ws.clone("b")
    (b.root / ".ascendpipe/config.json").write_text(json.dumps({"remote": str(folder)}))
    assert states(b.build()) == dict.fromkeys(ALL, "restored")


COMPARE_PIPELINE = """\
remote: REMOTE
backend: onnxruntime
stages:
  convert:
    kind: convert
    model: model.onnx
    matrix:
      fp32: {precision_mode: force_fp32}
      fp16: {precision_mode: force_fp16}
  compare:
    kind: compare
    golden: model.onnx
    target: convert
    inputs: x.npy
"""


def _compare_workspace(make_ws, url):
    import numpy as np

    from tests import modelzoo

    ws = make_ws("a")
    ws.pipeline(COMPARE_PIPELINE.replace("REMOTE", url))
    modelzoo.l2norm_model(ws.root / "model.onnx")
    np.save(ws.root / "x.npy", modelzoo.l2norm_inputs(0, batch=4)["features"])
    return ws


def _count_golden_dumps(monkeypatch) -> list:
    from ascendpipe.backends.onnxruntime import dump as dumpmod

    calls, real = [], dumpmod.dump_model

    def counting(model, feeds, out_dir, *, fusions, **kw):
        if not fusions:  # a golden dump
            calls.append(str(model))
        return real(model, feeds, out_dir, fusions=fusions, **kw)

    monkeypatch.setattr(dumpmod, "dump_model", counting)
    return calls


def test_the_shared_golden_dump_travels_with_the_compares(make_ws, bucket, monkeypatch):
    from ascendpipe.store.dump_cache import OBJECT_REFS, DumpCache

    a = _compare_workspace(make_ws, bucket)
    first = a.build()
    assert set(states(first).values()) == {"ran"}
    ref = json.loads((a.root / "build" / "compare__fp16" / OBJECT_REFS).read_text())["objects"][0]
    pushed = ascendpipe.push(str(a.root / "pipeline.yaml"))
    assert {s["state"] for s in pushed["stages"].values()} == {"pushed"}
    from ascendpipe.store.remote import RemoteCache

    entry = RemoteCache(bucket).get_entry(pushed["stages"]["compare@fp16"]["key"])
    assert entry["dumps"] == {ref["key"]: ref["digest"]}

    calls = _count_golden_dumps(monkeypatch)
    for clone, restore in (("b", lambda ws: ws.build()), ("c", lambda ws: ascendpipe.pull(str(ws.root / "pipeline.yaml")))):
        ws = a.clone(clone)
        assert set(states(restore(ws)).values()) == {"restored"}
        shared = DumpCache(ws.root / "cache").get(ref["key"])
        assert shared is not None and shared.digest == ref["digest"]  # fetched whole and named under its key
        # a compare that runs again reads the golden from the restored dump: nothing is dumped again
        run = ws.build(["compare@fp16"], force=True)
        assert states(run)["compare@fp16"] == "ran" and calls == []
        assert run["stages"]["compare@fp16"]["metrics"] == first["stages"]["compare@fp16"]["metrics"]
