"""onnxruntime sessions made the same way everywhere (infer, dump, profile, tune).

A converted model's directory may hold ``runtime.json`` (session settings from a tune knowledge
bank); it is honoured whenever that model runs. ``fusions=False`` forces ORT_DISABLE_ALL, which a
golden dump needs so that every original tensor exists.
"""

from __future__ import annotations

import re

import json
import threading
from pathlib import Path
from typing import Any

from ascendpipe.errors import Location, UserError
from ascendpipe.inputs import InputSpec

RUNTIME_FILE = "runtime.json"
# Where a model given as bytes finds its external weights (onnxruntime 1.21+, microsoft/onnxruntime#23557;
# an older onnxruntime ignores the key and would look in the working folder: see weights_by_reference)
WEIGHTS_DIR_KEY = "session.model_external_initializers_file_folder_path"
WEIGHTS_DIR_SINCE = (1, 21)


def weights_dir_supported() -> bool:
    """Whether this onnxruntime honours ``WEIGHTS_DIR_KEY``."""
    import onnxruntime as ort

    try:
        version = tuple(int(part) for part in ort.__version__.split(".")[:2])
    except ValueError:  # a dev build's odd version: take the copy path, which every version runs
        return False
    return version >= WEIGHTS_DIR_SINCE

_LEVELS = {
    "disable_all": "ORT_DISABLE_ALL",
    "ort_disable_all": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "ort_enable_basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "ort_enable_extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "ort_enable_layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
    "ort_enable_all": "ORT_ENABLE_ALL",
}
_MODES = {"sequential": "ORT_SEQUENTIAL", "ort_sequential": "ORT_SEQUENTIAL",
          "parallel": "ORT_PARALLEL", "ort_parallel": "ORT_PARALLEL"}

# ONNX tensor element type names as onnxruntime spells them -> numpy dtype names
_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(int16)": "int16", "tensor(uint16)": "uint16", "tensor(int32)": "int32",
    "tensor(uint32)": "uint32", "tensor(int64)": "int64", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool", "tensor(string)": "str",
}


def read_runtime(model_path: Path) -> dict[str, Any] | None:
    """The ``session`` settings of ``runtime.json`` beside the model, or None when there is none."""
    path = Path(model_path).parent / RUNTIME_FILE
    if not path.exists():
        return None
    where = Location(file=str(path))
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"invalid JSON: {exc}", where) from None
    session = data.get("session", {}) if isinstance(data, dict) else None
    if not isinstance(session, dict):
        raise UserError("expected {\"session\": {...}}", where)
    return session


def _lookup(table: dict[str, str], value: Any, field: str, where: Location) -> str:
    key = str(value).lower()
    if key not in table:
        choices = ", ".join(sorted({v for v in table.values()}))
        raise UserError(f"{field}: unknown value '{value}'; use one of {choices}", where)
    return table[key]


def session_options(runtime: dict[str, Any] | None, *, fusions: bool, profile_prefix: str | None = None,
                    where: Location | None = None):
    """``SessionOptions`` for the given runtime settings (unknown keys are a UserError)."""
    import onnxruntime as ort

    where = where or Location()
    runtime = dict(runtime or {})
    opts = ort.SessionOptions()
    known = {"graph_optimization_level", "intra_op_num_threads", "inter_op_num_threads",
             "execution_mode", "disabled_optimizers"}
    unknown = sorted(set(runtime) - known)
    if unknown:
        raise UserError(f"unknown session settings {', '.join(unknown)}; known: {', '.join(sorted(known))}", where)
    if "graph_optimization_level" in runtime:
        level = _lookup(_LEVELS, runtime["graph_optimization_level"], "graph_optimization_level", where)
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if not fusions:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # A QDQ (int8) model runs as fake-quant: dequantized values through fp32 kernels. Left to itself,
    # onnxruntime fuses QDQ groups into its x86 int8 kernels, whose u8s8 pair sums saturate int16 on
    # CPUs without VNNI (AVX2): the classify int8 model lost 15 points of Top-1 there and none on a
    # VNNI CPU. The device's cube accumulates int8 products in int32 without saturation, which the
    # fp32 path reproduces on every CPU (onnxruntime's "session.disable_quant_qdq" session option).
    opts.add_session_config_entry("session.disable_quant_qdq", "1")
    for key in ("intra_op_num_threads", "inter_op_num_threads"):
        if key in runtime:
            value = runtime[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1024:  # 1e8: never returned
                raise UserError(f"{key}: expected a non-negative integer, given {value!r}", where)
            setattr(opts, key, value)
    if "execution_mode" in runtime:
        mode = _lookup(_MODES, runtime["execution_mode"], "execution_mode", where)
        opts.execution_mode = getattr(ort.ExecutionMode, mode)
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    return opts, list(runtime.get("disabled_optimizers", []))


def make_session(model_path: str | Path | bytes, *, fusions: bool = True, runtime: dict | None = None,
                 profile_prefix: str | None = None, runtime_dir: Path | None = None, shared_arena: bool = False,
                 weights_dir: Path | None = None, threads: int | None = None):
    """An ``InferenceSession`` on the CPU provider.

    ``model_path`` may also be serialized model bytes (a dump's marked copy); then ``runtime_dir``
    says where to look for ``runtime.json``, and ``weights_dir`` the folder its external weights
    (references into the model file, ``wire.weights_by_reference``) are read from. ``runtime``
    given explicitly wins over the file. ``shared_arena``: allocate from the process's one shared
    arena (``use_shared_arena``) rather than the session's own. ``threads``: onnxruntime's
    intra-op threads unless ``runtime.json`` sets them (a dump sharing the cores with another).
    """
    import onnxruntime as ort

    if isinstance(model_path, (bytes, bytearray)):
        source, label = bytes(model_path), str(runtime_dir or "<model bytes>")
        runtime_file = (Path(runtime_dir) / "model.onnx") if runtime_dir else None
    else:
        source = label = str(model_path)
        runtime_file = Path(model_path)
        if not runtime_file.is_file():
            raise UserError("model file does not exist", Location(file=label))
        from ascendpipe import onnxexternal

        onnxexternal.check_model(runtime_file, label=label)  # its external data, strictly, before onnxruntime reads it
    if runtime is None and runtime_file is not None:
        runtime = read_runtime(runtime_file)
    where = Location(file=str(runtime_file.parent / RUNTIME_FILE) if runtime_file else None)
    opts, disabled = session_options(runtime, fusions=fusions, profile_prefix=profile_prefix, where=where)
    if threads is not None and "intra_op_num_threads" not in (runtime or {}):
        opts.intra_op_num_threads = threads
    if shared_arena and use_shared_arena():
        opts.add_session_config_entry("session.use_env_allocators", "1")
    if weights_dir is not None:
        opts.add_session_config_entry(WEIGHTS_DIR_KEY, str(weights_dir))
    extra = {"disabled_optimizers": disabled} if disabled else {}
    if opts.log_severity_level < 4:  # a load error is raised (below), not also logged in colour on stderr
        opts.log_severity_level = 4
    try:
        try:
            return ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"], **extra)
        except Exception as exc:  # noqa: BLE001 - retried only for the one failure below
            retry = _small_weights_inline(source, exc) if weights_dir is None else None
            if retry is None:
                raise
            opts.add_session_config_entry(WEIGHTS_DIR_KEY, str(retry[1]))
            return ort.InferenceSession(retry[0], sess_options=opts, providers=["CPUExecutionProvider"], **extra)
    except Exception as exc:  # ORT raises its own exception types for bad models
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"onnxruntime cannot load the model: {without_cpp(first)}", Location(file=label)) from None


def _small_weights_inline(source, exc: Exception):
    """(model bytes, weights folder) for a model file whose small weights are external data too
    (``save_as_external_data(size_threshold=0)``): onnxruntime's shape inference cannot read a Reshape's
    or a ReduceSum's external constant ("Cannot parse data from external tensors"), so those are read
    in and the big weights still mapped from their files; None for any other failure."""
    if isinstance(source, bytes) or "Cannot parse data from external tensors" not in str(exc) \
            or not weights_dir_supported():
        return None
    from ascendpipe.onnxexternal import external_model_bytes

    path = Path(source).resolve()
    with open(path, "rb") as handle:
        raw = external_model_bytes(handle, path.parent, 256 << 20)
    return None if raw is None else (raw, path.parent)


def checked_run(run, *args, label: str | None = None):
    """``run(*args)`` (a session's run, run_with_iobinding): onnxruntime refusing the values it was given
    (a scale of inf, a negative depth, an IoU threshold beyond 1) is one line, not an internal error."""
    try:
        return run(*args)
    except Exception as exc:
        if not type(exc).__module__.startswith("onnxruntime"):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", without_cpp(first))
        raise UserError(f"onnxruntime cannot run the model on these input values: {first}; check the inputs "
                        "(their values, not only their shapes)", Location(file=label)) from None


def without_cpp(text: str) -> str:
    """onnxruntime's message without the C++ source place and function signature it quotes
    (``/onnxruntime_src/.../x.cc:294 onnxruntime::common::Status f(const A&, ...) what failed``)."""
    import re

    match = re.search(r"\s*/?[\w./-]+\.(?:cc|cpp|h):\d+\s", text)
    if not match:
        return text
    end, depth = match.end(), 0
    for index in range(match.end(), len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                end = index + 1
                break
    return f"{text[:match.start()].rstrip()} {text[end:].strip()}".strip()


_SHARED_ARENA: bool | None = None
_SHARED_ARENA_LOCK = threading.Lock()
_SMALL_RUN = None  # a one-op session on the shared arena (see _small_run)


def use_shared_arena() -> bool:
    """Register, once per process, a CPU arena that sessions asking for it share (False if this
    onnxruntime cannot).

    A session's own arena is new memory, and the first touch of each page is a page fault: a dump
    marks every tensor as an output, so its run touches the whole dump's size afresh (the 430-node
    detector's golden: 120k faults, 0.3 s of a 0.5 s run; a second run of the same session, 0.23 s).
    Sessions made one after another (a dump's segments) reuse the shared arena's pages instead;
    ``shrink_shared_arena`` hands the free ones back when the dump is done.
    """
    global _SHARED_ARENA
    with _SHARED_ARENA_LOCK:
        if _SHARED_ARENA is None:
            import onnxruntime as ort

            try:
                memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
                # max_mem 0: no cap; extend strategy 1 (kSameAsRequested): grow by what is asked, not
                # by powers of two, so the arena stays near the largest run; -1: onnxruntime's defaults
                ort.create_and_register_allocator(memory, ort.OrtArenaCfg(0, 1, -1, -1))
                # onnxruntime's shrink never frees an arena's first region, which is as large as the
                # first request: a four-byte request makes it its default 1 MiB, so every region a
                # dump's tensors add can be handed back
                _small_run(shrink=False)
            except Exception:  # noqa: BLE001 - an onnxruntime without the API (its errors are not RuntimeErrors): own arenas
                _SHARED_ARENA = False
            else:
                _SHARED_ARENA = True
        return _SHARED_ARENA


def shrink_shared_arena() -> None:
    """Hand the shared arena's free memory back to the OS (a dump calls it when done: what it held
    for reuse between its runs would otherwise stay with the process)."""
    if _SHARED_ARENA:
        with _SHARED_ARENA_LOCK:
            try:
                _small_run(shrink=True)
            except Exception:  # noqa: BLE001 - memory not handed back is no reason to fail a finished dump
                pass


def _small_run(*, shrink: bool) -> None:
    """One run of a one-op session on the shared arena. onnxruntime shrinks the arenas of a session
    at the end of a run that asks for it ("memory.enable_memory_arena_shrinkage"); the shared one is
    this session's arena too. Called under the lock."""
    global _SMALL_RUN
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if _SMALL_RUN is None:
        _SMALL_RUN = small_session([helper.make_node("Neg", ["x"], ["y"])], TensorProto.FLOAT,
                                   {"y": TensorProto.FLOAT}, shared_arena=True)
    run_options = ort.RunOptions()
    if shrink:
        run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    _SMALL_RUN.run(None, {"x": np.zeros(1, np.float32)}, run_options)


def small_session(nodes: list, input_type: int, outputs: dict[str, int], *, shared_arena: bool = False):
    """A session of ``nodes`` over one 1-D input "x" of ``input_type`` (``outputs``: name -> type), for
    the small helper runs (float16 casts, the arena's shrink): no optimiser (it must not fold a Cast
    pair), one thread (they are called from several threads at once), onnxruntime's own log quiet."""
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", input_type, ["n"])],
                              [helper.make_tensor_value_info(name, kind, ["n"]) for name, kind in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    if shared_arena:
        options.add_session_config_entry("session.use_env_allocators", "1")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def spec_from_node_arg(arg) -> InputSpec:
    shape = tuple(d if isinstance(d, int) else (d or None) for d in (arg.shape or ()))
    return InputSpec(arg.name, shape, _ORT_TYPES.get(arg.type, arg.type))


def input_specs(session) -> list[InputSpec]:
    """The session's inputs as ``InputSpec`` (dims: int, a dynamic dim's name, or None)."""
    return [spec_from_node_arg(arg) for arg in session.get_inputs()]
