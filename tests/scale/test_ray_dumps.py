"""The shared golden dump on Ray workers with a remote cache: a compare stage on a worker looks the
golden's dump key up in the remote before dumping, and uploads the dump it made, so the golden is
dumped once across the cluster (each stage's record says whether it dumped: ``golden_dumped_here``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.scale.conftest import states
from tests.scale.test_remote import _compare_workspace

COMPARES = ("compare@fp32", "compare@fp16")


def _forget_worker_cache() -> None:
    """Empty this host's worker cache (safe at any time: content-addressed), as on a new host."""
    root = Path(os.environ["ASCENDPIPE_WORKER_CACHE"])
    for item in root.iterdir():
        shutil.rmtree(item) if item.is_dir() else item.unlink()


def _golden_dumps(run: dict) -> int:
    return sum(sum(run["stages"][name]["info"]["golden_dumped_here"]) for name in COMPARES)


def test_the_golden_is_dumped_once_across_the_cluster_and_restored_by_a_fresh_clone(make_ws, bucket, ray_local):
    from ascendpipe.store.dump_cache import OBJECT_REFS, DumpCache
    from ascendpipe.store.remote import RemoteCache

    _forget_worker_cache()
    a = _compare_workspace(make_ws, bucket)
    first = a.build(executor="ray")
    assert set(states(first).values()) == {"ran"}
    assert _golden_dumps(first) == 1  # two compares of one golden and inputs: one dump
    refs = {json.loads((a.root / "build" / f"compare__{v}" / OBJECT_REFS).read_text())["objects"][0]["digest"]
            for v in ("fp32", "fp16")}
    ref = json.loads((a.root / "build" / "compare__fp16" / OBJECT_REFS).read_text())["objects"][0]
    assert refs == {ref["digest"]}
    # the worker uploaded it whole, under its key; the stages' entries list it
    remote = RemoteCache(bucket)
    assert remote.get_dump(ref["key"]) == ref["digest"]
    for name in COMPARES:
        assert remote.get_entry(first["stages"][name]["key"])["dumps"] == {ref["key"]: ref["digest"]}

    # a fresh clone, on a host whose worker cache never saw it: the compares read it from the remote
    _forget_worker_cache()
    b = a.clone("b")
    again = b.build(executor="ray", force=True)
    assert set(states(again).values()) == {"ran"}
    assert _golden_dumps(again) == 0
    assert DumpCache(os.environ["ASCENDPIPE_WORKER_CACHE"]).get(ref["key"]).digest == ref["digest"]
    for name in COMPARES:
        assert again["stages"][name]["metrics"] == first["stages"][name]["metrics"]

    # and a local build of a third clone restores the compares with the golden they read
    c = a.clone("c")
    assert set(states(c.build()).values()) == {"restored"}
    assert DumpCache(c.root / "cache").get(ref["key"]).digest == ref["digest"]


def test_a_dump_key_out_of_shape_in_the_remote_is_never_used(make_ws, bucket, ray_local):
    from ascendpipe.store.dump_cache import OBJECT_REFS
    from ascendpipe.store.remote import RemoteCache, dump_path

    _forget_worker_cache()
    a = _compare_workspace(make_ws, bucket)
    first = a.build(["compare@fp16"], executor="ray")
    ref = json.loads((a.root / "build" / "compare__fp16" / OBJECT_REFS).read_text())["objects"][0]
    remote = RemoteCache(bucket)
    remote.write_bytes(dump_path(ref["key"]), b"../../../escape.dir\n")  # hostile: never made a path
    assert remote.get_dump(ref["key"]) is None
    _forget_worker_cache()
    again = a.build(["compare@fp16"], executor="ray", force=True)
    assert states(again)["compare@fp16"] == "ran"
    assert sum(again["stages"]["compare@fp16"]["info"]["golden_dumped_here"]) == 1  # dumped anew
    assert remote.get_dump(ref["key"]) == ref["digest"]  # and the ref replaced by a whole one
    assert again["stages"]["compare@fp16"]["metrics"] == first["stages"]["compare@fp16"]["metrics"]


def test_a_golden_pushed_from_a_local_build_is_read_by_ray_workers(make_ws, bucket, ray_local):
    import ascendpipe
    from ascendpipe.store.dump_cache import OBJECT_REFS
    from ascendpipe.store.remote import RemoteCache

    a = _compare_workspace(make_ws, bucket)
    a.build(["compare@fp16"])  # local: uploads nothing
    ref = json.loads((a.root / "build" / "compare__fp16" / OBJECT_REFS).read_text())["objects"][0]
    remote = RemoteCache(bucket)
    assert remote.get_dump(ref["key"]) is None
    ascendpipe.push(str(a.root / "pipeline.yaml"), ["compare@fp16"], stream=__import__("io").StringIO())
    assert remote.get_dump(ref["key"]) == ref["digest"]  # push names the dump under its key too
    _forget_worker_cache()
    b = a.clone("b")
    run = b.build(["compare@fp32"], executor="ray")  # another compare of the same golden and inputs
    assert states(run)["compare@fp32"] == "ran"
    assert run["stages"]["compare@fp32"]["info"]["golden_dumped_here"] == [False]
