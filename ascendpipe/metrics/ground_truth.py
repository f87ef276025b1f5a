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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ascendpipe.errors import UserError, few
from ascendpipe.userfile import fail, listing, load_json, mapping, number, numbers, read_text, shown

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
        return "coco" if _is_coco(load_json(path, "ground truth")) else "list"
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
    if fmt not in FORMATS:
        raise UserError(f"labels: gt_format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    try:
        return _read(path, fmt, class_names, sizes)
    except UserError as err:  # every problem of the ground truth names the input it comes from
        if err.message.startswith("labels: "):
            raise
        raise UserError(f"labels: {err.message}", err.location, hint=err.hint) from None


def _read(path: Path, fmt: str, class_names, sizes) -> Truth:
    fmt = detect_format(path) if fmt == "auto" else fmt
    if sizes is not None:
        for i, size in enumerate(listing(sizes, "the image sizes", None)):
            numbers(size, "the image sizes", f"[{i}] ([h, w])", 2, above=0)
    if fmt == "list":
        return _list(path if path.is_file() else path / "ground_truth.json", sizes)
    if fmt == "coco":
        return _coco(path if path.is_file() else _one(path, "*.json"))
    if fmt == "voc":
        return _voc(path, class_names)
    return _yolo(path, sizes)


def _one(folder: Path, pattern: str) -> Path:
    files = sorted(folder.glob(pattern))
    if len(files) != 1:
        raise UserError(f"labels: expected one {pattern} in {folder}, found {len(files)}")
    return files[0]


def _xyxy(value, file, field: str) -> list:
    """A box x1, y1, x2, y2: four finite numbers, x2 >= x1 and y2 >= y1."""
    x1, y1, x2, y2 = numbers(value, file, field, 4)
    if x2 < x1 or y2 < y1:
        raise fail(file, field, f"{shown(value)} has x2 < x1 or y2 < y1; boxes are [x1, y1, x2, y2]")
    return [x1, y1, x2, y2]


def _flags(img: dict, name: str, n: int, file, field: str) -> list | None:
    if img.get(name) is None:
        return None
    values = listing(img[name], file, f"{field}.{name}")
    if len(values) != n:
        raise fail(file, f"{field}.{name}", f"{len(values)} values for {n} boxes; give one per box")
    return [int(number(v, file, f"{field}.{name}[{j}]", minimum=0, maximum=1, integer=True)) for j, v in enumerate(values)]


def _list(file: Path, sizes) -> Truth:
    raw = load_json(file, "ground truth")
    if not isinstance(raw, list):
        raise UserError(f"labels: {file} must be a list over images of {{\"boxes\", \"labels\"}}")
    images = []
    for i, img in enumerate(raw):
        field = f"[{i}]"
        if not isinstance(img, dict) or "boxes" not in img or "labels" not in img:
            raise UserError(f"labels: {file} image {i} has no 'boxes' and 'labels'")
        boxes = [_xyxy(b, file, f"{field}.boxes[{j}]") for j, b in enumerate(listing(img["boxes"], file, f"{field}.boxes"))]
        labels = [number(c, file, f"{field}.labels[{j}]", minimum=0, integer=True)
                  for j, c in enumerate(listing(img["labels"], file, f"{field}.labels"))]
        if len(labels) != len(boxes):
            raise fail(file, field, f"{len(boxes)} boxes but {len(labels)} labels; give one label per box")
        entry = {"boxes": boxes, "labels": labels}
        for name in ("iscrowd", "difficult", "ignore"):
            flags = _flags(img, name, len(boxes), file, field)
            if flags is not None:
                entry[name] = flags
        images.append(entry)
    n_cls = 1 + max((c for img in images for c in img["labels"]), default=-1)
    return Truth(images, list(range(len(images))), list(range(n_cls)), "list", sizes)


def _coco(file: Path) -> Truth:
    data = load_json(file, "ground truth")
    if not _is_coco(data):
        raise UserError(f"labels: {file} is not a COCO instances json (images, annotations, categories)")
    categories = listing(data.get("categories") or [], file, "categories")
    annotations = listing(data["annotations"], file, "annotations")
    for k, a in enumerate(annotations):
        mapping(a, file, f"annotations[{k}]")
    cats = []
    for k, c in enumerate(categories):
        if "id" not in mapping(c, file, f"categories[{k}]"):
            raise fail(file, f"categories[{k}]", "has no 'id'")
        cats.append(number(c["id"], file, f"categories[{k}].id", integer=True))
    if len(set(cats)) != len(cats):
        raise fail(file, "categories", "two categories share an id")
    listed = bool(cats)
    if not listed:  # no categories: the ids the annotations use
        cats = [number(a.get("category_id"), file, f"annotations[{k}].category_id", integer=True)
                for k, a in enumerate(annotations)]
    cats = sorted(set(cats))
    index = {c: i for i, c in enumerate(cats)}
    ids = []
    sizes = []
    for k, img in enumerate(listing(data["images"], file, "images")):
        if "id" not in mapping(img, file, f"images[{k}]"):
            raise fail(file, f"images[{k}]", "has no 'id'")
        if isinstance(img["id"], bool) or not isinstance(img["id"], (int, str)):
            raise fail(file, f"images[{k}].id", f"{shown(img['id'])} is not a number or text")
        ids.append(img["id"])
        h, w = img.get("height"), img.get("width")
        sizes.append([None if h is None else number(h, file, f"images[{k}].height", above=0),
                      None if w is None else number(w, file, f"images[{k}].width", above=0)])
    if len(set(ids)) != len(ids):
        raise fail(file, "images", "two images share an id")
    per = {i: {"boxes": [], "labels": [], "iscrowd": []} for i in ids}
    for k, a in enumerate(annotations):
        field = f"annotations[{k}]"
        if a.get("image_id") not in per:
            raise UserError(f"labels: {file}: annotation {a.get('id')} names image {shown(a.get('image_id'))}, not in 'images'")
        if "bbox" not in a:
            raise fail(file, field, "has no 'bbox'")
        x, y, w, h = numbers(a["bbox"], file, f"{field}.bbox", 4)
        if w < 0 or h < 0:
            raise fail(file, f"{field}.bbox", f"{shown(a['bbox'])} has a negative width or height; COCO's bbox is "
                       "[x, y, width, height]")
        category = a.get("category_id")
        if category not in index or isinstance(category, bool):
            known = ", ".join(map(str, cats[:10])) + (" ..." if len(cats) > 10 else "")
            raise fail(file, f"{field}.category_id", f"{shown(category)} is not one of the categories' ids ({known})")
        crowd = number(a.get("iscrowd", 0), file, f"{field}.iscrowd", minimum=0, maximum=1, integer=True)
        per[a["image_id"]]["boxes"].append([x, y, x + w, y + h])
        per[a["image_id"]]["labels"].append(index[category])
        per[a["image_id"]]["iscrowd"].append(crowd)
    return Truth([per[i] for i in ids], ids, cats, "coco", sizes if all(None not in s for s in sizes) else None)


def _voc(folder: Path, class_names) -> Truth:
    import xml.etree.ElementTree as ET

    if not class_names:
        raise UserError("labels: VOC annotations name their classes; give params.class_names (index order)")
    index = {n: i for i, n in enumerate(class_names)}
    images, sizes = [], []

    def value(node, tag: str, file, field: str, **bounds):
        text = node.findtext(tag) if node is not None else None
        if text is None:
            raise fail(file, field, f"has no <{tag}>")
        try:
            parsed = float(text.strip())
        except ValueError:
            raise fail(file, f"{field}.{tag}", f"{shown(text.strip())} is not a number") from None
        return number(parsed, file, f"{field}.{tag}", **bounds)

    for file in sorted(folder.glob("*.xml")):
        try:
            root = ET.parse(file).getroot()
        except ET.ParseError as err:
            raise UserError(f"labels: {file}: {err}") from None
        img = {"boxes": [], "labels": [], "difficult": []}
        for k, obj in enumerate(root.iter("object")):
            name = obj.findtext("name", "").strip()
            if name not in index:
                raise UserError(f"labels: {file}: class '{name}' is not in class_names ({few(class_names, 12)})")
            field = f"object[{k}] ({name})"
            bb = obj.find("bndbox")
            if bb is None:
                raise fail(file, field, "has no <bndbox>")
            box = [value(bb, t, file, f"{field}.bndbox") for t in ("xmin", "ymin", "xmax", "ymax")]
            img["boxes"].append(_xyxy(box, file, f"{field}.bndbox"))
            img["labels"].append(index[name])
            difficult = (obj.findtext("difficult") or "0").strip() or "0"
            if difficult not in ("0", "1"):
                raise fail(file, f"{field}.difficult", f"{shown(difficult)} is neither 0 nor 1")
            img["difficult"].append(int(difficult))
        size = root.find("size")
        sizes.append(None if size is None else [int(value(size, "height", file, "size", above=0, integer=True)),
                                                int(value(size, "width", file, "size", above=0, integer=True))])
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
        rows = []
        for number_, line in enumerate(read_text(file, "YOLO label file").splitlines(), 1):
            fields = line.split()
            if not fields:
                continue
            where = f"{file}:{number_}"
            if len(fields) != 5:
                raise UserError(f"labels: {where}: each line must be 'class cx cy w h', found {len(fields)} values")
            try:
                values = [float(v) for v in fields]
            except ValueError:
                raise UserError(f"labels: {where}: {line.strip()!r} holds a value that is not a number") from None
            cls = number(values[0], where, "class", minimum=0, integer=True)
            cx, cy, bw, bh = (number(v, where, n, minimum=0) for v, n in zip(values[1:], ("cx", "cy", "w", "h")))
            rows.append([cls, cx, cy, bw, bh])
        rows = np.asarray(rows, np.float64).reshape(-1, 5)
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
