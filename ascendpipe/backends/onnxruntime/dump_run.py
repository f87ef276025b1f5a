"""Running a dump's model, whole or segment by segment, each tensor handed to a writer thread as it
comes (split from ``dump``, which reads and plans the model, writes each tensor and the index)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

from ascendpipe.backends.onnxruntime.dump_write import Planned, planned_bytes


class _Runner:
    """Runs the model (whole, or segment by segment) and writes each dumped tensor as it comes.

    Writing (page cache copies) and the stats passes release the GIL: two writer threads overlap
    them. A segment's tensors are written before the next segment runs: overlapping the writes with
    the next run measured no faster (onnxruntime's threads already use every core) and holds two
    segments' tensors instead of one. Another dump made at the same time (``gate``, see
    ``memory_gate``) does fill those gaps: each run holds its estimated bytes in the shared gate
    until its tensors are written, and its session takes one thread while the other's run is at work.
    """

    def __init__(self, plan: list[Planned], feeds: dict, out_dir: Path, entries: list, *, first_position: int,
                 fusions: bool, runtime_dir: Path, weights_dir: Path | None, log, write, gate=None):
        self.plan, self.feeds, self.out_dir, self.entries = plan, feeds, out_dir, entries
        self.position = {p.name: first_position + i for i, p in enumerate(plan)}
        self.planned = {p.name: p for p in plan}
        self.fusions, self.runtime_dir, self.weights_dir, self.log = fusions, runtime_dir, weights_dir, log
        self.write = write  # (Planned, value, out_dir, position) -> its index entry, on a writer thread
        self.session_seconds, self.model_bytes = 0.0, 0
        self.gate = gate  # a memory_gate.MemoryGate shared with a dump made at the same time, or None
        self.alone = False  # the whole model's run waits until nothing else is held (``ALONE_WEIGHT_BYTES``)

    def _hold(self, nbytes: int):
        return nullcontext() if self.gate is None else self.gate.hold(nbytes)

    def _run(self, model_bytes: bytes, names: list[str], feeds: dict) -> list:
        import time

        from ascendpipe.backends.onnxruntime.session import make_session

        # Fusions off for a golden (ORT_DISABLE_ALL): measured one-shot (session + first run, CPU time) on
        # a ResNet-18 at batch 8, ORT_ENABLE_ALL's faster convolutions are paid back by its longer session
        # set-up (0.94 s vs 0.91 s, under load), so the golden keeps the plain kernels and its values.
        started, self.model_bytes = time.perf_counter(), len(model_bytes)
        shared = self.gate is not None and self.gate.crowded()
        session = make_session(model_bytes, fusions=self.fusions, runtime_dir=self.runtime_dir, shared_arena=True,
                               weights_dir=self.weights_dir, threads=1 if shared else None)
        self.session_seconds += time.perf_counter() - started
        del model_bytes
        from ascendpipe.backends.onnxruntime.session import checked_run

        return checked_run(session.run, names, feeds)

    def _whole_bytes(self) -> int:
        """What one run of the whole model holds: its tensors' estimate; with none, more than any gate holds."""
        return planned_bytes(self.plan) if any(p.size is not None for p in self.plan) else _ALONE

    def _submit(self, pool, names: list[str], values: list) -> list:
        values.reverse()  # pop() from the end hands them out in order, each freed once written
        jobs = []
        for name in names:
            value = values.pop()
            if name in self.position:
                position = self.position[name]
                jobs.append((position, pool.submit(self.write, self.planned[name], value, self.out_dir, position)))
        return jobs

    def _collect(self, jobs: list) -> None:
        for position, job in jobs:
            self.entries[position] = job.result()

    def whole(self, marked_model: bytes) -> None:
        """One run of the whole model with every dumped tensor marked."""
        names = [p.name for p in self.plan]
        with self._hold(_ALONE if self.alone else self._whole_bytes()):
            values = self._run(marked_model, names, self.feeds)
            del marked_model
            with ThreadPoolExecutor(max_workers=2) as pool:
                self._collect(self._submit(pool, names, values))
            del values
        _release_memory()
        if self.log is not None:
            self.log.write(f"dump: 1 run: {len(names)} tensors\n")

    def segments(self, builder: "_SegmentBuilder", segments: list) -> None:
        """The segments in order, each fed the graph inputs and earlier segments' tensors it reads;
        a crossing value is kept only until its last reader has run."""
        from ascendpipe import ticker

        carried: dict[str, object] = {}
        later = {name for seg in segments for name in seg.inputs}
        dumped = 0
        freed = 0  # bytes the runs since the last release held (outputs, sub-model weights x 2)
        with ThreadPoolExecutor(max_workers=2) as pool:
            for number, seg in enumerate(segments, start=1):
                with self._hold(seg.bytes):
                    feeds = {n: self.feeds[n] if n in self.feeds else carried[n] for n in seg.inputs}
                    values = self._run(builder.build(seg, feeds), seg.outputs, feeds)
                    del feeds
                    for name in seg.releases:
                        carried.pop(name, None)
                    for name, value in zip(seg.outputs, values):
                        if name in later:
                            carried[name] = value
                    freed += 2 * self.model_bytes + sum(getattr(v, "nbytes", 0) for v in values)
                    self._collect(self._submit(pool, seg.outputs, values))
                    del values
                if freed >= RELEASE_AFTER_BYTES:  # see _release_memory
                    _release_memory()
                    freed = 0
                tensors = sum(1 for n in seg.outputs if n in self.position)
                dumped += tensors
                ticker.report(dumped, len(self.plan), "tensors dumped")
                if self.log is not None:
                    self.log.write(f"dump: segment {number}/{len(segments)}: {len(seg.nodes)} nodes, "
                                   f"{tensors} tensors\n")
        _release_memory()


_ALONE = 1 << 62  # more than any gate's capacity: a run holding it waits until nothing else is held
# A whole-model run whose weights are this big runs alone: its session holds them (packed by
# onnxruntime, or mapped from the file and touched), and two such runs at once would hold two models'
# weights (a 2.4 GB model's compare: 4.8 GB at once, 2.6 GB one after the other)
ALONE_WEIGHT_BYTES = 1 << 30


def _release_memory() -> None:
    """Hand what the dump's runs freed back to the OS once they are all done: the shared arena's
    free memory (the tensors, see ``session.use_shared_arena``) and glibc's heap (sessions and
    sub-models). Not after every segment: the next segment would fault the same pages in again (the
    430-node detector's golden dump: 0.94 s and 147 MB of faults with a heap trim per segment, 0.78 s
    and 63 MB without; the same peak RSS); but after each ``RELEASE_AFTER_BYTES`` the runs held, else
    what the arena and heap keep grows with the model (BERT-base, 2 layers x seq 128, force_fp16
    dump: 285 MB peak RSS without, 215 MB releasing after every segment)."""
    import ctypes
    import ctypes.util

    from ascendpipe.backends.onnxruntime.session import shrink_shared_arena

    shrink_shared_arena()

    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc: nothing to do
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None
RELEASE_AFTER_BYTES = 64 << 20


class _SegmentBuilder:
    """Serialised sub-models of one model: a segment's nodes, the initializers they read (sliced
    from the model's bytes, see ``wire``), its inputs typed as the values it is fed."""

    def __init__(self, model, model_bytes: bytes):
        import onnx

        from ascendpipe.onnxwire import initializer_spans

        graph = model.graph
        self.bytes, self.spans = memoryview(model_bytes), initializer_spans(model_bytes)
        self.name, self.nodes = graph.name, [onnx.NodeProto() for _ in graph.node]
        for copy, node in zip(self.nodes, graph.node):  # copies: the parsed model and its weights go
            copy.CopyFrom(node)
        self.declared = {i.name: _copy(i) for i in graph.input}
        self.outputs = {o.name: _copy(o) for o in graph.output}
        self.value_info = {v.name: _copy(v) for v in graph.value_info}
        header = onnx.ModelProto(ir_version=model.ir_version)
        header.opset_import.extend(model.opset_import)
        header.functions.extend(model.functions)
        self.header = header.SerializeToString()

    def build(self, seg, feeds: dict) -> bytes:
        import onnx
        from onnx import helper

        from ascendpipe.onnxwire import join_model

        sub = onnx.GraphProto(name=self.name)
        sub.node.extend(self.nodes[i] for i in seg.nodes)
        for name in seg.inputs:
            if name in self.declared:
                sub.input.append(self.declared[name])
            else:
                value = feeds[name]
                sub.input.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
        # an initializer declared as an input stays overridable, as in the whole model (not folded)
        sub.input.extend(self.declared[n] for n in seg.initializers if n in self.declared)
        sub.output.extend(self.outputs.get(n) or onnx.ValueInfoProto(name=n) for n in seg.outputs)
        # the shapes the whole model states for tensors made inside the segment, as in one run
        inner = {o for i in seg.nodes for o in self.nodes[i].output} - set(seg.outputs)
        sub.value_info.extend(v for name, v in self.value_info.items() if name in inner)
        tensors = [self.bytes[start:end] for start, end in (self.spans[n] for n in seg.initializers)]
        return join_model(self.header, sub.SerializeToString(), tensors)


def _copy(message):
    copy = type(message)()
    copy.CopyFrom(message)
    return copy
