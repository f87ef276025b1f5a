"""Synthetic detection frames (no download): shapes of three classes on noise, frames of varying
aspect ratios, and their ground truth in the three formats the eval reads.

Classes: 0 ``box`` (a filled reddish rectangle), 1 ``disc`` (a filled greenish ellipse), 2 ``ring``
(a bluish hollow ellipse), 1 to 3 per frame, on a noisy grey background; integer boxes in the
frame's pixels. Writes under --out:

- ``frames/{train,val,cam,probe}.npz``: uint8 HWC frames, one array per frame (``f00000``, ...).
  ``train`` and ``val`` frames are 48 to 112 pixels a side, any aspect ratio; ``cam`` frames are all
  96x64 (a camera: one size, so a static AIPP can letterbox them on the device); ``probe``: the
  first 8 cam frames (compare's inputs). ``cam_raw/images.npy``: the cam frames stacked (uint8 NHWC).
- ``train/``: ``images.npy`` (the training preprocessing of the letterboxed frames: float NCHW,
  ``(u8 - 114) / 255``), ``boxes.npy`` (F, 3, 5: class, x1, y1, x2, y2 in input pixels; class -1 =
  none).
- ``labels/{val,cam}.json`` (COCO instances, category ids 1, 2, 3), ``labels/val_voc/*.xml`` (PASCAL
  VOC), ``labels/val_yolo/*.txt`` (YOLO, normalised).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from ascendpipe.data import letterbox as lb

NAMES = ["box", "disc", "ring"]
COLOURS = np.array([[200, 60, 50], [60, 190, 70], [50, 80, 210]], dtype=np.float64)
INPUT = (64, 64)
MEAN, SCALE = 114.0, 1.0 / 255.0


def frame(rng, h: int, w: int):
    img = rng.normal(120, 25, size=(h, w, 3))
    boxes = []
    yy, xx = np.mgrid[0:h, 0:w]
    for _ in range(int(rng.integers(1, 4))):
        cls = int(rng.integers(0, 3))
        bw, bh = int(rng.integers(12, max(13, min(40, w // 2)))), int(rng.integers(12, max(13, min(40, h // 2))))
        x1, y1 = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
        if any(not (x1 >= b[3] or x1 + bw <= b[1] or y1 >= b[4] or y1 + bh <= b[2]) for b in boxes):
            continue  # no overlaps: each object fully visible
        colour = COLOURS[cls] + rng.normal(0, 20, 3)
        cx, cy, rx, ry = x1 + bw / 2, y1 + bh / 2, bw / 2, bh / 2
        inside = ((xx + 0.5 - cx) / rx) ** 2 + ((yy + 0.5 - cy) / ry) ** 2
        if cls == 0:
            mask = (xx >= x1) & (xx < x1 + bw) & (yy >= y1) & (yy < y1 + bh)
        elif cls == 1:
            mask = inside <= 1
        else:
            mask = (inside <= 1) & (inside >= 0.45)
        img[mask] = colour
        boxes.append([cls, x1, y1, x1 + bw, y1 + bh])
    return np.clip(np.round(img), 0, 255).astype(np.uint8), boxes


def frames(rng, n: int, size=None):
    out = []
    for _ in range(n):
        h, w = size or (int(rng.integers(48, 113)), int(rng.integers(48, 113)))
        out.append(frame(rng, h, w))
    return out


def save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, array)
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(path.name + ".tmp").write_text(text)
    os.replace(path.with_name(path.name + ".tmp"), path)


def save_frames(path: Path, items) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, **{f"f{i:05d}": img for i, (img, _) in enumerate(items)})
    os.replace(tmp, path)


def coco(items) -> dict:
    images = [{"id": i + 1, "file_name": f"f{i:05d}", "height": img.shape[0], "width": img.shape[1]}
              for i, (img, _) in enumerate(items)]
    anns = []
    for i, (_, boxes) in enumerate(items):
        for c, x1, y1, x2, y2 in boxes:
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": c + 1, "iscrowd": 0,
                         "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1)})
    return {"images": images, "annotations": anns,
            "categories": [{"id": c + 1, "name": n} for c, n in enumerate(NAMES)]}


def voc(img, boxes) -> str:
    objs = "".join(f"<object><name>{NAMES[c]}</name><difficult>0</difficult><bndbox><xmin>{x1}</xmin><ymin>{y1}"
                   f"</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>" for c, x1, y1, x2, y2 in boxes)
    return (f"<annotation><size><width>{img.shape[1]}</width><height>{img.shape[0]}</height><depth>3</depth>"
            f"</size>{objs}</annotation>\n")


def yolo(img, boxes) -> str:
    h, w = img.shape[:2]
    return "".join(f"{c} {(x1 + x2) / 2 / w!r} {(y1 + y2) / 2 / h!r} {(x2 - x1) / w!r} {(y2 - y1) / h!r}\n"
                   for c, x1, y1, x2, y2 in boxes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=800)
    parser.add_argument("--val", type=int, default=120)
    parser.add_argument("--cam", type=int, default=60)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    out = Path(args.out)
    train, val, cam = frames(rng, args.train), frames(rng, args.val), frames(rng, args.cam, size=(64, 96))
    metas = [lb.plan(img.shape[:2], INPUT) for img, _ in train]
    u8 = np.stack([lb.apply(img, m, MEAN) for (img, _), m in zip(train, metas)])
    target = np.full((len(train), 3, 5), -1.0, dtype=np.float32)
    for i, ((_, boxes), m) in enumerate(zip(train, metas)):
        for j, b in enumerate(boxes):
            target[i, j] = [b[0], *lb.forward_boxes(np.array(b[1:], float), m)[0]]
    save(out / "train" / "images.npy", lb.normalise(u8, MEAN, SCALE))
    save(out / "train" / "boxes.npy", target)
    for name, items in (("train", train), ("val", val), ("cam", cam), ("probe", cam[:8])):
        save_frames(out / "frames" / f"{name}.npz", items)
    save(out / "cam_raw" / "images.npy", np.stack([img for img, _ in cam]))  # 60 x 64 x 96 x 3: what AIPP resizes
    write_text(out / "labels" / "val.json", json.dumps(coco(val)))
    write_text(out / "labels" / "cam.json", json.dumps(coco(cam)))
    for i, (img, boxes) in enumerate(val):
        write_text(out / "labels" / "val_voc" / f"f{i:05d}.xml", voc(img, boxes))
        write_text(out / "labels" / "val_yolo" / f"f{i:05d}.txt", yolo(img, boxes))
    n_obj = sum(len(b) for _, b in val)
    print(f"train {len(train)}, val {len(val)} ({n_obj} objects), cam {len(cam)}")


if __name__ == "__main__":
    main()
