"""Decoding the common exported YOLO heads into candidate boxes (pure numpy, float64).

Every decoder returns ``(boxes, scores)``: boxes ``(B, N, 4)`` as ``x1, y1, x2, y2`` in the model
input's pixels, and class scores ``(B, N, C)`` in [0, 1] (objectness already multiplied in).

- ``yolov8``: YOLOv8/v11 as ultralytics exports it: one output ``(B, 4+C, N)`` (or ``(B, N, 4+C)``)
  holding ``cx, cy, w, h`` in pixels and sigmoid class scores.
- ``yolov8_dfl``: the raw anchor-free head: ``(B, 4*reg_max + C, N)`` (or transposed): per side of
  the box ``reg_max`` bin logits (distribution focal loss: softmax, then the expected bin) giving
  the distances left, top, right, bottom from the anchor point in strides, and class logits
  (sigmoid). Anchor points are the cell centres ``(x + 0.5, y + 0.5)`` of each stride's grid, row by
  row, stride by stride (ultralytics' ``make_anchors``).
- ``yolov5``: YOLOv5 as exported: ``(B, N, 5+C)`` (or transposed): ``cx, cy, w, h`` in pixels,
  objectness and class probabilities; the score is objectness x class probability.
- ``yolov5_raw``: the raw anchor head: one output per stride, ``(B, A*(5+C), H, W)`` or
  ``(B, A, H, W, 5+C)``, all logits: ``xy = (2 sigmoid - 0.5 + cell) * stride``,
  ``wh = (2 sigmoid)^2 * anchor`` (YOLOv5's ``Detect``).
- ``yolox``: the grid-relative head YOLOX exports: ``(B, N, 5+C)`` of raw ``dx, dy, log w, log h`` per
  grid cell, objectness and class scores (sigmoid applied): ``xy = (d + cell) * stride``,
  ``wh = exp(log wh) * stride`` (YOLOX's ``demo_postprocess``); needs the input size for its grid.

Layout: ``auto`` takes the axis of size ``4+C`` (``5+C``, ``4*reg_max+C``) when ``num_classes`` is
given, else the smaller of the last two axes as the channels; equal sizes are refused.
"""

from __future__ import annotations

import numpy as np

from ascendpipe.errors import UserError

# YOLOv5's default anchors (pixels) for strides 8, 16, 32 (models/yolov5s.yaml).
YOLOV5_ANCHORS = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]
LAYOUTS = ("auto", "channels_first", "channels_last")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def channels_last(output, layout: str = "auto", channels: int | None = None, what: str = "output") -> np.ndarray:
    """``(B, N, K)`` from a ``(B, K, N)`` or ``(B, N, K)`` head output."""
    arr = np.asarray(output, dtype=np.float64)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise UserError(f"{what}: expected a (batch, channels, boxes) or (batch, boxes, channels) array, "
                        f"got shape {list(arr.shape)}")
    if layout == "channels_first":
        return arr.transpose(0, 2, 1)
    if layout == "channels_last":
        return arr
    if layout != "auto":
        raise UserError(f"{what}: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    a, b = arr.shape[1:]
    if channels is not None:
        if a == channels and b != channels:
            return arr.transpose(0, 2, 1)
        if b == channels:
            return arr
        raise UserError(f"{what}: shape {list(arr.shape)} has no axis of {channels} channels "
                        "(check num_classes and the head)")
    if a == b:
        raise UserError(f"{what}: shape {list(arr.shape)} is square, so the layout is ambiguous; "
                        "give params.layout (channels_first or channels_last) or params.num_classes")
    return arr.transpose(0, 2, 1) if a < b else arr


def xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    c, half = xywh[..., :2], xywh[..., 2:4] / 2
    return np.concatenate([c - half, c + half], axis=-1)


def yolov8(output, layout: str = "auto", num_classes: int | None = None):
    arr = channels_last(output, layout, None if num_classes is None else 4 + num_classes, "yolov8")
    if arr.shape[-1] < 5:
        raise UserError(f"yolov8: {arr.shape[-1]} channels; expected 4 box values and at least one class")
    return xywh_to_xyxy(arr[..., :4]), arr[..., 4:]


def anchor_points(input_hw, strides) -> tuple[np.ndarray, np.ndarray]:
    """(points (N, 2) as x, y in cells, stride per point (N,)): each stride's grid, row by row."""
    points, per = [], []
    for s in strides:
        h, w = -(-int(input_hw[0]) // int(s)), -(-int(input_hw[1]) // int(s))
        ys, xs = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        points.append(np.stack([xs.ravel(), ys.ravel()], axis=1))
        per.append(np.full(h * w, float(s)))
    return np.concatenate(points), np.concatenate(per)


def yolov8_dfl(output, input_hw, strides=(8, 16, 32), reg_max: int = 16, layout: str = "auto",
               num_classes: int | None = None):
    arr = channels_last(output, layout, None if num_classes is None else 4 * reg_max + num_classes, "yolov8_dfl")
    points, stride = anchor_points(input_hw, strides)
    if arr.shape[1] != points.shape[0]:
        raise UserError(f"yolov8_dfl: {arr.shape[1]} boxes, but an input of {list(input_hw)} with strides "
                        f"{list(strides)} has {points.shape[0]} anchor points (check input_size and strides)")
    if arr.shape[2] <= 4 * reg_max:
        raise UserError(f"yolov8_dfl: {arr.shape[2]} channels leave no class after 4 x reg_max={reg_max} box bins")
    bins = arr[..., :4 * reg_max].reshape(arr.shape[0], arr.shape[1], 4, reg_max)
    bins = np.exp(bins - bins.max(axis=-1, keepdims=True))
    dist = (bins / bins.sum(axis=-1, keepdims=True)) @ np.arange(reg_max, dtype=np.float64)  # (B, N, 4) ltrb
    lt, rb = points[None] - dist[..., :2], points[None] + dist[..., 2:]
    boxes = np.concatenate([lt, rb], axis=-1) * stride[None, :, None]
    return boxes, _sigmoid(arr[..., 4 * reg_max:])


def yolov5(output, layout: str = "auto", num_classes: int | None = None):
    arr = channels_last(output, layout, None if num_classes is None else 5 + num_classes, "yolov5")
    if arr.shape[-1] < 6:
        raise UserError(f"yolov5: {arr.shape[-1]} channels; expected 4 box values, objectness and classes")
    return xywh_to_xyxy(arr[..., :4]), arr[..., 5:] * arr[..., 4:5]


def check_anchors(anchors) -> list:
    """``anchors`` as given (per level ``[w0, h0, w1, h1, ...]``), each level an even, non-zero count
    of positive finite numbers; else one line naming ``anchors[level]``."""
    import math

    if not isinstance(anchors, (list, tuple)) or not anchors:
        raise UserError(f"anchors: expected one list of [w, h, ...] per stride, got {anchors!r}")
    for level, values in enumerate(anchors):
        if not isinstance(values, (list, tuple)) or not values:
            raise UserError(f"anchors[{level}]: expected a list of anchor sizes [w0, h0, w1, h1, ...], got {values!r}")
        if len(values) % 2:
            raise UserError(f"anchors[{level}]: {len(values)} values; anchors are (width, height) pairs, so give an "
                            "even number")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise UserError(f"anchors[{level}]: {value!r} is not a positive number of pixels")
    return anchors


def yolov5_raw(outputs: list, strides=(8, 16, 32), anchors=None):
    """``outputs``: one raw head per stride, in the order of ``strides``."""
    anchors = YOLOV5_ANCHORS if anchors is None else check_anchors(anchors)
    if len(outputs) != len(strides) or len(anchors) != len(strides):
        raise UserError(f"yolov5_raw: {len(outputs)} head outputs, {len(strides)} strides and {len(anchors)} anchor "
                        "sets; give one of each per level")
    boxes, scores = [], []
    for level, (out, stride, anc) in enumerate(zip(outputs, strides, anchors)):
        anc = np.asarray(anc, dtype=np.float64).reshape(-1, 2)
        na = anc.shape[0]
        x = np.asarray(out, dtype=np.float64)
        if x.ndim == 4:  # (B, A*(5+C), H, W)
            b, ch, h, w = x.shape
            if ch % na:
                raise UserError(f"yolov5_raw: level {level} has {ch} channels, not a multiple of {na} anchors")
            x = x.reshape(b, na, ch // na, h, w).transpose(0, 1, 3, 4, 2)
        if x.ndim != 5 or x.shape[1] != na:
            raise UserError(f"yolov5_raw: level {level} has shape {list(np.shape(out))}; expected (B, A*(5+C), H, W) "
                            f"or (B, A, H, W, 5+C) with A={na}")
        b, _, h, w, _ = x.shape
        y = _sigmoid(x)
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        grid = np.stack([gx, gy], axis=-1)[None, None]  # (1, 1, H, W, 2) as x, y
        xy = (y[..., :2] * 2 - 0.5 + grid) * stride
        wh = (y[..., 2:4] * 2) ** 2 * anc[None, :, None, None, :]
        boxes.append(xywh_to_xyxy(np.concatenate([xy, wh], axis=-1)).reshape(b, -1, 4))
        scores.append((y[..., 5:] * y[..., 4:5]).reshape(b, na * h * w, -1))
    return np.concatenate(boxes, axis=1), np.concatenate(scores, axis=1)


def grid_cells(input_hw, strides) -> tuple[np.ndarray, np.ndarray]:
    """(cells (N, 2) as x, y: each stride's grid of ``H // s`` x ``W // s`` integer cell corners, row
    by row, stride by stride; stride per cell (N,)): the grid-relative heads' anchors (YOLOX)."""
    cells, per = [], []
    for s in strides:
        h, w = int(input_hw[0]) // int(s), int(input_hw[1]) // int(s)
        ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        cells.append(np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float64))
        per.append(np.full(h * w, float(s)))
    return np.concatenate(cells), np.concatenate(per)


def yolox(output, input_hw, strides=(8, 16, 32), layout: str = "auto", num_classes: int | None = None):
    """YOLOX as its ``tools/export_onnx.py`` exports it (``decode_in_inference`` off, the default):
    ``(B, N, 5+C)`` holding, per grid cell, the raw box regression ``dx, dy, log w, log h`` (in
    strides, from the cell's corner), objectness and class scores already through a sigmoid. Decoded
    as YOLOX's ``demo_postprocess`` does: ``xy = (d + cell) * stride``, ``wh = exp(log wh) * stride``;
    score = objectness x class. A model exported with ``--decode_in_inference`` holds pixels: that is
    ``yolov5``'s layout."""
    arr = channels_last(output, layout, None if num_classes is None else 5 + num_classes, "yolox")
    cells, stride = grid_cells(input_hw, strides)
    if arr.shape[1] != cells.shape[0]:
        raise UserError(f"yolox: {arr.shape[1]} boxes, but an input of {list(input_hw)} with strides {list(strides)} "
                        f"has {cells.shape[0]} grid cells (check input_size and strides; YOLOX-P6: [8, 16, 32, 64])")
    if arr.shape[-1] < 6:
        raise UserError(f"yolox: {arr.shape[-1]} channels; expected 4 box values, objectness and classes")
    xy = (arr[..., :2] + cells[None]) * stride[None, :, None]
    with np.errstate(over="ignore"):  # a wild log-size is an inf box, scored as what it is
        wh = np.exp(arr[..., 2:4]) * stride[None, :, None]
    return xywh_to_xyxy(np.concatenate([xy, wh], axis=-1)), arr[..., 5:] * arr[..., 4:5]
