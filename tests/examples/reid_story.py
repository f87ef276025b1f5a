"""What the ReID story's tests read from a build: the L2 norm's overflow chain, found from the graph."""

from __future__ import annotations

from pathlib import Path

FP16_MAX = 65504.0


def overflow_chain(model: Path, rows: list[dict]) -> set[str]:
    """Ops whose golden output exceeds fp16's range, and the ops that read one of them (ONNX node names).

    Each row's golden peak (``golden_abs_max``) belongs to the op producing its ``golden_tensor`` (for a
    fused target op, the last of its original ops), read from the exported graph."""
    import onnx

    graph = onnx.load(str(model)).graph
    producer = {out: node.name for node in graph.node for out in node.output}
    over = {producer[row["golden_tensor"]] for row in rows
            if row.get("golden_tensor") in producer and (row["golden_abs_max"] or 0.0) > FP16_MAX}
    readers = {node.name for node in graph.node if {producer.get(i) for i in node.input} & over}
    return over | readers
