"""Turn scikit-learn's digits images (real data, shipped with scikit-learn) into a small ReID split.

Identity = digit class. Per identity, half the samples train the network; the rest form the test
set, of which every fifth sample is a query and the others the gallery. Two "cameras": a sample's
camera is the parity of its position within its identity, in the dataset's own order (the images
come from different writers in sequence, so the two cameras hold different handwriting of the
same digit). Query and gallery share identities but never samples, and the Market-1501 rule
(ignore gallery entries of the same identity and camera) then removes same-"camera" matches.

Writes, under --out:
  train/images.npy (N,1,32,32) float32, train/ids.npy
  query/images.npy, gallery/images.npy           (the only file in each folder: an infer input)
  test/images.npy                                 (query then gallery: one infer stage for both)
  labels/{query_ids,query_cams,gallery_ids,gallery_cams}.npy
  probe/images.npy                                (8 query images, for dump and compare)
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np


def to_images(flat: np.ndarray) -> np.ndarray:
    """8x8 digits (0..16) -> (N, 1, 32, 32) float32 in [0, 1], upscaled 4x by pixel repetition."""
    img = flat.reshape(-1, 8, 8).astype(np.float32) / 16.0
    img = np.repeat(np.repeat(img, 4, axis=1), 4, axis=2)
    return img[:, None, :, :]


def split(labels: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Indices of train / query / gallery samples and the camera of every sample."""
    rng = np.random.default_rng(seed)
    cams = np.zeros(labels.size, dtype=np.int64)
    parts = {"train": [], "query": [], "gallery": []}
    for ident in np.unique(labels):
        members = np.nonzero(labels == ident)[0]  # dataset order
        cams[members] = np.arange(members.size) % 2
        shuffled = rng.permutation(members)
        half = members.size // 2
        parts["train"].append(shuffled[:half])
        test = np.sort(shuffled[half:])
        parts["query"].append(test[::5])
        parts["gallery"].append(np.setdiff1d(test, test[::5]))
    out = {k: np.concatenate(v) for k, v in parts.items()}
    out["cams"] = cams
    return out


def save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, array)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, labels = to_images(digits.data), digits.target.astype(np.int64)
    idx = split(labels, args.seed)
    out = Path(args.out)
    save(out / "train" / "images.npy", images[idx["train"]])
    save(out / "train" / "ids.npy", labels[idx["train"]])
    for part in ("query", "gallery"):
        save(out / part / "images.npy", images[idx[part]])
        save(out / "labels" / f"{part}_ids.npy", labels[idx[part]])
        save(out / "labels" / f"{part}_cams.npy", idx["cams"][idx[part]])
    save(out / "test" / "images.npy", images[np.r_[idx["query"], idx["gallery"]]])
    save(out / "probe" / "images.npy", images[idx["query"][:8]])
    summary = {k: int(idx[k].size) for k in ("train", "query", "gallery")}
    (out / "split.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
