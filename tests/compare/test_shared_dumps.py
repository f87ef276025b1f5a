"""The golden is dumped once per model and inputs (a shared dump in cache/), dumps are stored compactly,
and what a compare stage keeps is reported: issue 21 item 6."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

import ascendpipe
from ascendpipe.backends.onnxruntime import dump as dumpmod
from ascendpipe.compare.runner import compare_dumps
from ascendpipe.store.dump_cache import OBJECT_REFS, DumpCache
from tests import modelzoo as mz

VARIANTS = {"fp32": {"precision_mode": "force_fp32"}, "fp16": {"precision_mode": "force_fp16"},
            "mixed": {"precision_mode": "allow_mix_precision"}}
PIPELINE = {
    "backend": "onnxruntime",
    "stages": {
        "convert": {"kind": "convert", "model": "model.onnx", "matrix": VARIANTS},
        "compare": {"kind": "compare", "golden": "model.onnx", "target": "convert", "inputs": "data/x.npy"},
        # the golden model and the same samples (4 rows <= max_batch): the same dump as every compare's golden
        "dump_golden": {"kind": "dump", "model": "model.onnx", "inputs": "data/x.npy"},
    },
}
METRIC_KEYS = ("cosine", "max_abs_error", "mean_abs_error", "rmse", "max_rel_error", "mean_rel_error",
               "relative_euclidean", "kl", "exact_cosine", "significant_mean_rel_error", "failed", "overflow")


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    (root / "data").mkdir()
    mz.l2norm_model(root / "model.onnx")
    np.save(root / "data" / "x.npy", mz.l2norm_inputs(0, batch=4)["features"])
    (root / "pipeline.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    monkeypatch.chdir(root)
    return root


def _golden_runs(monkeypatch) -> list:
    """Counts every run of dump_model with fusions off (a golden dump), wherever it is called from."""
    calls = []
    real = dumpmod.dump_model

    def counting(model, feeds, out_dir, *, fusions, **kw):
        if not fusions:
            calls.append(str(model))
        return real(model, feeds, out_dir, fusions=fusions, **kw)

    monkeypatch.setattr(dumpmod, "dump_model", counting)
    return calls


def test_three_variants_and_a_dump_stage_share_one_golden_dump(workspace, monkeypatch):
    calls = _golden_runs(monkeypatch)
    run = ascendpipe.build(str(workspace / "pipeline.yaml"), quiet=True)
    compares = [f"compare@{v}" for v in VARIANTS]
    assert all(run["stages"][name]["state"] == "ran" for name in compares + ["dump_golden"])
    assert len(calls) == 1  # one golden dump for three compares and the dump stage
    cache = DumpCache(workspace / "cache")
    assert len(list((workspace / "cache" / "dumps").glob("[0-9a-f]*"))) == 1
    refs = {json.loads((workspace / "build" / f"compare__{v}" / OBJECT_REFS).read_text())["objects"][0]["digest"]
            for v in VARIANTS}
    assert len(refs) == 1  # every variant names the same shared dump
    for v in VARIANTS:
        folder = workspace / "build" / f"compare__{v}"
        assert not (folder / "golden_dump").exists() and (folder / "target_dump" / "index.json").is_file()
        summary = json.loads((folder / "result.json").read_text())["summary"]["dumps"]
        on_disk = sum(p.stat().st_size for p in (folder / "target_dump").rglob("*") if p.is_file())
        assert summary["bytes_kept"] == on_disk == run["stages"][f"compare@{v}"]["metrics"]["dump_bytes"]
        assert summary["golden_shared"][0]["digest"] in refs and summary["golden_shared_bytes"] > 0
    logs = [(workspace / "build" / f"compare__{v}.log").read_text() for v in VARIANTS]
    assert sum("golden shared in cache/" in text and "dumped by this stage" in text for text in logs) <= 1
    # the dump stage's folder holds the very dump the compares read
    shared = cache.get(json.loads((workspace / "build" / "compare__fp16" / OBJECT_REFS).read_text())["objects"][0]["key"])
    dumped = workspace / "build" / "dump_golden"
    assert {rel: (dumped / rel).read_bytes() for rel in shared.files} == {rel: shared.read_bytes(rel) for rel in shared.files}
    # the fp16 story still reads the same: the L2 norm's fused kernel overflows first
    first = json.loads((workspace / "build" / "compare__fp16" / "result.json").read_text())["first_failure"]
    assert first["op_name"] == "sum" and first["kind"] == "overflow"
    assert json.loads((workspace / "build" / "compare__fp32" / "result.json").read_text())["first_failure"] is None


def test_rm_build_restores_and_gc_keeps_the_shared_golden(workspace, monkeypatch):
    ascendpipe.build(str(workspace / "pipeline.yaml"), quiet=True)
    calls = _golden_runs(monkeypatch)
    shutil.rmtree(workspace / "build")
    run = ascendpipe.build(str(workspace / "pipeline.yaml"), quiet=True)
    assert {s["state"] for s in run["stages"].values()} == {"restored"} and calls == []
    ref = json.loads((workspace / "build" / "compare__fp16" / OBJECT_REFS).read_text())["objects"][0]
    ascendpipe.gc(str(workspace))
    cache = DumpCache(workspace / "cache")
    assert cache.get(ref["key"]) is not None  # recorded outputs name it: gc keeps every file of it
    # a compare that runs again (forced) reads the cached golden instead of dumping it
    run = ascendpipe.build(str(workspace / "pipeline.yaml"), ["compare@fp16"], force=True, quiet=True)
    assert run["stages"]["compare@fp16"]["state"] == "ran" and calls == []
    # a shared dump no record names is garbage
    orphan = workspace / "orphan"
    orphan.mkdir()
    (orphan / "index.json").write_text("{}")
    cache.put("0" * 64, orphan)
    ascendpipe.gc(str(workspace))
    assert cache.get("0" * 64) is None and cache.get(ref["key"]) is not None


def test_concurrent_stages_make_one_shared_dump(tmp_path):
    """Two threads that want the same key: one makes it, the other waits for the lock and reads it."""
    import threading

    cache = DumpCache(tmp_path / "cache")
    made, started = [], threading.Event()

    def make(folder):
        started.set()
        folder.mkdir(parents=True)
        (folder / "index.json").write_text(json.dumps({"n": len(made)}))
        made.append(folder)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_make("k" * 64, make))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and sum(ran for _, ran in results) == 1
    assert len({d.digest for d, _ in results}) == 1
    assert not list((tmp_path / "cache" / "dumps").glob(".tmp-*"))  # the scratch folder is gone


def test_corrupted_shared_object_is_never_used(tmp_path):
    from ascendpipe.store.objects import CorruptObject

    folder = tmp_path / "d"
    (folder / "tensors").mkdir(parents=True)
    np.save(folder / "tensors" / "00000.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    (folder / "index.json").write_text("{}")
    cache = DumpCache(tmp_path / "cache")
    stored = cache.put("a" * 64, folder)
    np.testing.assert_array_equal(stored.load_tensor("tensors/00000.npy"), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert Path(stored) == tmp_path / "cache" / "dumps" / ("a" * 64)  # a name for messages, not read from
    path = cache.objects.path_of(stored.files["tensors/00000.npy"])
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 1
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptObject):
        stored.load_tensor("tensors/00000.npy")
    assert cache.get("a" * 64) is None  # the bad object was removed: the next user dumps again


def _fp32_dump(monkeypatch, model, feeds, out):
    """The same dump with every tensor stored as float32 (as before compaction)."""
    with monkeypatch.context() as m:
        m.setattr(dumpmod, "compact", lambda value, item: value.astype(np.float32) if value.dtype == np.float16 else value)
        return dumpmod.dump_model(model, feeds, out, fusions=True).parent


@pytest.mark.parametrize("make, inputs, mode", [
    (mz.conv_bn_relu_model, mz.conv_bn_relu_inputs, "force_fp16"),
    (mz.conv_bn_relu_model, mz.conv_bn_relu_inputs, "allow_mix_precision"),
    (mz.l2norm_model, mz.l2norm_inputs, "force_fp16"),
])
def test_compact_fp16_dump_round_trips_exactly_and_compares_the_same(tmp_path, monkeypatch, make, inputs, mode):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    model = make(tmp_path / "m.onnx")
    convert_model(model, tmp_path / "conv", ConvertSettings(precision_mode=mode))
    feeds = inputs()
    golden = dumpmod.dump_model(model, feeds, tmp_path / "g", fusions=False).parent
    compact = dumpmod.dump_model(tmp_path / "conv" / "model.onnx", feeds, tmp_path / "c", fusions=True).parent
    wide = _fp32_dump(monkeypatch, tmp_path / "conv" / "model.onnx", feeds, tmp_path / "w")
    small, big = json.loads((compact / "index.json").read_text()), json.loads((wide / "index.json").read_text())
    plan = json.loads((tmp_path / "conv" / "precision_plan.json").read_text())["nodes"]
    assert [t["name"] for t in small["tensors"]] == [t["name"] for t in big["tensors"]]
    halves = 0
    for a, b in zip(small["tensors"], big["tensors"]):
        x, y = np.load(compact / a["file"]), np.load(wide / b["file"])
        assert y.dtype != np.float16
        if x.dtype == np.float16:
            halves += 1
            assert np.array_equal(x.astype(np.float32), y, equal_nan=True)  # bit for bit the values
            assert np.array_equal(np.signbit(x), np.signbit(y))
        else:
            assert np.array_equal(x, y, equal_nan=True)
        # a float32 tensor of an fp16 op is stored as fp16 (every such tensor of these models is exact)
        op = plan.get(a["op_name"], {})
        if a["op_type"] != "Input" and op.get("dtype") == "float16":
            assert x.dtype == np.float16, a["name"]
    assert halves >= 2
    assert sum(p.stat().st_size for p in compact.rglob("*.npy")) < sum(p.stat().st_size for p in wide.rglob("*.npy"))
    one, two = compare_dumps(golden, compact), compare_dumps(golden, wide)
    assert [r["tensor"] for r in one["rows"]] == [r["tensor"] for r in two["rows"]]
    for r1, r2 in zip(one["rows"], two["rows"]):
        same = lambda a, b: a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
        assert all(same(r1[k], r2[k]) for k in METRIC_KEYS), (r1["tensor"], {k: (r1[k], r2[k]) for k in METRIC_KEYS})
    assert one["first_failure"] == two["first_failure"] and one["summary"] == two["summary"]


def test_compact_keeps_float32_where_fp16_would_lose_a_bit():
    item = dumpmod.Planned(name="t", op_name="relu", op_type="Relu", topo_index=0, device_fp16=True)
    exact = np.array([0.5, -0.0, np.inf, np.nan, 65504.0], np.float32)
    assert dumpmod.compact(exact, item).dtype == np.float16
    assert np.signbit(dumpmod.compact(exact, item)[1])
    for value in (0.1, 70000.0, 1e-8):  # not an fp16 value, beyond its range, below its subnormals
        assert dumpmod.compact(np.array([0.5, value], np.float32), item).dtype == np.float32
    plain = dumpmod.Planned(name="t", op_name="relu", op_type="Relu", topo_index=0)
    assert dumpmod.compact(exact, plain).dtype == np.float32  # an fp32 op stays fp32 even when exact


def test_index_holds_no_path_and_is_the_same_from_any_folder(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    model = mz.conv_bn_relu_model(tmp_path / "a" / "m.onnx")
    shutil.copy(model, tmp_path / "b" / "m.onnx")
    feeds = mz.conv_bn_relu_inputs()
    one = dumpmod.dump_model(tmp_path / "a" / "m.onnx", feeds, tmp_path / "d1", fusions=False)
    two = dumpmod.dump_model(tmp_path / "b" / "m.onnx", feeds, tmp_path / "x" / "d2", fusions=False,
                             memory_budget_bytes=64)  # one run per tensor: the same bytes
    assert one.read_bytes() == two.read_bytes()
    text = one.read_text()
    assert str(tmp_path) not in text and json.loads(text)["model"] == "m.onnx"
    graph = json.loads(text)["graph"]
    assert graph["outputs"] == ["logits"] and graph["output_index"]["logits"] == 0


def test_dump_keep_failing_and_first_k(tmp_path):
    import io

    from ascendpipe.stages.base import StageContext
    from ascendpipe.stages.compare import CompareKind

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    model = mz.epsilon_model(tmp_path / "m.onnx")  # its first two ops pass, the variance and after fail
    convert_model(model, tmp_path / "conv", ConvertSettings(precision_mode="force_fp16"))
    np.savez(tmp_path / "in.npz", **mz.epsilon_inputs())
    metrics, folders = {}, {}
    for keep in ({"dump_keep": "all"}, {"dump_keep": "failing"}, {"dump_keep": "all", "dump_keep_max": 1}):
        name = "-".join(f"{k}={v}" for k, v in keep.items()) or "all"
        out = tmp_path / name
        out.mkdir()
        log = io.StringIO()
        ctx = StageContext(name="compare", kind="compare", workspace=tmp_path / "ws", out_dir=out, final_out_dir=out,
                           params=keep, inputs={"golden": model, "target": tmp_path / "conv", "inputs": tmp_path / "in.npz"},
                           upstream={}, backend="onnxruntime", log=log)
        result = CompareKind().run(ctx)
        metrics[name], folders[name] = result.metrics, out
        assert f"dumps kept in this stage: {result.metrics['dump_bytes'] / 1e6:.1f} MB" in log.getvalue()
    rows = json.loads((folders["dump_keep=all"] / "result.json").read_text())["rows"]
    failing = {r["tensor"] for r in rows if r["failed"]}
    assert failing and len(failing) < len([r for r in rows if r["side"] != "golden_only"])
    index = json.loads((folders["dump_keep=failing"] / "target_dump" / "index.json").read_text())
    kept = {t["name"] for t in index["tensors"] if t["op_type"] != "Input"}
    assert kept == failing & kept and kept and index["kept"]["rule"] == "failing"
    assert len(list((folders["dump_keep=failing"] / "target_dump" / "tensors").iterdir())) == len(index["tensors"])
    first = json.loads((folders["dump_keep=all-dump_keep_max=1"] / "target_dump" / "index.json").read_text())
    assert len([t for t in first["tensors"] if t["op_type"] != "Input"]) == 1
    assert metrics["dump_keep=failing"]["dump_bytes"] < metrics["dump_keep=all"]["dump_bytes"]
    # the results themselves do not depend on what is kept
    same = [json.loads((f / "result.json").read_text()) for f in folders.values()]
    assert all(doc["rows"] == same[0]["rows"] and doc["first_failure"] == same[0]["first_failure"] for doc in same)


def test_parallel_build_dumps_the_golden_once(workspace):
    """``-j 2``: stages that want the same golden at once; one makes it, the others wait and read it."""
    run = ascendpipe.build(str(workspace / "pipeline.yaml"), jobs=2, quiet=True)
    assert all(s["state"] == "ran" for s in run["stages"].values())
    assert len(list((workspace / "cache" / "dumps").glob("[0-9a-f]*"))) == 1
    logs = [(workspace / "build" / f"compare__{v}.log").read_text() for v in VARIANTS]
    made = sum("dumped by this stage" in text for text in logs)
    made += "dump: made" in (workspace / "build" / "dump_golden.log").read_text()
    assert made == 1
    results = {v: json.loads((workspace / "build" / f"compare__{v}" / "result.json").read_text()) for v in VARIANTS}
    assert results["fp16"]["first_failure"]["op_name"] == "sum" and results["fp32"]["first_failure"] is None


def test_link_names_only_a_whole_dump_and_remote_names_never_become_paths(tmp_path):
    from ascendpipe.engine.remote_sync import _restore_dumps

    folder = tmp_path / "made"
    folder.mkdir()
    (folder / "index.json").write_text('{"format": "x"}')
    (folder / "t.npy").write_bytes(b"\x93NUMPY")
    source = DumpCache(tmp_path / "a")
    made = source.put("1" * 64, folder)
    target = DumpCache(tmp_path / "b")
    assert target.link("2" * 64, made.digest) is False  # its objects are not in b's store: no key left
    assert not (tmp_path / "b" / "dumps" / ("2" * 64)).exists()

    class Remote:  # hands out a's objects, as a remote cache's fetch_object would
        def __init__(self):
            self.fetched = []

        def fetch_object(self, objects, digest):
            self.fetched.append(digest)
            for e in source.objects.manifest(digest) if digest.endswith(".dir") else []:
                Path(objects.path_of(e["hash"])).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source.objects.path_of(e["hash"]), objects.path_of(e["hash"]))
            Path(objects.path_of(digest)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source.objects.path_of(digest), objects.path_of(digest))
            return 1

    remote = Remote()
    hostile = {"../../escape": made.digest, "3" * 64: "../../x.dir", "4" * 64: made.digest}
    _restore_dumps(remote, target.objects, tmp_path / "b", hostile)
    assert remote.fetched == [made.digest]  # only the well-formed pair was fetched
    linked = target.get("4" * 64)
    assert linked is not None and linked.read_bytes("index.json") == b'{"format": "x"}'
    assert sorted(p.name for p in (tmp_path / "b" / "dumps").iterdir()) == ["4" * 64]
    assert not (tmp_path / "escape").exists()


def test_the_default_keeps_what_a_rerun_of_the_first_failure_needs(tmp_path):
    """dump_keep's default (issue 43): the failing rows' tensors and those feeding the first failure stay;
    the dumps line says how to keep all."""
    import io

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings
    from ascendpipe.stages.base import StageContext
    from ascendpipe.stages.compare import CompareKind

    model = mz.epsilon_model(tmp_path / "m.onnx")
    convert_model(model, tmp_path / "conv", ConvertSettings(precision_mode="force_fp16"))
    np.savez(tmp_path / "in.npz", **mz.epsilon_inputs())
    out = tmp_path / "out"
    out.mkdir()
    log = io.StringIO()
    ctx = StageContext(name="compare", kind="compare", workspace=tmp_path / "ws", out_dir=out, final_out_dir=out,
                       params={}, inputs={"golden": model, "target": tmp_path / "conv", "inputs": tmp_path / "in.npz"},
                       upstream={}, backend="onnxruntime", log=log)
    CompareKind().run(ctx)
    doc = json.loads((out / "result.json").read_text())
    rows, first = doc["rows"], doc["first_failure"]
    import onnx

    graph = onnx.load(str(model)).graph
    ops = set(rows[first["index"]]["golden_ops"])  # a fused kernel's ops: its inputs are what it reads from outside
    nodes = [n for n in graph.node if n.name in ops]
    inside = {o for n in nodes for o in n.output}
    index = json.loads((out / "target_dump" / "index.json").read_text())
    kept = {t["name"] for t in index["tensors"] if t["op_type"] != "Input"}
    inputs = ({i for n in nodes for i in n.input} - inside - {i.name for i in graph.initializer}
              - {i.name for i in graph.input})
    failing = {r["tensor"] for r in rows if r["failed"] and r["side"] != "golden_only"}
    passing = {r["tensor"] for r in rows if not r["failed"] and r["side"] == "both"}
    assert inputs and inputs <= kept and failing <= kept  # the first failure's inputs, to run its op again
    assert inputs & passing  # ... a passing op's output among them, which `failing` would have dropped
    assert passing - inputs and not (passing - inputs) & kept  # the rest of the passing ops' tensors are gone
    assert index["kept"]["rule"] == "rerun"
    assert ("tensors (the failing ops' and those feeding the first failure; params.dump_keep: all keeps every tensor)"
            in log.getvalue())
