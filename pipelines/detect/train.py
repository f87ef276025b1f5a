"""Train the tiny detector for a few seconds on CPU (seeded; one thread unless told).

Assignment (a simple anchor-free one): a cell is positive for a box when its centre lies inside the
box and within one stride of the box centre, and the cell holding the box centre always is; a cell
claimed by two boxes takes the smaller. Losses: binary cross-entropy on the class logits (target 1
for the positive cell's class), distribution focal loss on the four distances (bins of one stride)
and 1 - IoU of the decoded box. Threads: ``--threads N`` (the pipeline passes ``params.threads``),
else ``OMP_NUM_THREADS``, else 1 (see pipelines/classify/train.py for why).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from net import REG_MAX, STRIDE, build, grid  # noqa: E402


def threads(given: int | None) -> int:
    if given is not None and given > 0:
        return given
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def assign(target: torch.Tensor, anchors: torch.Tensor):
    """target (B, K, 5) = class, x1, y1, x2, y2 (class -1: none); anchors (N, 2) in pixels.
    Returns (box index per cell (B, N), -1 = background)."""
    cls, box = target[..., 0], target[..., 1:]
    valid = cls >= 0
    ax, ay = anchors[:, 0].view(1, 1, -1), anchors[:, 1].view(1, 1, -1)
    x1, y1, x2, y2 = (box[..., i:i + 1] for i in range(4))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    inside = (ax > x1) & (ax < x2) & (ay > y1) & (ay < y2)
    near = ((ax - cx).abs() <= STRIDE) & ((ay - cy).abs() <= STRIDE)
    n = int(round(anchors.shape[0] ** 0.5))
    centre = (torch.floor(cy / STRIDE).clamp(0, n - 1) * n + torch.floor(cx / STRIDE).clamp(0, n - 1)).long()
    is_centre = torch.arange(anchors.shape[0]).view(1, 1, -1) == centre
    pos = ((inside & near) | is_centre) & valid.unsqueeze(-1)
    area = ((x2 - x1) * (y2 - y1)).expand_as(pos.float())
    cost = torch.where(pos, area, torch.full_like(area, float("inf")))
    best = cost.argmin(dim=1)  # (B, N)
    has = pos.any(dim=1)
    return torch.where(has, best, torch.full_like(best, -1))


def losses(model, x, target, anchors):
    box_logits, cls_logits = model.raw(x)  # (B, 4R, N), (B, C, N)
    b, n = cls_logits.shape[0], cls_logits.shape[2]
    idx = assign(target, anchors)
    pos = idx >= 0
    cls_t = torch.zeros_like(cls_logits)
    gathered = torch.gather(target, 1, idx.clamp(min=0).unsqueeze(-1).expand(b, n, 5))  # (B, N, 5)
    bi, ni = pos.nonzero(as_tuple=True)
    cls_t[bi, gathered[bi, ni, 0].long(), ni] = 1.0
    npos = max(int(pos.sum()), 1)
    loss_cls = F.binary_cross_entropy_with_logits(cls_logits, cls_t, reduction="sum") / npos
    gt = gathered[bi, ni, 1:] / STRIDE  # (P, 4) in strides
    a = anchors[ni] / STRIDE
    dist_t = torch.cat([a - gt[:, :2], gt[:, 2:] - a], dim=1).clamp(0, REG_MAX - 1.01)  # l, t, r, b
    logits = box_logits[bi, :, ni].reshape(-1, 4, REG_MAX)
    left = dist_t.floor().long()
    w_right = dist_t - left
    logp = F.log_softmax(logits, dim=-1)
    dfl = -(logp.gather(-1, left.unsqueeze(-1)).squeeze(-1) * (1 - w_right)
            + logp.gather(-1, (left + 1).unsqueeze(-1)).squeeze(-1) * w_right).mean()
    dist = (logits.softmax(-1) * torch.arange(REG_MAX, dtype=logits.dtype)).sum(-1)
    pb = torch.cat([a - dist[:, :2], a + dist[:, 2:]], dim=1)
    iw = (torch.min(pb[:, 2], gt[:, 2]) - torch.max(pb[:, 0], gt[:, 0])).clamp(min=0)
    ih = (torch.min(pb[:, 3], gt[:, 3]) - torch.max(pb[:, 1], gt[:, 1])).clamp(min=0)
    inter = iw * ih
    union = (pb[:, 2] - pb[:, 0]) * (pb[:, 3] - pb[:, 1]) + (gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1]) - inter
    iou = inter / union.clamp(min=1e-9)
    return loss_cls, dfl, (1 - iou).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: $OMP_NUM_THREADS, else 1)")
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(threads(args.threads))
    x = torch.from_numpy(np.load(Path(args.data) / "train" / "images.npy"))
    target = torch.from_numpy(np.load(Path(args.data) / "train" / "boxes.npy"))
    anchors = grid() * STRIDE
    model = build(export=False)
    opt = torch.optim.Adam(model.parameters(), lr=4e-3)
    steps = args.epochs * ((len(x) + 63) // 64)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-3, total_steps=max(steps, 1), pct_start=0.15)
    gen = torch.Generator().manual_seed(args.seed)
    model.train()
    for _ in range(args.epochs):
        for batch in torch.randperm(len(x), generator=gen).split(64):
            xb = x[batch]
            tb = target[batch]
            if torch.rand(1, generator=gen).item() < 0.5:  # horizontal flip
                xb = xb.flip(-1)
                tb = tb.clone()
                valid = tb[..., 0] >= 0
                x1 = tb[..., 1].clone()
                tb[..., 1] = torch.where(valid, 64 - tb[..., 3], tb[..., 1])
                tb[..., 3] = torch.where(valid, 64 - x1, tb[..., 3])
            lc, ld, li = losses(model, xb, tb, anchors)
            loss = lc + ld + 2 * li
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    model.eval()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out.with_name(out.name + ".tmp"))
    os.replace(out.with_name(out.name + ".tmp"), out)
    metrics = {"train_loss": float(loss.detach()), "train_cls_loss": float(lc.detach()), "train_iou_loss": float(li.detach())}
    Path(args.metrics).write_text(json.dumps(metrics) + "\n")


if __name__ == "__main__":
    main()
