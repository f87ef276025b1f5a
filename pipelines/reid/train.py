"""Train the digits ReID network for a few seconds on CPU (seeded; one thread unless told).

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
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reid_net import build  # noqa: E402


def threads(given: int | None) -> int:
    if given is not None and given > 0:
        return given
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="the folder written by prepare.py")
    parser.add_argument("--out", required=True, help="checkpoint path (.pt)")
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: $OMP_NUM_THREADS, else 1)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(threads(args.threads))
    data = Path(args.data)
    images = torch.from_numpy(np.load(data / "train" / "images.npy"))
    ids = torch.from_numpy(np.load(data / "train" / "ids.npy"))
    model = build(num_ids=int(ids.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    model.train()
    for _ in range(args.epochs):
        order = torch.randperm(len(ids), generator=gen)
        for batch in order.split(64):
            loss = F.cross_entropy(model(images[batch]), ids[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(images).argmax(1) == ids).float().mean())
        feats = model.features(images[:256])
    metrics = {"train_loss": float(loss.detach()), "train_accuracy": accuracy, "seconds": time.perf_counter() - start,
               "feature_abs_mean": float(feats.abs().mean()),
               "sum_of_squares_mean": float((feats * feats).sum(1).mean())}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, out)
    Path(args.metrics).write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
