"""Outside a pipeline, advice is applied by converting again: the remedy files written beside a
standalone ``compare`` or ``fix``, and the ``ascendpipe convert`` line (and, for the CANN toolkit,
the ``atc`` flags) that reads them.

The line repeats the target's own conversion (its convert.json's recorded atc argv: precision mode,
SoC, input shape, AIPP, ...) with the remedy files in place of its own, so pasting it converts the
same model the same way plus the remedy. Pure but for ``write_remedy_files`` and reading convert.json.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

# a remedy file's name -> the ATC option that reads it (ascendpipe convert takes the same, hyphenated)
REMEDY_OPTIONS = {"keep_dtype.cfg": "keep_dtype", "fusion_switch.cfg": "fusion_switch_file",
                  "aipp.cfg": "insert_op_conf", "op_precision_mode.ini": "op_precision_mode"}
# ATC options ``ascendpipe convert`` takes as they are (with a value); any other atc option is left out
_CONVERT_TAKES = {"soc_version", "input_shape", "input_format", "precision_mode", "precision_mode_v2", "keep_dtype",
                  "fusion_switch_file", "insert_op_conf", "modify_mixlist", "dynamic_batch_size",
                  "dynamic_image_size", "dynamic_dims", "input_shape_range", "op_select_implmode",
                  "optypelist_for_implmode", "op_precision_mode"}
_FILE_OPTIONS = ("keep_dtype", "fusion_switch_file", "insert_op_conf", "modify_mixlist", "op_precision_mode")
_SHAPE_OPTIONS = ("input_shape", "dynamic_batch_size", "dynamic_image_size", "dynamic_dims", "input_shape_range")


def remedy_items(advice: list[dict]) -> dict[str, str]:
    """file name -> content of the remedy files the advice prints (the first of each name: the
    items are in the order they apply)."""
    files: dict[str, str] = {}
    for item in advice or []:
        spec = item.get("file")
        if spec and spec.get("name") in REMEDY_OPTIONS:
            files.setdefault(spec["name"], spec["content"])
    return files


def write_remedy_files(out_dir: Path, files: dict[str, str]) -> dict[str, Path]:
    from ascendpipe.fsutil import write_text_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return {name: write_text_atomic(out_dir / name, text) for name, text in files.items()}


def target_record(target: Path) -> dict | None:
    """The convert.json of the conversion behind ``target`` (a converted model dir or its model file);
    the ascend backend's nests the settings under "settings"."""
    folder = Path(target) if Path(target).is_dir() else Path(target).parent
    try:
        record = json.loads((folder / "convert.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("settings"), dict):
        record = {**{k: v for k, v in record.items() if k != "settings"}, **record["settings"]}
    return record


def _atc_options(record: dict | None, folder: Path) -> tuple[str | None, list[tuple[str, str]]]:
    """(model, [(option, value)]) of the recorded atc argv, remedy paths relative to the convert
    folder made absolute."""
    argv = (record or {}).get("atc_argv") or []
    # shape options the emulator derived for the board line (batch 1, a placeholder) were not the user's
    derived = ((record or {}).get("atc_shapes") or {}).get("source") not in (None, "given")
    model, options = None, []
    for arg in argv[1:] if argv else []:
        if not isinstance(arg, str) or not arg.startswith("--") or "=" not in arg:
            continue
        name, value = arg[2:].split("=", 1)
        if name == "model":
            model = value
        elif name in ("framework", "output") or (derived and name in _SHAPE_OPTIONS):
            continue
        else:
            if name in _FILE_OPTIONS and value.startswith("./"):
                value = str(folder / value[2:])
            options.append((name, value))
    return model, options


def _overflow_option(record: dict | None) -> list[tuple[str, str]]:
    """The emulator's overflow mode, where the target was converted with one set (not the SoC's default)."""
    if record and record.get("overflow_mode_source") == "param" and record.get("overflow_mode"):
        return [("overflow_mode", str(record["overflow_mode"]))]
    return []


def apply_lines(files: dict[str, Path], *, target: Path | None, golden: Path | None, new_output: Path,
                backend: str = "onnxruntime", options: list[tuple[str, str]] | None = None) -> list[str]:
    """The lines that apply the remedy ``files`` (name -> written path) outside a pipeline: the
    ``ascendpipe convert`` line redoing the target's conversion with them and, on the ascend backend,
    the atc flags (and the target's atc line with them in). ``options``: the conversion's ATC options
    where there is no target to read them from (fix: its precision mode and SoC)."""
    if not files:
        return []
    record = target_record(target) if target is not None else None
    folder = Path(target) if target is not None and Path(target).is_dir() else Path(target or ".").parent
    model, recorded = _atc_options(record, folder)
    options = recorded if record else list(options or [])
    model = model or (str(golden) if golden is not None and str(golden).endswith(".onnx") else None)
    replaced = {REMEDY_OPTIONS[name] for name in files}
    kept = [(k, v) for k, v in options if k not in replaced]
    remedy = [(REMEDY_OPTIONS[name], str(path)) for name, path in files.items()]
    flags = [(k, v) for k, v in kept if k in _CONVERT_TAKES] + _overflow_option(record) + remedy
    words = ["ascendpipe", "convert", "--model", model or "MODEL.onnx", "--output", str(new_output)]
    for name, value in flags:
        words += [f"--{name.replace('_', '-')}", value]
    if backend == "ascend":
        words += ["--backend", "ascend"]
    lines = ["apply it outside a pipeline (convert again with the remedy files):", "  " + shlex.join(words)]
    if model is None:
        lines.append("  (MODEL.onnx: the fp32 model the target was converted from; add the flags that converted it)")
    atc_flags = " ".join(f"--{k}={shlex.quote(v)}" for k, v in remedy)
    if backend == "ascend":
        lines.append(f"  atc flags: {atc_flags}")
        if record and record.get("atc_argv"):
            atc = [str(record["atc_argv"][0])] + [f"--{k}={v}" for k, v in
                                                  [("framework", "5"), ("model", model or "MODEL.onnx"), *kept, *remedy,
                                                   ("output", str(Path(new_output) / "model"))]]
            lines.append("  " + shlex.join(atc))
    else:
        lines.append(f"  (on a board, the same files go to atc: {atc_flags})")
    return lines
