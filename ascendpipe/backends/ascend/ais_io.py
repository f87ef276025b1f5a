"""ais_bench's file I/O: one .npy per batch and input in, ``{batch}_{k}.npy`` out, staged to and from the
emulator's layout (``outputs/<name>.npy``, padding dropped).
"""

from __future__ import annotations

import json
from pathlib import Path

from ascendpipe.backends.ascend import ais_bench
from ascendpipe.errors import UserError


def write_ais_inputs(batches, names: list[str], root: Path) -> list[Path]:
    """One directory per model input, one .npy per batch; ais_bench pairs files across dirs by order."""
    import numpy as np

    from ascendpipe.backends.ascend.tool_paths import file_name

    dirs = []
    for k, name in enumerate(names):
        d = root / file_name(name, k)
        d.mkdir(parents=True, exist_ok=True)
        for i, batch in enumerate(batches):
            np.save(d / f"{i:05d}.npy", np.require(batch[name], requirements="C"))  # a 0-d input stays 0-d
        dirs.append(d)
    return dirs


def with_inputs(argv: list[str], dirs: list[Path]) -> list[str]:
    argv = list(argv)
    argv[argv.index("--input") + 1] = ",".join(str(d) for d in dirs)
    return argv


def collect_outputs(result_dir: Path, batches, names: list[str], out_dir: Path) -> dict[str, dict]:
    """ais_bench's ``{batch}_{k}.npy`` files into the emulator's ``outputs/<name>.npy`` (padding dropped)."""
    import numpy as np

    from ascendpipe.backends.onnxruntime.infer import OUTPUTS_DIR, unique_file_names
    from ascendpipe.inputs import save_npy_atomic

    files = unique_file_names(names)
    (out_dir / OUTPUTS_DIR).mkdir(parents=True, exist_ok=True)
    described = {}
    for k, name in enumerate(names):
        parts = []
        for i, batch in enumerate(batches):
            path = result_dir / f"{i:05d}_{k}.npy"
            if not path.is_file():
                raise UserError(f"ais_bench wrote no {path.name} for output '{name}' in {result_dir}")
            value = np.load(path)
            first = next(iter(batch.values()))
            rows = getattr(batch, "rows", first.shape[0] if first.ndim else 1)  # a 0-d first input: no axis 0
            batched = value.ndim and value.shape[0] == rows
            if len(batches) == 1:  # one batch is written as the model returned it (a 0-d output stays 0-d)
                parts.append(value[: batch.valid] if batched else value)
            else:
                parts.append(value[: batch.valid] if batched else value[np.newaxis])
        array = parts[0] if len(parts) == 1 else np.concatenate(parts)
        save_npy_atomic(out_dir / OUTPUTS_DIR / files[name], array)
        described[name] = {"file": f"{OUTPUTS_DIR}/{files[name]}", "shape": list(array.shape), "dtype": str(array.dtype)}
    return described


def run_ais(ctx, tk, plan, batches, names, out, runner) -> dict:
    dirs = write_ais_inputs(batches, names, out / "ais_input")
    argv = with_inputs(plan.argvs[0], dirs)
    runner.run(argv, cwd=out, env={**tk.env, **plan.env}, log=ctx.log)
    summary_path = ais_bench.find_summary(out / "ais_output")
    if summary_path is None:
        raise UserError(f"ais_bench wrote no *_summary.json under {out / 'ais_output'}")
    return ais_bench.parse_summary(json.loads(summary_path.read_text()))
