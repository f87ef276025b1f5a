"""Digits (shipped with scikit-learn) as 32x32 uint8 grey images, for the AIPP classification example.

Training preprocessing, the one AIPP must reproduce on the device: ``x = (u8 - MEAN) * VAR_RECI``
with MEAN = 78 (int, as ``mean_chn_0`` is int32) and VAR_RECI = 1/96 (``var_reci_chn_0``).
Writes under --out: train/{images,labels}.npy (float NCHW, preprocessed), val/images.npy (float
NCHW, preprocessed: the golden model's input), val_u8/images.npy (uint8 NHWC: the AIPP model's
input), labels/labels.npy (val labels), probe_u8/images.npy and probe/images.npy (8 val images).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

MEAN = 78
VAR_RECI = 1.0 / 96.0


def to_u8_nhwc(flat: np.ndarray) -> np.ndarray:
    img = np.round(flat.reshape(-1, 8, 8) * (255.0 / 16.0)).astype(np.uint8)
    img = np.repeat(np.repeat(img, 4, axis=1), 4, axis=2)
    return img[..., None]


def preprocess(u8_nhwc: np.ndarray) -> np.ndarray:
    """The training preprocessing, in float32 NCHW."""
    return ((u8_nhwc.astype(np.float32) - MEAN) * np.float32(VAR_RECI)).transpose(0, 3, 1, 2).copy()


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
    u8, labels = to_u8_nhwc(digits.data), digits.target.astype(np.int64)
    order = np.random.default_rng(args.seed).permutation(labels.size)
    train, val = order[: labels.size * 2 // 3], np.sort(order[labels.size * 2 // 3:])
    out = Path(args.out)
    save(out / "train" / "images.npy", preprocess(u8[train]))
    save(out / "train" / "labels.npy", labels[train])
    save(out / "val" / "images.npy", preprocess(u8[val]))
    save(out / "val_u8" / "images.npy", u8[val])
    save(out / "labels" / "labels.npy", labels[val])
    save(out / "probe" / "images.npy", preprocess(u8[val[:8]]))
    save(out / "probe_u8" / "images.npy", u8[val[:8]])
    print(f"train {train.size}, val {val.size}")


if __name__ == "__main__":
    main()
