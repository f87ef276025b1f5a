"""Letterbox and resize preprocessing (pure numpy), the per-image metadata it writes, and its undo.

Letterbox (YOLO's): scale the image by ``r = min(H / h, W / w)`` to ``round(w r) x round(h r)``
(bilinear, below), then pad to the model input ``H x W`` with ``pad_value``, the padding split
evenly (the odd pixel right / bottom). Ties: ``round`` is Python's, half to even, as ultralytics'
``int(round(w * r))`` (a 7-pixel side scaled by 0.5 gives 4, a 5-pixel one 2); the pixel values of
the resized image round half up (``floor(v + 0.5)``: 2.5 -> 3), where OpenCV's ``cvRound`` rounds
half to even (2.5 -> 2): the two can differ by one level on an exact .5. The metadata of one image is
``{"size": [h, w], "scale": [sx, sy], "pad": [left, top], "input_size": [H, W]}`` with
``sx = new_w / w`` and ``sy = new_h / h`` (each axis's exact scale after rounding), so undoing it,
``x = (x' - left) / sx``, inverts the forward map exactly. ``mode: resize`` stretches to ``H x W``
(no padding: ``pad`` is ``[0, 0]``).

Resize: bilinear with half-pixel centres, sample ``(i + 0.5) / scale - 0.5`` clamped to the image
(ONNX ``Resize`` mode linear, coordinate_transformation_mode half_pixel; OpenCV's INTER_LINEAR when
upscaling), rounded to uint8.

As a data step (a ``run`` stage)::

    python -m ascendpipe.data.letterbox data/frames.npz --size 64 64 --out data/val --mean 114 --scale 0.00392157

reads the uint8 HWC images of an .npz (in the order of its keys, sorted) or of a folder of .npy
files (sorted), and writes ``images.npy`` (float32 NCHW, ``(u8 - mean) * scale``), ``u8/images.npy``
(uint8 NHWC, letterboxed) and ``letterbox.json`` (``{"mode", "input_size", "pad_value", "images":
[metadata per image]}``), which the detection eval's ``letterbox`` input reads to map boxes back.
``--resized DIR`` also writes the scaled, unpadded uint8 images there (for an AIPP that pads on
the device; all images must then scale to the same size).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from ascendpipe.errors import UserError

MODES = ("letterbox", "resize")
META_FILE = "letterbox.json"


def plan(size_hw, input_hw, mode: str = "letterbox") -> dict:
    """The metadata of one image of ``size_hw`` going into ``input_hw``."""
    h, w = int(size_hw[0]), int(size_hw[1])
    H, W = int(input_hw[0]), int(input_hw[1])
    if min(h, w, H, W) <= 0:
        raise UserError(f"letterbox: sizes must be positive, got image {h}x{w} into {H}x{W}")
    if mode == "resize":
        new_h, new_w = H, W
    elif mode == "letterbox":
        r = min(H / h, W / w)
        new_h, new_w = min(H, max(1, int(round(h * r)))), min(W, max(1, int(round(w * r))))
    else:
        raise UserError(f"letterbox: mode must be one of {', '.join(MODES)}, got {mode!r}")
    left, top = (W - new_w) // 2, (H - new_h) // 2
    return {"size": [h, w], "scale": [new_w / w, new_h / h], "pad": [left, top], "input_size": [H, W],
            "resized": [new_h, new_w]}


def _axis_weights(n_in: int, n_out: int):
    x = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    x = np.clip(x, 0, n_in - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, x - lo


def resize_bilinear(images: np.ndarray, out_hw) -> np.ndarray:
    """Bilinear, half-pixel centres, of NHWC images (float64 result, not rounded)."""
    x = np.asarray(images, dtype=np.float64)
    (y0, y1, fy), (x0, x1, fx) = _axis_weights(x.shape[1], int(out_hw[0])), _axis_weights(x.shape[2], int(out_hw[1]))
    rows = x[:, y0] * (1 - fy)[None, :, None, None] + x[:, y1] * fy[None, :, None, None]
    return rows[:, :, x0] * (1 - fx)[None, None, :, None] + rows[:, :, x1] * fx[None, None, :, None]


def to_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(np.asarray(x) + 0.5), 0, 255).astype(np.uint8)


def apply(image: np.ndarray, meta: dict, pad_value=114) -> np.ndarray:
    """One uint8 HWC image letterboxed (or resized) as ``meta`` says: uint8 ``H x W x C``."""
    img = np.asarray(image)
    if img.ndim == 2:
        img = img[..., None]
    new_h, new_w = meta["resized"]
    scaled = img if (new_h, new_w) == img.shape[:2] else to_u8(resize_bilinear(img[None], (new_h, new_w))[0])
    H, W = meta["input_size"]
    out = np.empty((H, W, img.shape[2]), dtype=np.uint8)
    out[...] = np.asarray(pad_value, dtype=np.float64).astype(np.uint8)
    left, top = meta["pad"]
    out[top:top + new_h, left:left + new_w] = scaled
    return out


def scaled_only(image: np.ndarray, meta: dict) -> np.ndarray:
    """The scaled, unpadded uint8 image (what an AIPP that pads on the device takes)."""
    img = np.asarray(image)
    img = img[..., None] if img.ndim == 2 else img
    new_h, new_w = meta["resized"]
    return img if (new_h, new_w) == img.shape[:2] else to_u8(resize_bilinear(img[None], (new_h, new_w))[0])


def normalise(u8_nhwc: np.ndarray, mean=0.0, scale=1.0 / 255.0) -> np.ndarray:
    """``(u8 - mean) * scale`` per channel, as float32 NCHW (the training preprocessing)."""
    x = (np.asarray(u8_nhwc, dtype=np.float64) - np.asarray(mean, dtype=np.float64)) * np.asarray(scale, np.float64)
    return x.astype(np.float32).transpose(0, 3, 1, 2).copy()


def _scale_pad(meta: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    try:
        scale = np.broadcast_to(np.asarray(meta["scale"], dtype=np.float64).reshape(-1), (2,))
        pad = np.asarray(meta.get("pad", [0, 0]), dtype=np.float64).reshape(2)
    except (KeyError, TypeError, ValueError):
        raise UserError("letterbox metadata: each image needs 'scale' (a number or [sx, sy]) and 'pad' "
                        f"([left, top]); got {meta!r}"[:300]) from None
    size = meta.get("size")
    return scale, pad, None if size is None else np.asarray(size, dtype=np.float64).reshape(2)


def undo_boxes(boxes, meta: dict, clip: bool = True) -> np.ndarray:
    """xyxy boxes in the model input's pixels -> the original image's, clipped to it (when its size is known)."""
    scale, pad, size = _scale_pad(meta)
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    out = np.empty_like(b)
    out[:, [0, 2]] = (b[:, [0, 2]] - pad[0]) / scale[0]
    out[:, [1, 3]] = (b[:, [1, 3]] - pad[1]) / scale[1]
    if clip and size is not None:
        out[:, [0, 2]] = out[:, [0, 2]].clip(0, size[1])
        out[:, [1, 3]] = out[:, [1, 3]].clip(0, size[0])
    return out


def forward_boxes(boxes, meta: dict) -> np.ndarray:
    """xyxy boxes in the original image -> the model input's pixels (what the letterbox does to them)."""
    scale, pad, _ = _scale_pad(meta)
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    out = np.empty_like(b)
    out[:, [0, 2]] = b[:, [0, 2]] * scale[0] + pad[0]
    out[:, [1, 3]] = b[:, [1, 3]] * scale[1] + pad[1]
    return out


def read_meta(path) -> list[dict]:
    """The per-image metadata list from ``letterbox.json`` (or a folder holding it), every field checked
    (a scale of 0 or a cut-short file is one line naming the file and the field, never a number of mAP)."""
    from ascendpipe.userfile import load_json

    path = Path(path)
    file = path / META_FILE if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"letterbox: {file} does not exist (a data step's {META_FILE})")
    try:
        data = load_json(file, "letterbox metadata")
    except UserError as err:
        raise UserError(f"letterbox: {err.message}") from None
    images = data.get("images") if isinstance(data, dict) else data
    if not isinstance(images, list) or not all(isinstance(m, dict) for m in images):
        raise UserError(f"letterbox: {file} must hold {{\"images\": [{{\"scale\", \"pad\", \"size\"}}, ...]}}")
    for i, meta in enumerate(images):
        try:
            check_meta(meta, file, f"images[{i}]")
        except UserError as err:
            raise UserError(f"letterbox: {err.message}") from None
    return images


def check_meta(meta: dict, file, field: str) -> None:
    """One image's metadata: ``scale`` a positive number or [sx, sy], ``pad`` [left, top] of numbers 0 or
    more, ``size`` and ``input_size`` [h, w] of positive numbers where given."""
    from ascendpipe.userfile import fail, number, numbers

    if "scale" not in meta:
        raise fail(file, field, "has no 'scale' (a number or [sx, sy])")
    scale = meta["scale"]
    if isinstance(scale, list) and len(scale) == 1:
        scale = scale[0]
    if isinstance(scale, list):
        numbers(scale, file, f"{field}.scale", 2, above=0)
    else:
        number(scale, file, f"{field}.scale", above=0)
    numbers(meta.get("pad", [0, 0]), file, f"{field}.pad", 2, minimum=0)
    for name in ("size", "input_size", "resized"):
        if meta.get(name) is not None:
            numbers(meta[name], file, f"{field}.{name}", 2, above=0)


def load_images(src) -> list[np.ndarray]:
    """The uint8 HWC images of an .npz (its keys sorted) or of a folder of .npy files (sorted), each
    checked: an empty, damaged or non-npz file, or frames that are not uint8 images, is one line."""
    import zipfile

    from ascendpipe.npyheader import check_npy_sizes, load_npy

    src = Path(src)
    named: list[tuple[str, np.ndarray]] = []
    try:
        if src.is_file() and src.suffix == ".npz":
            if src.stat().st_size == 0:
                raise UserError(f"letterbox: {src} is empty; give an .npz of uint8 HWC images")
            if not zipfile.is_zipfile(src):
                raise UserError(f"letterbox: {src} is not an .npz (numpy's zip of .npy arrays); give an .npz of "
                                "uint8 HWC images (np.savez)")
            check_npy_sizes(src, None, f"letterbox: {src}")  # the headers' claims, before numpy allocates them
            with np.load(src, allow_pickle=False) as data:
                if not hasattr(data, "files"):
                    raise UserError(f"letterbox: {src} is a single .npy array, not an .npz of images")
                named = [(f"{src}[{k}]", data[k]) for k in sorted(data.files)]
        elif src.is_dir():
            named = [(str(f), load_npy(f, None, f"letterbox: {f}")) for f in sorted(src.glob("*.npy"))]
        else:
            raise UserError(f"letterbox: {src} is neither an .npz of images nor a folder of .npy images")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UserError(f"letterbox: {src}: not a readable .npz/.npy of images ({str(exc).splitlines()[0][:120]})") from None
    if not named:
        raise UserError(f"letterbox: {src} holds no images")
    for where, img in named:
        if img.dtype != np.uint8:
            raise UserError(f"letterbox: {where}: {img.dtype} frames; the step takes uint8 images (0..255) as HWC, "
                            "before any normalisation (--mean and --scale apply it)")
        if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (1, 3, 4)) or 0 in img.shape:
            raise UserError(f"letterbox: {where}: shape {list(img.shape)} is not one HWC image (H, W, 1|3|4) or HW")
    return [img for _, img in named]


def _save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, array)
    os.replace(tmp, path)


def run(images: list[np.ndarray], input_hw, out: Path, *, mode="letterbox", pad_value=114, mean=0.0,
        scale=1.0 / 255.0, resized: Path | None = None) -> list[dict]:
    metas = [plan(np.shape(img)[:2], input_hw, mode) for img in images]
    u8 = np.stack([apply(img, m, pad_value) for img, m in zip(images, metas)])
    _save(out / "images.npy", normalise(u8, mean, scale))
    _save(out / "u8" / "images.npy", u8)
    if resized is not None:
        sizes = {tuple(m["resized"]) for m in metas}
        if len(sizes) != 1:
            raise UserError(f"letterbox --resized: the images scale to {len(sizes)} different sizes "
                            f"({sorted(sizes)[:3]}...); a static AIPP pads one size only")
        _save(resized / "images.npy", np.stack([scaled_only(img, m) for img, m in zip(images, metas)]))
    doc = {"mode": mode, "input_size": [int(input_hw[0]), int(input_hw[1])], "pad_value": pad_value, "images": metas}
    tmp = out / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(doc) + "\n")
    os.replace(tmp, out / META_FILE)
    return metas


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ascendpipe.data.letterbox", description=__doc__.splitlines()[0])
    parser.add_argument("src", help="an .npz of uint8 HWC images, or a folder of .npy images")
    parser.add_argument("--size", nargs=2, type=int, required=True, metavar=("H", "W"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=MODES, default="letterbox")
    parser.add_argument("--pad-value", type=float, default=114)
    parser.add_argument("--mean", type=float, nargs="+", default=[0.0])
    parser.add_argument("--scale", type=float, nargs="+", default=[1.0 / 255.0])
    parser.add_argument("--resized", default=None, help="also write the scaled, unpadded uint8 images here")
    args = parser.parse_args(argv)
    from ascendpipe.errors import UserError as _E

    import math

    for flag, values in (("--mean", args.mean), ("--scale", args.scale), ("--pad-value", [args.pad_value])):
        if len(values) not in (1, 3) or not all(math.isfinite(v) for v in values):
            raise SystemExit(f"error: {flag} {' '.join(map(str, values))}: give one finite number or three (per channel)")
    if not all(v > 0 for v in args.scale):
        raise SystemExit(f"error: --scale {' '.join(map(str, args.scale))}: must be above 0 (0 would make every input 0)")
    if not 0 <= args.pad_value <= 255:
        raise SystemExit(f"error: --pad-value {args.pad_value}: a uint8 value, 0..255")
    if min(args.size) <= 0:
        raise SystemExit(f"error: --size {args.size[0]} {args.size[1]}: must be positive")
    try:
        metas = run(load_images(args.src), args.size, Path(args.out), mode=args.mode, pad_value=args.pad_value,
                    mean=args.mean, scale=args.scale, resized=Path(args.resized) if args.resized else None)
    except _E as err:
        raise SystemExit(f"error: {err}") from None
    print(f"{args.mode}: {len(metas)} images -> {args.size[0]}x{args.size[1]} in {args.out}")


if __name__ == "__main__":
    main()
