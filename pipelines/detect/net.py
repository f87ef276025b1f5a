"""A tiny YOLOv8-style detector for 64x64 frames: anchor-free, one stride (8), DFL boxes.

The head predicts, per cell of the 8x8 grid, ``4 * REG_MAX`` bin logits (the distances left, top,
right, bottom from the cell centre, in strides, as a distribution: DFL) and ``NUM_CLASSES`` class
logits. ``build(export=True)`` (the export's factory) appends YOLOv8's export decoding: the
expected bin of each side, the box ``cx, cy, w, h`` in input pixels and sigmoid scores, as one
``(B, 4 + C, N)`` output, the layout ultralytics exports and ``decode: yolov8`` reads.
"""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 3
REG_MAX = 8
STRIDE = 8
INPUT = 64


def grid(size: int = INPUT, stride: int = STRIDE) -> torch.Tensor:
    """Cell centres (N, 2) as x, y in strides, row by row (ultralytics' make_anchors)."""
    n = size // stride
    ys, xs = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
    return torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1)


class Detector(nn.Module):
    def __init__(self, export: bool = False):
        super().__init__()

        def block(cin, cout, stride):
            return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.SiLU()]

        self.body = nn.Sequential(*block(3, 16, 2), *block(16, 32, 2), *block(32, 48, 2), *block(48, 48, 1))
        self.box = nn.Conv2d(48, 4 * REG_MAX, 1)
        self.cls = nn.Conv2d(48, NUM_CLASSES, 1)
        self.export = export
        self.register_buffer("anchors", grid(), persistent=False)
        self.register_buffer("bins", torch.arange(REG_MAX, dtype=torch.float32), persistent=False)

    def raw(self, x):
        f = self.body(x)
        b, n = f.shape[0], f.shape[2] * f.shape[3]
        return self.box(f).reshape(b, 4 * REG_MAX, n), self.cls(f).reshape(b, NUM_CLASSES, n)

    def forward(self, x):
        box, cls = self.raw(x)
        if not self.export:
            return box, cls
        b, n = box.shape[0], box.shape[2]
        dist = (box.reshape(b, 4, REG_MAX, n).softmax(2) * self.bins.reshape(1, 1, REG_MAX, 1)).sum(2)  # (B, 4, N)
        anchors = self.anchors.t().unsqueeze(0)  # (1, 2, N)
        lt, rb = anchors - dist[:, :2], anchors + dist[:, 2:]
        xywh = torch.cat([(lt + rb) / 2, rb - lt], dim=1) * STRIDE
        return torch.cat([xywh, cls.sigmoid()], dim=1)


def build(export: bool = True) -> nn.Module:
    return Detector(export=export)
