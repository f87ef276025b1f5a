"""TEST DOUBLE of ``python3 -m ais_bench`` (not the real tool).

Checks its argv against ais_bench's documented options, runs the atc double's OM (an ONNX) with
onnxruntime, and writes ``{output}/{ts or output_dirname}/{first input name}_{k}.npy``, the sibling
``{ts}_summary.json``, and, with ``--acl_json_path``, dumps in the documented tree. With
``CANN_DOUBLE_PROFILE_OUT`` set (by the msprof double) it also writes per-op times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _cann_double as d  # noqa: E402
import _dump_double as dd  # noqa: E402

TOOL = "ais_bench"


class Parser(argparse.ArgumentParser):
    def error(self, message):
        d.fail(TOOL, message)


def parse(argv):
    p = Parser(prog="ais_bench", allow_abbrev=False)
    p.add_argument("--model", required=True)
    p.add_argument("--input")
    p.add_argument("--output")
    p.add_argument("--output_dirname")
    p.add_argument("--outfmt", default="BIN", choices=["NPY", "BIN", "TXT"])
    p.add_argument("--loop", type=int, default=1)
    p.add_argument("--warmup_count", type=int, default=1)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--batchsize", type=int)
    p.add_argument("--debug", type=int, default=0)
    p.add_argument("--acl_json_path")
    p.add_argument("--dymBatch", type=int, default=0)
    for flag in ("--dymHW", "--dymDims", "--dymShape", "--outputSize", "--pure_data_type",
                 "--profiler", "--dump", "--run_mode", "--display_all_summary", "--output_batchsize_axis"):
        p.add_argument(flag)
    args = p.parse_args(argv)
    # path_security_check: PATH_WHITE_LIST_REGEX and no soft links (see _cann_double.PATH_REFUSED)
    for flag, value in (("--model", args.model), ("--output", args.output), ("--acl_json_path", args.acl_json_path)):
        if value:
            d.check_path(TOOL, flag, value)
    d.check_not_link(TOOL, "--model", args.model)
    for value in (args.input or "").split(","):
        if value:
            d.check_path(TOOL, "--input", value)
            d.check_not_link(TOOL, "--input", value)
    if args.output_dirname and not args.output:
        d.fail(TOOL, "--output_dirname needs --output")
    if args.loop < 1 or args.warmup_count < 0:
        d.fail(TOOL, "--loop >= 1 and --warmup_count >= 0")
    return args


def check_feed(args, model, feeds: dict) -> None:
    """What the device takes (ais_bench ``set_session_options``: --dymBatch, --dymHW, --dymDims or --dymShape
    picks a dynamic OM's gear, else the static shape): each input file must hold exactly the OM input's size,
    as ais_bench checks it ("tensorsize ... filesize ... not match")."""
    shapes = d.om_shapes(model)
    dims = d.om_input_dims(model)
    option = shapes.get("option")
    picked = {"dynamic_batch_size": args.dymBatch or None, "dynamic_image_size": args.dymHW,
              "dynamic_dims": args.dymDims}
    if option and not picked[option]:
        d.fail(TOOL, f"the OM was built with --{option}: give {dict(zip(d.GEARS, ('--dymBatch', '--dymHW', '--dymDims')))[option]}")
    want = {n: list(v) for n, v in dims.items()}
    if option == "dynamic_batch_size":
        if [args.dymBatch] not in shapes["gears"]:
            d.fail(TOOL, f"--dymBatch {args.dymBatch} is not a gear of the OM {shapes['gears']}")
        want = {n: [args.dymBatch if v is None else v for v in dims_] for n, dims_ in dims.items()}
    elif option == "dynamic_image_size":
        hw = [int(v) for v in args.dymHW.split(",")]
        if hw not in shapes["gears"]:
            d.fail(TOOL, f"--dymHW {args.dymHW} is not a gear of the OM {shapes['gears']}")
        want = {n: (v[:-2] + hw if None in v else v) for n, v in dims.items()}
    elif option == "dynamic_dims":
        given = {k: [int(x) for x in v.split(",")] for k, _, v in
                 (part.rpartition(":") for part in args.dymDims.split(";") if part)}
        values = [x for n, v in dims.items() for x, g in zip(given.get(n, v), v) if g is None]
        if values not in shapes["gears"]:
            d.fail(TOOL, f"--dymDims {args.dymDims} is not a gear of the OM {shapes['gears']}")
        want = given
    itemsize = {i.name: np.dtype(d.om_input_numpy_dtype(i)).itemsize for i in model.graph.input}
    for name, array in feeds.items():
        target = want.get(name)
        if target is None or None in target:
            continue  # a range OM: --dymShape (not checked by the double)
        # the byte size of the OM's input (its own dtype: uint8 for an AIPP input) against the file's bytes
        # (ais_bench infer/interface.py / utils: "tensorsize ... filesize ... not match")
        size = int(np.prod(target)) * itemsize.get(name, 4)
        if size != array.nbytes or list(array.shape) != list(target):
            d.fail(TOOL, f"input '{name}': tensorsize: {size} filesize: {array.nbytes} not match "
                         f"(the OM takes {target}, the file holds {list(array.shape)})")


def input_files(spec: str, n_inputs: int) -> list[list[Path]]:
    """Per inference, one file per model input: a comma list of dirs (matched by sorted order) or files."""
    parts = [Path(p) for p in spec.split(",")]
    if len(parts) % n_inputs:
        d.fail(TOOL, f"--input has {len(parts)} entries for a model with {n_inputs} inputs")
    if all(p.is_dir() for p in parts):
        lists = [sorted(p.glob("*.npy")) for p in parts]
        if len({len(x) for x in lists}) != 1 or not lists[0]:
            d.fail(TOOL, "--input dirs must hold the same number (>0) of .npy files")
        return [list(files) for files in zip(*lists)]
    if all(p.is_file() for p in parts):
        return [parts[i:i + n_inputs] for i in range(0, len(parts), n_inputs)]
    d.fail(TOOL, "--input must be existing dirs or existing files")


def read_acl(path: str, om_stem: str) -> dict:
    cfg = json.loads(Path(path).read_text()).get("dump")
    if not isinstance(cfg, dict):
        d.fail(TOOL, "acl.json has no 'dump' object")
    for key in ("dump_list", "dump_path", "dump_mode", "dump_op_switch"):
        if key not in cfg:
            d.fail(TOOL, f"acl.json dump has no '{key}'")
    if cfg["dump_mode"] not in ("input", "output", "all") or cfg.get("dump_data", "tensor") not in ("tensor", "stats"):
        d.fail(TOOL, "acl.json dump_mode must be input|output|all, dump_data tensor|stats")
    if not Path(cfg["dump_path"]).is_absolute():
        d.fail(TOOL, "acl.json dump_path must be absolute")
    names = [e.get("model_name") for e in cfg["dump_list"]]
    if cfg["dump_op_switch"] == "off" and om_stem not in names:
        d.fail(TOOL, f"acl.json dump_list model_name {names} does not name the OM '{om_stem}'")
    return cfg


def forced_formats() -> dict[str, str]:
    """``CANN_DOUBLE_DUMP_FORMAT=op=FORMAT[,op=FORMAT]``: store those ops' outputs in another layout (a test
    of a layout the reader cannot convert)."""
    text = os.environ.get("CANN_DOUBLE_DUMP_FORMAT", "")
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


# CANN_DOUBLE_DUMP_FP16=op[,op]: those ops' outputs dumped as fp16 (the device's numerics for them; the double
# otherwise runs the OM in fp32)
def dump_run(cfg, model, outputs: dict, feeds: dict, om_stem: str, run_dir: Path, index: int) -> None:
    """One binary dump file per op (DumpData header + tensor bytes, _dump_double), each tensor in the
    layout the device keeps it in (feature maps NC1HWC0, Conv weights FRACTAL_Z, matmul results FRACTAL_NZ)."""
    from onnx import numpy_helper

    leaf = run_dir / "0" / om_stem / "1" / str(index)
    leaf.mkdir(parents=True, exist_ok=True)
    layers = set(cfg["dump_list"][0].get("layer") or []) if cfg["dump_list"] else set()
    produced = {**feeds, **outputs}
    weights = {w.name: w for w in model.graph.initializer}
    forced = forced_formats()
    half = set(filter(None, os.environ.get("CANN_DOUBLE_DUMP_FP16", "").split(",")))
    for task, op in enumerate(d.om_ops(model)):
        if layers and op["name"] not in layers:
            continue
        outs, ins = [], []
        if cfg["dump_mode"] in ("output", "all"):
            for k, t in enumerate(op["outputs"]):
                if t in produced:
                    array = produced[t]
                    if op["name"] in half and array.dtype == np.float32:  # this op ran in fp16 on the "device"
                        array = array.astype(np.float16)
                    # original_op: the op (and output) this output stands for, as the OM JSON's
                    # _datadump_origin_name gives it (the runtime writes it from the same op desc attrs)
                    outs.append(dd.tensor_fields(array, forced.get(op["name"]) or dd.device_format(array, op["type"]),
                                                 original_op=(op["origin"], k)))
        if cfg["dump_mode"] in ("input", "all"):
            for t in op["inputs"]:
                if t in weights:
                    array = numpy_helper.to_array(weights[t])
                    ins.append(dd.tensor_fields(array, "FRACTAL_Z" if op["type"] == "Conv2D" and array.ndim == 4 else "ND"))
                elif t in produced:
                    ins.append(dd.tensor_fields(produced[t], dd.device_format(produced[t], op["type"])))
        if op["name"] in set(filter(None, os.environ.get("CANN_DOUBLE_DUMP_NEGATIVE_DIM", "").split(","))) and outs:
            # a damaged header: -1 written into the uint64 dim (protobuf stores 2**64 - 1), the tensor's bytes unchanged
            outs[0] = {**outs[0], "shape": [(1 << 64) - 1, *outs[0]["shape"][1:]]}
        safe = lambda s: s.replace(".", "_").replace("/", "_").replace("\\", "_").replace(" ", "_")
        name = f"{safe(op['type'])}.{safe(op['name'])}.{task + 1}.0.{d.timestamp_us() + task}"
        if len(name) >= 255:  # too long for a file name: a digits-only hash plus a 'hash,name' row in mapping.csv
            # (what msaccucmp expects: dump_parse/dump.py:184, mapping.py:30-38 in mindstudio-probe 26.2)
            hashed = str(int(hashlib.sha256(name.encode()).hexdigest()[:15], 16))
            with open(leaf / "mapping.csv", "a", encoding="utf-8") as fh:
                fh.write(f"{hashed},{name}\n")
            name = hashed
        (leaf / name).write_bytes(dd.encode(op["name"], outs, ins, dump_time=d.timestamp_us()))


def session_for(model, *, dump: bool, profile_prefix: str | None):
    import onnx
    import onnxruntime as ort

    if dump:
        known = {o.name for o in model.graph.output}
        for op in d.om_ops(model):
            for t in op["outputs"]:
                if t and t not in known:
                    model.graph.output.append(onnx.ValueInfoProto(name=t))
                    known.add(t)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # no onnxruntime graph rewrites: op names in dumps and profiles stay the OM's node names
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def stats(values):
    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()), "median": float(np.median(a)),
            "percentile(99%)": float(np.percentile(a, 99)), "count": int(a.size)}


def write_profile(session, model, path: str) -> None:
    trace = json.loads(Path(session.end_profiling()).read_text())
    rows = [{"op_name": e["name"][: -len("_kernel_time")], "op_type": e.get("args", {}).get("op_name", ""),
             "start_us": float(e["ts"]), "duration_us": float(e.get("dur", 0))}
            for e in trace if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    Path(path).write_text(json.dumps(rows))


def main(argv):
    args = parse(argv)
    model = d.load_fake_om(TOOL, args.model)
    om_stem = Path(args.model).stem
    acl = read_acl(args.acl_json_path, om_stem) if args.acl_json_path else None
    profile_out = os.environ.get("CANN_DOUBLE_PROFILE_OUT")
    graph_outputs = [o.name for o in model.graph.output]  # before session_for adds the dumped tensors
    session = session_for(model, dump=acl is not None, profile_prefix=(profile_out + ".ort") if profile_out else None)
    in_names = [i.name for i in session.get_inputs()]
    out_names = [o.name for o in session.get_outputs()]
    runs = input_files(args.input, len(in_names)) if args.input else None
    if runs is None:
        d.fail(TOOL, "the double needs --input (pure_infer_data is not emulated)")
    ts = time.strftime("%Y_%m_%d-%H_%M_%S")
    output = Path(args.output) if args.output else None
    result_dir = output / (args.output_dirname or ts) if output else None
    if result_dir:
        result_dir.mkdir(parents=True, exist_ok=True)
    dump_run_dir = Path(acl["dump_path"]) / time.strftime("%Y%m%d%H%M%S") if acl else None
    compute, h2d, d2h = [], [], []
    for files in runs:
        check_feed(args, model, {n: np.load(f) for n, f in zip(in_names, files)})
    feeds0 = {n: np.load(f) for n, f in zip(in_names, runs[0])}
    for _ in range(args.warmup_count):
        session.run(None, feeds0)
    for index, files in enumerate(runs):
        t0 = time.perf_counter()
        feeds = {n: np.load(f) for n, f in zip(in_names, files)}
        h2d.append((time.perf_counter() - t0) * 1000)
        for _ in range(args.loop):
            t0 = time.perf_counter()
            values = session.run(None, feeds)
            compute.append((time.perf_counter() - t0) * 1000)
        produced = dict(zip(out_names, values))
        if acl:
            dump_run(acl, model, produced, feeds, om_stem, dump_run_dir, index)
        t0 = time.perf_counter()
        if result_dir:
            stem = files[0].stem
            for k, name in enumerate(graph_outputs):
                target = result_dir / f"{stem}_{k}"
                if args.outfmt == "NPY":
                    np.save(f"{target}.npy", produced[name])
                elif args.outfmt == "BIN":
                    produced[name].tofile(f"{target}.bin")
                else:
                    np.savetxt(f"{target}.txt", produced[name].reshape(-1))
        d2h.append((time.perf_counter() - t0) * 1000)
    if profile_out:
        write_profile(session, model, profile_out)
    batch = args.batchsize or (feeds0[in_names[0]].shape[0] if feeds0[in_names[0]].ndim else 1)
    summary = {"filesinfo": {str(i): [str(f) for f in files] for i, files in enumerate(runs)},
               "args": vars(args), "NPU_compute_time": stats(compute), "H2D_latency": stats(h2d),
               "D2H_latency": stats(d2h), "throughput": 1000.0 * batch / float(np.mean(compute)),
               "npu_compute_time_list": compute, "pid": os.getpid()}
    if output:
        (output / f"{ts}_summary.json").write_text(json.dumps(summary, indent=2))
    s = summary["NPU_compute_time"]
    print(f"[INFO] NPU_compute_time (ms): min = {s['min']:.3f}, max = {s['max']:.3f}, mean = {s['mean']:.3f}, "
          f"median = {s['median']:.3f}, percentile(99%) = {s['percentile(99%)']:.3f}")
    print(f"[INFO] throughput 1000*batchsize.mean({batch})/NPU_compute_time.mean({s['mean']:.3f}): "
          f"{summary['throughput']:.3f}")
    return 0


sys.exit(main(sys.argv[1:]))
