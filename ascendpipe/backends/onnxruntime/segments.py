"""Partition of a model's nodes into consecutive segments for a dump with bounded memory (pure logic).

A dump returns every dumped tensor of a run at once, so one run of the whole model holds all its
activations. Cut into segments, each run holds only its own dumped tensors plus the values that
cross into later segments. A cut is legal only where every crossing tensor is one the dump keeps
anyway (``crossable``: dumped, of known size): those are graph outputs in the single run too, so
onnxruntime can fuse nothing across them there, and the segmented run computes the same bits.
``Constant`` nodes are parameters: each segment that reads one carries its own copy (as an
initializer would be), so a Constant never crosses and never blocks a cut.

Works over onnx NodeProto-likes (``op_type``, ``input``, ``output``, ``attribute`` with ``g`` /
``graphs`` for If, Loop and Scan bodies, whose reads of outer-scope names count as reads of the node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

_GRAPH = 5  # onnx.AttributeProto.GRAPH
_GRAPHS = 10  # onnx.AttributeProto.GRAPHS


@dataclass
class Segment:
    """One run: ``nodes`` (indices into the graph's nodes, in order, its Constants first), the
    ``inputs`` it is fed (graph inputs and earlier segments' tensors), the ``initializers`` it
    reads, and the ``outputs`` it returns (its dumped tensors, the tensors later segments read and
    the graph outputs it makes)."""

    nodes: list[int]
    inputs: list[str] = field(default_factory=list)
    initializers: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)  # fed values read by no later segment
    bytes: int = 0  # what its run holds by the estimate the budget was planned with (see plan_segments)


def _subgraphs(node) -> list:
    graphs = []
    for attr in node.attribute:
        if attr.type == _GRAPH:
            graphs.append(attr.g)
        elif attr.type == _GRAPHS:
            graphs.extend(attr.graphs)
    return graphs


def outer_reads(graph) -> set[str]:
    """Names a subgraph reads from enclosing scopes (nested bodies included)."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads.update(n for n in node_reads(node) if n not in defined)
        defined.update(o for o in node.output if o)
    reads.update(o.name for o in graph.output if o.name not in defined)  # an output passed straight through
    return reads


def node_reads(node) -> list[str]:
    """Every name a node reads: its inputs and its bodies' outer-scope names."""
    reads = [n for n in node.input if n]
    for graph in _subgraphs(node):
        reads.extend(sorted(outer_reads(graph) - set(reads)))
    return reads


def plan_segments(nodes: Sequence, sizes: dict[str, int | None], crossable: set[str], budget: int | None, *,
                  graph_inputs: Sequence[str], initializers: dict[str, int], graph_outputs: set[str]) -> list[Segment]:
    """Consecutive segments whose bytes stay within ``budget`` where a legal cut allows: a segment
    holds its dumped tensors (``sizes``: every dumped tensor's estimated bytes, None when unknown,
    counted as the largest known) and the weights it reads (``initializers``: name -> bytes),
    counted twice: the sub-model's bytes and the session's own copy live as long as the session
    (weights referenced from the model file are held once, as mapped pages; the count stays the
    copy's: counting them once took BERT 4x256's dump from 108 segments to 92 for ~5% of its time,
    and raised 2x128's fp16 dump peak by 9 MB).

    A segment grows past the budget when no legal cut lies inside it (one run as a last resort).
    """
    n = len(nodes)
    constant = [node.op_type == "Constant" for node in nodes]
    reads = [node_reads(node) for node in nodes]
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer[out] = i
    last_read: dict[str, int] = {}
    for i, names in enumerate(reads):
        for name in names:
            last_read[name] = i

    # blocked[p]: a cut before node p would carry a tensor that may not cross
    delta = [0] * (n + 2)
    for name, made in producer.items():
        if constant[made] or name in crossable:
            continue
        last = last_read.get(name, made)
        if last > made:
            delta[made + 1] += 1
            delta[last + 1] -= 1
    blocked, running = [False] * (n + 1), 0
    for p in range(n + 1):
        running += delta[p]
        blocked[p] = running > 0

    known = [s for s in sizes.values() if s is not None]
    fallback = max(known) if known else 0
    cost = [0 if constant[i] else sum((fallback if sizes[o] is None else sizes[o]) for o in node.output if o in sizes)
            + 2 * sum(initializers.get(x, 0) for x in set(reads[i])) for i, node in enumerate(nodes)]
    cuts = [0]
    if budget is not None:
        start, total, last_legal, total_at_legal = 0, 0, None, 0
        for i in range(n):
            if i > start and not blocked[i]:
                last_legal, total_at_legal = i, total
            if total + cost[i] > budget and last_legal is not None:
                cuts.append(last_legal)
                start, total, last_legal = last_legal, total - total_at_legal, None
                if i > start and not blocked[i]:
                    last_legal, total_at_legal = i, total
            total += cost[i]
    cuts.append(n)
    spans = _fed_spans([(a, b) for a, b in zip(cuts, cuts[1:]) if b > a], reads, constant, producer, set(graph_inputs))
    segments = _describe(nodes, reads, constant, producer, spans, graph_inputs=graph_inputs,
                         initializers=initializers, graph_outputs=graph_outputs, sizes=sizes)
    for segment, (a, b) in zip(segments, spans):
        segment.bytes = sum(cost[a:b])
    return segments


def _fed_spans(spans: list, reads, constant, producer, feeds: set[str]) -> list:
    """Spans merged so that each is fed something: a segment computing only from weights and
    Constants is folded away whole by onnxruntime, which then refuses a graph with nothing to run."""
    def fed(a, b):
        return any(x in feeds or (x in producer and producer[x] < a and not constant[producer[x]])
                   for i in range(a, b) for x in reads[i])

    merged: list = []
    for a, b in spans:
        if merged and not fed(*merged[-1]):
            a = merged.pop()[0]
        merged.append((a, b))
    if len(merged) > 1 and not fed(*merged[-1]):
        b = merged.pop()[1]
        merged[-1] = (merged[-1][0], b)
    return merged


def _describe(nodes, reads, constant, producer, spans, *, graph_inputs, initializers, graph_outputs, sizes):
    feeds = set(graph_inputs)
    read_by: dict[str, list[int]] = {}  # a non-Constant tensor or graph input -> the segments reading it
    segments = []
    for k, (a, b) in enumerate(spans):
        own = [i for i in range(a, b) if not constant[i]]
        names = []
        for i in own:
            names.extend(reads[i])
        wanted = list(dict.fromkeys(names))
        made_here = {o for i in own for o in nodes[i].output if o}
        consts = sorted({producer[x] for x in wanted if x in producer and constant[producer[x]]})
        inputs = [x for x in wanted
                  if x not in made_here and (x in feeds or (x in producer and not constant[producer[x]]))]
        for x in inputs:
            read_by.setdefault(x, []).append(k)
        segments.append(Segment(nodes=consts + own, inputs=inputs,
                                initializers=[x for x in wanted if x in initializers]))
    for k, (a, b) in enumerate(spans):
        outs = []
        for i in range(a, b):
            if constant[i]:
                continue
            for out in nodes[i].output:
                if out and (out in sizes or out in graph_outputs or any(r > k for r in read_by.get(out, ()))):
                    outs.append(out)
        segments[k].outputs = list(dict.fromkeys(outs))
        segments[k].releases = [x for x in segments[k].inputs if max(read_by[x]) == k]
    return segments
