"""Train the digits classifier for a few seconds on CPU (seeded; one thread unless told).

Threads: ``--threads N`` (the pipeline passes ``params.threads``, default 1), else ``OMP_NUM_THREADS``,
else 1. One thread because the other stages and other builds share the machine: with 2 cores under a
load of 4 to 9, 20 epochs of the ReID network took 21 s on one thread and 275 s on two. The count is
a param so that it is part of the stage key (float reductions may round differently with another
count)."""

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
from net import build  # noqa: E402


def threads(given: int | None) -> int:
    if given is not None and given > 0:
        return given
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: $OMP_NUM_THREADS, else 1)")
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(threads(args.threads))
    x = torch.from_numpy(np.load(Path(args.data) / "train" / "images.npy"))
    y = torch.from_numpy(np.load(Path(args.data) / "train" / "labels.npy"))
    model = build()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(args.seed)
    model.train()
    for _ in range(args.epochs):
        for batch in torch.randperm(len(y), generator=gen).split(64):
            loss = F.cross_entropy(model(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out.with_name(out.name + ".tmp"))
    os.replace(out.with_name(out.name + ".tmp"), out)
    Path(args.metrics).write_text(json.dumps({"train_accuracy": accuracy, "train_loss": float(loss.detach())}) + "\n")


if __name__ == "__main__":
    main()
