"""Detection ground truth in four formats, and the COCO json the eval writes (pure Python + numpy).

Each reader returns ``Truth``: per image (in the order the model saw them) ``{"boxes": [[x1, y1,
x2, y2], ...], "labels": [class index, ...]}`` with optional per-box flags, plus the COCO image id
and category id of each class index, so predictions can be written as COCO results.

- ``list``: ``ground_truth.json``, a list over images of ``{"boxes", "labels"}`` (optional
  ``iscrowd``, ``difficult``, ``ignore``); image ids 0, 1, ...; category id = class index.
- ``coco``: a COCO instances json (``images``, ``annotations`` with ``bbox`` = x, y, width, height,
  ``categories``): images in the order the file lists them; class index i is the i-th category
  sorted by id; ``iscrowd`` read.
- ``voc``: a folder of PASCAL VOC ``.xml`` annotations, one per image, in file-name order; the
  class index of ``<name>`` is its place in ``class_names``; ``<difficult>`` read; ``<bndbox>``
  read as is (no -1: continuous coordinates).
- ``yolo``: a folder of YOLO ``.txt`` labels, one per image in file-name order (``classes.txt``
  aside), each line ``class cx cy w h`` normalised to the image, which needs each image's size
  (``[h, w]``: from the letterbox metadata, or ``image_size``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ascendpipe.errors import UserError

FORMATS = ("auto", "list", "coco", "voc", "yolo")


@dataclass
class Truth:
    images: list[dict]
    image_ids: list = field(default_factory=list)
    category_ids: list = field(default_factory=list)  # class index -> COCO category id
    format: str = "list"
    sizes: list | None = None  # [h, w] per image when known


def detect_format(path: Path) -> str:
    if path.is_file():
        if path.suffix != ".json":
            raise UserError(f"labels: {path} is not a .json file, nor a folder of VOC .xml or YOLO .txt labels")
        return "coco" if _is_coco(json.loads(path.read_text())) else "list"
    if (path / "ground_truth.json").is_file():
        return "list"
    if any(path.glob("*.xml")):
        return "voc"
    if any(p.name != "classes.txt" for p in path.glob("*.txt")):
        return "yolo"
    raise UserError(f"labels: {path} holds no ground_truth.json, COCO json, VOC .xml or YOLO .txt files")


def _is_coco(data) -> bool:
    return isinstance(data, dict) and "annotations" in data and "images" in data


def read(path, fmt: str = "auto", *, class_names=None, sizes=None) -> Truth:
    path = Path(path)
    if not path.exists():
        raise UserError(f"labels: {path} does not exist")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "list":
        file = path if path.is_file() else path / "ground_truth.json"
        images = json.loads(file.read_text())
        if not isinstance(images, list):
            raise UserError(f"labels: {file} must be a list over images of {{\"boxes\", \"labels\"}}")
        for i, img in enumerate(images):
            if not isinstance(img, dict) or "boxes" not in img or "labels" not in img:
                raise UserError(f"labels: {file} image {i} has no 'boxes' and 'labels'")
        n_cls = 1 + max((int(c) for img in images for c in img["labels"]), default=-1)
        return Truth(images, list(range(len(images))), list(range(n_cls)), "list", sizes)
    if fmt == "coco":
        return _coco(path if path.is_file() else _one(path, "*.json"))
    if fmt == "voc":
        return _voc(path, class_names)
    if fmt == "yolo":
        return _yolo(path, sizes)
    raise UserError(f"labels: gt_format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def _one(folder: Path, pattern: str) -> Path:
    files = sorted(folder.glob(pattern))
    if len(files) != 1:
        raise UserError(f"labels: expected one {pattern} in {folder}, found {len(files)}")
    return files[0]


def _coco(file: Path) -> Truth:
    data = json.loads(file.read_text())
    if not _is_coco(data):
        raise UserError(f"labels: {file} is not a COCO instances json (images, annotations, categories)")
    cats = sorted(c["id"] for c in data.get("categories") or [])
    if not cats:
        cats = sorted({a["category_id"] for a in data["annotations"]})
    index = {c: i for i, c in enumerate(cats)}
    ids = [img["id"] for img in data["images"]]
    per = {i: {"boxes": [], "labels": [], "iscrowd": []} for i in ids}
    for a in data["annotations"]:
        if a["image_id"] not in per:
            raise UserError(f"labels: {file}: annotation {a.get('id')} names image {a['image_id']}, not in 'images'")
        x, y, w, h = a["bbox"]
        per[a["image_id"]]["boxes"].append([x, y, x + w, y + h])
        per[a["image_id"]]["labels"].append(index[a["category_id"]])
        per[a["image_id"]]["iscrowd"].append(int(a.get("iscrowd", 0)))
    sizes = [[img.get("height"), img.get("width")] for img in data["images"]]
    return Truth([per[i] for i in ids], ids, cats, "coco", sizes if all(None not in s for s in sizes) else None)


def _voc(folder: Path, class_names) -> Truth:
    import xml.etree.ElementTree as ET

    if not class_names:
        raise UserError("labels: VOC annotations name their classes; give params.class_names (index order)")
    index = {n: i for i, n in enumerate(class_names)}
    images, sizes = [], []
    for file in sorted(folder.glob("*.xml")):
        try:
            root = ET.parse(file).getroot()
        except ET.ParseError as err:
            raise UserError(f"labels: {file}: {err}") from None
        img = {"boxes": [], "labels": [], "difficult": []}
        for obj in root.iter("object"):
            name = obj.findtext("name", "").strip()
            if name not in index:
                raise UserError(f"labels: {file}: class '{name}' is not in class_names ({', '.join(class_names)})")
            bb = obj.find("bndbox")
            img["boxes"].append([float(bb.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax")])
            img["labels"].append(index[name])
            img["difficult"].append(int(obj.findtext("difficult", "0") or 0))
        size = root.find("size")
        sizes.append(None if size is None else [int(size.findtext("height")), int(size.findtext("width"))])
        images.append(img)
    return Truth(images, list(range(len(images))), list(range(len(class_names))), "voc",
                 sizes if all(s is not None for s in sizes) else None)


def _yolo(folder: Path, sizes) -> Truth:
    files = sorted(p for p in folder.glob("*.txt") if p.name != "classes.txt")
    if sizes is None:
        raise UserError("labels: YOLO labels are normalised to each image; give the image sizes (the `letterbox` "
                        "input's metadata, or params.image_size [h, w])")
    if len(sizes) == 1 and len(files) > 1:
        sizes = sizes * len(files)
    if len(sizes) != len(files):
        raise UserError(f"labels: {len(files)} YOLO label files but {len(sizes)} image sizes")
    images, n_cls = [], 0
    for file, (h, w) in zip(files, sizes):
        rows = np.loadtxt(file, ndmin=2) if file.stat().st_size else np.zeros((0, 5))
        if rows.size and rows.shape[1] != 5:
            raise UserError(f"labels: {file}: each line must be 'class cx cy w h', found {rows.shape[1]} values")
        cx, cy, bw, bh = rows[:, 1] * w, rows[:, 2] * h, rows[:, 3] * w, rows[:, 4] * h
        boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1)
        images.append({"boxes": boxes.tolist(), "labels": rows[:, 0].astype(int).tolist()})
        n_cls = max(n_cls, 1 + int(rows[:, 0].max()) if rows.size else 0)
    return Truth(images, list(range(len(images))), list(range(n_cls)), "yolo", [list(s) for s in sizes])


def coco_results(pred: dict, truth: Truth) -> list[dict]:
    """Predictions as a COCO results list (``loadRes`` takes it as is): bbox = x, y, width, height."""
    out = []
    n_cat = len(truth.category_ids)
    for i, (boxes, scores, labels) in enumerate(zip(pred["boxes"], pred["scores"], pred["labels"])):
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        for b, s, c in zip(boxes, np.asarray(scores, np.float64).reshape(-1), np.asarray(labels).reshape(-1)):
            c = int(c)
            cat = truth.category_ids[c] if 0 <= c < n_cat else c
            out.append({"image_id": truth.image_ids[i], "category_id": cat, "score": round(float(s), 6),
                        "bbox": [round(float(v), 4) for v in (b[0], b[1], b[2] - b[0], b[3] - b[1])]})
    return out


def coco_ground_truth(truth: Truth) -> dict:
    """The ground truth as a COCO instances json (for pycocotools' ``COCO``), whatever it was read from."""
    images, anns = [], []
    for i, img in enumerate(truth.images):
        entry = {"id": truth.image_ids[i]}
        if truth.sizes is not None and truth.sizes[i] is not None:
            entry["height"], entry["width"] = int(truth.sizes[i][0]), int(truth.sizes[i][1])
        images.append(entry)
        crowd = img.get("iscrowd") or [0] * len(img["boxes"])
        for b, c, z in zip(img["boxes"], img["labels"], crowd):
            w, h = float(b[2]) - float(b[0]), float(b[3]) - float(b[1])
            anns.append({"id": len(anns) + 1, "image_id": truth.image_ids[i], "category_id": truth.category_ids[int(c)],
                         "bbox": [float(b[0]), float(b[1]), w, h], "area": w * h, "iscrowd": int(z)})
    return {"images": images, "annotations": anns, "categories": [{"id": c, "name": str(c)} for c in truth.category_ids]}
