"""``docs/kinds.md``, the reference of each built-in stage kind, generated from the kinds themselves.

``python -m ascendpipe.config.kinds_doc > docs/kinds.md`` regenerates it; ``tests/test_kinds_doc.py``
fails when the file is out of date and checks every example against the pipeline schema. Fields,
params, types, defaults and allowed values come from each kind's ``input_fields`` and
``params_schema`` (the one source of truth); only the examples and the few words on the generic
fields are written here.
"""

from __future__ import annotations

import json

# One stage per kind, as it would sit under `stages:` (taken from pipelines/reid.yaml,
# pipelines/classify.yaml and docs/profile-tune.md, trimmed).
EXAMPLES: dict[str, str] = {
    "run": """\
train:
  kind: run
  cmd: python pipelines/reid/train.py --data data/reid --out models/reid/model.pt --seed {{ params.seed }}
  deps: [pipelines/reid/train.py, data/reid]
  outs: [models/reid/model.pt]
  metrics: models/reid/train_metrics.json""",
    "source": """\
model:
  kind: source
  model: models/resnet50.onnx
  params: {full_check: true}""",
    "export": """\
export:
  kind: export
  model: pipelines/reid/reid_net.py      # the file; params.factory names the function
  checkpoint: models/reid/model.pt
  params:
    factory: build
    input_names: [image]
    output_names: [embedding]
    input_shapes: {image: [1, 1, 32, 32]}
    dynamic_axes: {image: {0: batch}, embedding: {0: batch}}
    opset: 17""",
    "convert": """\
convert:
  kind: convert
  model: export
  matrix:
    fp16: {precision_mode: force_fp16}
    fp16_keep: {precision_mode: force_fp16, keep_dtype: [/ReduceSum, /Sqrt],
                fusion_switch: {TbeReduceElemwiseFusionPass: "off"}}   # quote "off": YAML reads off as false""",
    "infer": """\
infer:
  kind: infer
  model: convert
  inputs: data/reid/test
  params: {batch_size: 64}""",
    "dump": """\
dump:
  kind: dump
  model: convert
  inputs: data/reid/probe
  params: {max_batch: 8}""",
    "compare": """\
compare:
  kind: compare
  golden: export
  target: convert
  inputs: data/reid/probe/images.npy
  params: {strategy: first-overall, thresholds: {cosine: 0.99}}""",
    "eval": """\
eval:
  kind: eval
  outputs: infer
  labels: data/reid/labels
  golden: eval_golden
  params: {task: reid}""",
    "quantize": """\
quantize:
  kind: quantize
  model: export
  calibration: data/classify/train/images.npy
  params: {batch_num: 1, batch_size: 16, auto: {metric: eval_int8.top1, tolerance: 0.01}}""",
    "profile": """\
profile:
  kind: profile
  model: convert
  inputs: data/calib.npz
  params: {warmup: 5, iterations: 20, batch_size: 8}""",
    "tune": """\
tune:
  kind: tune
  model: convert
  inputs: data/calib.npz
  params: {job_type: [1, 2], repeats: 7, max_candidates: 24}""",
}

# What a param means where its name does not say it (the schema carries types and defaults).
NOTES: dict[tuple[str, str], str] = {
    ("export", "factory"): "the function in `model` (a .py file) that builds the network",
    ("export", "factory_args"): "keyword arguments for the factory",
    ("export", "extra_args"): "extra positional arguments of forward() after the inputs",
    ("export", "checkpoint_key"): "the state_dict's key inside the checkpoint, when it is nested",
    ("export", "min_cosine"): "the export fails below this cosine between torch and onnxruntime outputs",
    ("convert", "precision_mode"): "ATC's `--precision_mode` (default `force_fp16`, ATC's)",
    ("convert", "keep_dtype"): "ops kept in fp32: a list of node names / `OpType::T` (T: the GE type ATC's parser "
                               "gives, or an ONNX op type), or a keep_dtype.cfg file",
    ("convert", "modify_mixlist"): "edits of the SoC's white/black/gray lists (GE kernel types; an ONNX op type is "
                                   "written as its GE type): a JSON file or the mapping",
    ("convert", "customize_dtypes"): "ATC's `--customize_dtypes`: a file, or its lines "
                                     "(`Name::InputDtype:float16,OutputDtype:float`, `OpType::T:...`)",
    ("convert", "fusion_switch"): "ATC fusion passes on/off, e.g. `{TbeReduceElemwiseFusionPass: \"off\"}` (quote off)",
    ("convert", "fusion_switch_file"): "ATC's fusion switch file (`{\"Switch\": {...}}`)",
    ("convert", "aipp"): "AIPP settings (aipp_op fields) as a mapping, or a list of them",
    ("convert", "insert_op_conf"): "an AIPP config file (aipp_op { ... })",
    ("convert", "soc_version"): "e.g. Ascend310P3: which passes apply, the default overflow mode, the SoC class "
                                "(fp32 cube and HF32 on Atlas A2/A3, bf16 where the SoC has it); required by atc",
    ("convert", "precision_mode_v2"): "ATC's `--precision_mode_v2` (v1's values renamed; never with `precision_mode`)",
    ("convert", "allow_hf32"): "Atlas A2/A3: fp32 Conv/MatMul read HF32; true/false (both) or `{conv, matmul}`; "
                               "default conv on, matmul off",
    ("convert", "op_select_implmode"): "ATC's `--op_select_implmode` (default `high_performance`): the kernels' "
                                       "implementation modes, from CANN's impl_mode ini; emulated",
    ("convert", "optypelist_for_implmode"): "GE op types that alone take `op_select_implmode` (no ini then)",
    ("convert", "op_precision_mode"): "ATC's `--op_precision_mode` file (`OpType=mode` lines, `[ByNodeName]`); wins "
                                      "over the two above; emulated",
    ("compare", "strategy"): "which failures are reported first (msit's default: first-overall)",
    ("compare", "thresholds"): "per-stage overrides of the failure thresholds",
    ("compare", "seed"): "seed of the random input when `inputs` is not given",
    ("compare", "msit"): "ascend backend: also run `msit debug compare` (auto: where msit is installed)",
    ("compare", "dump_keep"): "after the compare, the dumps keep: `rerun` the failing ops' tensors and those "
                              "feeding the first failure (what a rerun of it needs), `failing` only the failing "
                              "ops', `all` every tensor",
    ("compare", "dump_keep_max"): "at most the first K of those ops, in graph order",
    ("dump", "fusions"): "onnxruntime graph fusions (auto: off for a plain ONNX, on for a converted model)",
    ("dump", "max_batch"): "dump at most this many samples",
    ("eval", "output_name"): "which model output to score (default: the first)",
    ("eval", "postprocess"): "a .py file turning raw outputs into predictions (detection: see below)",
    ("quantize", "skip_layers"): "layers kept in float",
    ("quantize", "auto"): "`fix --quantize`'s target: `{metric: STAGE.METRIC, tolerance: T}`",
    ("tune", "job_type"): "AOE's job types: 1 subgraph, 2 operator; left out: 1 on onnxruntime, the SoC's on ascend (A2/A3: 2)",
}

GENERIC = [
    ("kind", "one of the kinds below (required)"),
    ("desc", "free text"),
    ("params", "the kind's params (below), overlaid on the top-level `params`"),
    ("matrix", "variants: `NAME: {params}` (named) or `PARAM: [values]` (product); see docs/pipelines.md"),
    ("resources", "what `--executor ray` reserves: `{NPU: 1, CPU: 2, memory: 4GB}` (not keyed)"),
    ("cmd, deps, outs, metrics, always_changed", "`run` stages only: the command, what it reads and writes, "
                                                 "its metrics JSON, rerun every build"),
]


def type_text(schema: dict) -> str:
    """A param's type as a reader wants it: ``integer >= 1``, ``force_fp16 | force_fp32``, ``list of string``."""
    if "title" in schema:  # a schema that names itself (an AIPP block: too many keys to list)
        return schema["title"]
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in schema["enum"])
    if "oneOf" in schema:
        return " or ".join(type_text(s) for s in schema["oneOf"])
    t = schema.get("type")
    if isinstance(t, list):
        text = " or ".join(t)
    elif t == "array":
        text = f"list of {type_text(schema.get('items') or {})}" if schema.get("items") else "list"
    elif t == "object" and isinstance(schema.get("additionalProperties"), dict):
        text = f"mapping to {type_text(schema['additionalProperties'])}"
    elif t == "object" and schema.get("properties"):
        text = "mapping: " + ", ".join(f"`{k}`" for k in schema["properties"])
    else:
        text = t or "any"
    bounds = [f"{op} {schema[key]}" for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="))
              if key in schema]
    if "pattern" in schema:
        bounds.append(f"matching `{schema['pattern']}`")
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _default(schema: dict) -> str:
    return f"`{json.dumps(schema['default'])}`" if "default" in schema else ""


def kind_section(kind) -> str:
    lines = [f"## `{kind.name}`", "", kind.summary[:1].upper() + kind.summary[1:] + ".", ""]
    if kind.input_fields:
        lines.append("Input fields (a workspace path, or a stage's name: an edge; its output folder):")
        lines.append("")
        for f in kind.input_fields:
            note = (getattr(kind, "input_notes", None) or {}).get(f)
            lines.append(f"- `{f}`" + (" (required" + (f", {note})" if note else ")") if f in kind.required_inputs
                                       else (f": {note}" if note else "")))
        lines.append("")
    props = (kind.params_schema or {}).get("properties") or {}
    required = set((kind.params_schema or {}).get("required") or [])
    if props:
        lines += ["| param | type | default | notes |", "| --- | --- | --- | --- |"]
        for name, schema in props.items():
            notes = []
            if name in required:
                notes.append("required")
            if name in kind.path_params:
                notes.append("a file: hashed as a dep")
            if schema.get("description"):
                notes.append(schema["description"])
            elif (kind.name, name) in NOTES:
                notes.append(NOTES[(kind.name, name)])
            lines.append(f"| `{name}` | {type_text(schema)} | {_default(schema)} | {'; '.join(notes)} |")
    elif kind.name == "run":
        lines.append("Params: any; the command sees them as JSON in `ASCENDPIPE_PARAMS`, and they are keyed.")
    else:
        lines.append("No params.")
    lines += ["", "```yaml", EXAMPLES[kind.name], "```", ""]
    if getattr(kind, "doc_appendix", ""):  # a kind's own reference text (eval: the detection formats)
        lines += [kind.doc_appendix.rstrip("\n"), ""]
    return "\n".join(lines)


def render() -> str:
    from ascendpipe.stages.registry import get_kind, kind_names

    order = ["run", "source", "export", "convert", "infer", "dump", "compare", "eval", "quantize", "profile", "tune"]
    names = [n for n in order if n in kind_names()] + [n for n in kind_names() if n not in order]
    head = [
        "# Stage kinds",
        "",
        "<!-- generated by `python -m ascendpipe.config.kinds_doc > docs/kinds.md` from each kind's schema; do not edit -->",
        "",
        "Every stage has these fields; each kind adds its input fields and params "
        "([docs/pipelines.md](pipelines.md) explains params, matrix and templates):",
        "",
        "| field | what |",
        "| --- | --- |",
        *[f"| `{k}` | {v} |" for k, v in GENERIC],
        "",
        "Kinds: " + ", ".join(f"[`{n}`](#{n})" for n in names) + ".",
        "",
    ]
    return "\n".join(head) + "\n" + "\n".join(kind_section(get_kind(n)) for n in names)


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
