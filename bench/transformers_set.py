"""Benchmark: transformer models through compare and fix (issue 40, part B).

    python bench/transformers_set.py [--quick] [--json OUT.json]

Two sets, each model clean (random small config) and scaled (weights past fp16's range where each
family breaks: attention query/key, LLaMA's embeddings into RMSNorm, T5's FFN output):

- ``transformers`` (skipped with its reason when the package is absent, and with ``--quick``): BERT
  with an attention mask, ViT, T5's encoder, GPT-2 (prefill), LLaMA with RMSNorm/RoPE/SDPA over a KV
  cache: prefill with an empty cache (8 tokens) and one decode step after an 8-token cache, one graph;
- ``torch`` (plain torch modules, ``tests/fix/transformer_models.py``): the same families, the
  decoders also as a separate prefill graph.

For every (model, input) case and mode (force_fp16, allow_mix_precision, allow_fp32_to_fp16)
compare's verdict is held against an independent reference: the emulated model run on onnxruntime,
every output finite with numpy's cosine >= 0.99 and relative Euclidean distance <= 0.05 (compare's two
default output thresholds). Printed per model: clean (the clean model's cases all pass compare under
force_fp16), verdict (agreements / runs), false alarms (compare fails, the reference passes), the first
failure compare names on the scaled model, and fix: one keep set over all of the model's cases
(``fix --case``), its evaluations, the kept ops (Casts among them), and whether the answer restores
every case in the reference.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fix import transformer_models as tm  # noqa: E402

MIN_COSINE = 0.99
MAX_DISTANCE = 0.05
MODES = ("force_fp16", "allow_mix_precision", "allow_fp32_to_fp16")
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
LAYERS, HEADS, HEAD_DIM = 2, 2, 16


# --- the transformers set ------------------------------------------------------------------------

def _export(module, args, names, outputs, path: Path, dynamic=None) -> Path:
    import torch

    from ascendpipe.stages.export import legacy_exporter_kwargs

    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs, opset_version=17,
                          dynamic_axes=dynamic, do_constant_folding=True, **legacy_exporter_kwargs(torch.onnx.export))
    return path


def _scale_hf(name: str, model) -> None:
    """Weights past fp16's range: layer 0's query/key (scores ~ 1e5), LLaMA's embeddings (RMSNorm's mean
    of squares ~ 1e5), T5's last FFN output (the residual and the final layer norm past 65504)."""
    import torch

    with torch.no_grad():
        for path, module in model.named_modules():
            leaf = path.rsplit(".", 1)[-1]
            first = ".0." in f".{path}." or path.startswith("0.")
            # (transformers initialises weights with std 0.02: the factors bring the golden past 65504)
            if name in ("bert", "vit") and first and leaf in ("query", "key", "q_proj", "k_proj"):
                module.weight.mul_(1750.0)
            elif name == "gpt2" and first and leaf == "c_attn":
                module.weight[:, : 2 * 32].mul_(1600.0)  # Conv1D: [in, 3 * out], q and k first
            elif name == "llama" and leaf == "embed_tokens":
                module.weight.mul_(10000.0)
            elif name == "t5" and leaf == "wo" and ".1." in path and "block.1." in path:
                module.weight.mul_(1.0e5)


def hf_models(root: Path, scaled: bool) -> dict[str, list]:
    """name -> [(model path, feeds), ...] built with ``transformers``."""
    import torch
    import transformers as tf

    nn = torch.nn
    root.mkdir(parents=True, exist_ok=True)
    built: dict[str, list] = {}
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 64, (1, 8), dtype=np.int64)
    suffix = "_scaled" if scaled else ""

    class Last(nn.Module):
        def __init__(self, model, keys):
            super().__init__()
            self.model, self.keys = model, keys

        def forward(self, *args):
            out = self.model(**dict(zip(self.keys, args)))
            return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits

    def make(name, model, feeds, dynamic=None, outputs=("out",)):
        torch.manual_seed(0)
        if scaled:
            _scale_hf(name, model)
        path = _export(Last(model.eval(), list(feeds)), tuple(torch.from_numpy(v) for v in feeds.values()), list(feeds),
                       list(outputs), root / f"hf_{name}{suffix}.onnx", dynamic)
        built[name] = [(path, feeds)]

    torch.manual_seed(0)
    mask = np.ones((1, 8), np.int64)
    mask[0, 6:] = 0
    make("bert", tf.BertModel(tf.BertConfig(vocab_size=64, max_position_embeddings=32, **SMALL),
                              add_pooling_layer=False), {"input_ids": ids, "attention_mask": mask})
    torch.manual_seed(0)
    make("vit", tf.ViTModel(tf.ViTConfig(image_size=16, patch_size=4, num_channels=3, **SMALL), add_pooling_layer=False),
         {"pixel_values": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)})
    torch.manual_seed(0)
    make("t5", tf.T5EncoderModel(tf.T5Config(vocab_size=64, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)),
         {"input_ids": ids})
    torch.manual_seed(0)
    make("gpt2", tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                                  bos_token_id=0, eos_token_id=0)),
         {"input_ids": ids, "attention_mask": np.ones((1, 8), np.int64)}, outputs=("logits",))
    torch.manual_seed(0)
    llama = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=64, max_position_embeddings=32, num_key_value_heads=2,
                                               attn_implementation="sdpa", **SMALL)).eval()
    if scaled:
        _scale_hf("llama", llama)
    built["llama"] = _llama_with_cache(llama, root / f"hf_llama_kv{suffix}.onnx")
    return built


def _llama_with_cache(model, path: Path) -> list:
    """LLaMA over a KV cache (past_key_I/past_value_I [1, heads, past, head_dim]): prefill with an empty
    cache and one decode step after an 8-token cache, one graph."""
    import torch
    import transformers as tf

    class WithCache(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = tf.DynamicCache()
            for i in range(LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
            present = [t for i in range(LAYERS) for t in (out.past_key_values.layers[i].keys,
                                                            out.past_key_values.layers[i].values)]
            return (out.logits, *present)

    past_names = [f"past_{k}_{i}" for i in range(LAYERS) for k in ("key", "value")]
    names = ["input_ids", "attention_mask", "position_ids", *past_names]
    example = _llama_feeds(4, 3, past_names)
    dynamic = {"input_ids": {1: "seq"}, "attention_mask": {1: "total"}, "position_ids": {1: "seq"},
               **{n: {2: "past"} for n in past_names}}
    _export(WithCache(model), tuple(torch.from_numpy(example[n]) for n in names), names,
            ["logits", *[n.replace("past", "present") for n in past_names]], path, dynamic)
    return [(path, _llama_feeds(0, 8, past_names)), (path, _llama_feeds(8, 1, past_names))]


def _llama_feeds(past: int, tokens: int, past_names: list[str]) -> dict:
    rng = np.random.default_rng(past * 31 + tokens)
    feeds = {"input_ids": rng.integers(0, 64, (1, tokens), dtype=np.int64),
             "attention_mask": np.ones((1, past + tokens), np.int64),
             "position_ids": np.arange(past, past + tokens, dtype=np.int64)[None, :]}
    feeds.update({n: rng.standard_normal((1, HEADS, past, HEAD_DIM)).astype(np.float32) for n in past_names})
    return feeds


# --- the plain-torch set -----------------------------------------------------------------------

def torch_models(root: Path, scaled: bool) -> dict[str, list]:
    suffix = "_scaled" if scaled else ""
    built = {}
    for name in tm.FAMILIES:
        path = tm.build(name, root / f"torch_{name}{suffix}.onnx", scaled=scaled)
        if name in tm.DECODERS:
            prefill = tm.build(name, root / f"torch_{name}_prefill{suffix}.onnx", scaled=scaled, prefill=True)
            built[name] = [(prefill, tm.prefill_inputs(name)), (path, tm.inputs(name, past=0)),
                           (path, tm.inputs(name, past=8))]
        else:
            built[name] = [(path, tm.inputs(name))]
    return built


# --- judging -------------------------------------------------------------------------------------

def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na and nb else (1.0 if na == nb else 0.0)


def _run(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


def _relative_distance(target, golden) -> float:
    t, g = np.asarray(target, np.float64).ravel(), np.asarray(golden, np.float64).ravel()
    if not np.isfinite(t).all():
        return float("inf")
    norm = np.linalg.norm(g)
    return float(np.linalg.norm(t - g) / norm) if norm else float(np.linalg.norm(t))


def reference_passes(model, feeds, work: Path, mode: str, keep=(), fusion=None, distance: bool = True) -> bool:
    """The independent reference: the emulated model on onnxruntime, every output finite with numpy's
    cosine >= 0.99 and (``distance``) relative Euclidean distance <= 0.05, compare's two default output
    thresholds. fix's own target is the cosine alone (``--min-cosine``)."""
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    converted = convert_model(model, work, resolve({"precision_mode": mode, "keep_dtype": list(keep),
                                                    "fusion_switch": dict(fusion or {})}))
    pairs = [(t, g) for t, g in zip(_run(converted.model_path, feeds), _run(model, feeds)) if g.size]
    shutil.rmtree(work, ignore_errors=True)
    return all(_cosine(t, g) >= MIN_COSINE and (not distance or _relative_distance(t, g) <= MAX_DISTANCE)
               for t, g in pairs)


def compare_case(model, feeds, work: Path, mode: str) -> dict:
    from ascendpipe.backends.compare_sources import dump
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.compare.runner import compare_dumps, graph_info
    from ascendpipe.precision.settings import resolve

    shutil.rmtree(work, ignore_errors=True)
    convert_model(model, work / "model", resolve({"precision_mode": mode}))
    golden = dump(model, feeds, work / "golden", fusions=False)
    target = dump(work / "model" / "model.onnx", feeds, work / "target", fusions=True)
    result = compare_dumps(golden, target, fused_map=json.loads((work / "model" / "fused_map.json").read_text()),
                           precision_plan=json.loads((work / "model" / "precision_plan.json").read_text()),
                           graph=graph_info(model))
    first = result["first_failure"]
    found = {"passes": not first and result["summary"].get("outputs_pass") is not False,
             "first": f"{first['op_name']} ({first['mechanism']})" if first else None,
             "restores": first.get("restores") if first else None}
    shutil.rmtree(work, ignore_errors=True)
    return found


def fix_model(cases: list, work: Path) -> dict:
    from ascendpipe.fix.run import fix_standalone

    inputs = []
    work.mkdir(parents=True, exist_ok=True)
    for k, (_model, feeds) in enumerate(cases):
        path = work / f"case{k}.npz"
        np.savez(path, **feeds)
        inputs.append(path)
    report = fix_standalone(cases[0][0], input_path=inputs[0], min_cosine=MIN_COSINE,
                            cases=[(m, i) for (m, _f), i in zip(cases[1:], inputs[1:])])
    verified = report.outcome.passed and all(
        reference_passes(m, f, work / f"verify{k}", "force_fp16", report.keep_dtype, report.fusion_switch, False)
        for k, (m, f) in enumerate(cases))
    types = {}
    import onnx

    for model, _feeds in cases:
        types.update({n.name: n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node})
    broken = not report.outcome.attempts[0].result.passed
    return {"evaluations": len(report.outcome.attempts), "passed": report.outcome.passed, "verified": verified,
            "broken": broken,
            "kept": len(report.keep_dtype), "casts": sum(1 for k in report.keep_dtype if types.get(k) == "Cast"),
            "fusion_off": len(report.fusion_switch), "message": report.outcome.message}


def judge(name: str, clean: list, scaled: list, work: Path) -> dict:
    agree = total = false_alarms = 0
    clean_pass = True
    named = set()
    verdicts = []  # every (case, mode): compare's verdict and the reference's (a rerun lists what changed)
    for variant, cases in (("clean", clean), ("scaled", scaled)):
        for k, (model, feeds) in enumerate(cases):
            for mode in MODES:
                found = compare_case(model, feeds, work / f"{variant}{k}{mode}", mode)
                truth = reference_passes(model, feeds, work / f"ref{variant}{k}{mode}", mode)
                total += 1
                verdicts.append({"case": f"{variant}{k}", "mode": mode, "compare_passes": found["passes"],
                                 "reference_passes": truth, "first": found["first"]})
                agree += found["passes"] == truth
                false_alarms += (not found["passes"]) and truth
                if variant == "clean" and mode == "force_fp16":
                    clean_pass &= found["passes"]
                if variant == "scaled" and mode == "force_fp16" and found["first"]:
                    named.add(found["first"])
    fix = fix_model(scaled, work / "fix")
    return {"model": name, "cases": len(scaled), "clean": clean_pass, "verdict": f"{agree}/{total}",
            "false_alarms": false_alarms, "scaled_first_failure": sorted(named), **fix, "verdicts": verdicts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the plain-torch set only (no transformers)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    sets = [("torch", torch_models)]
    if not args.quick:
        try:
            import transformers  # noqa: F401
            sets.insert(0, ("transformers", hf_models))
        except ImportError:
            print("transformers set skipped: the transformers package is not installed (pip install transformers)")
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ascendpipe-bench-tf-") as scratch:
        root = Path(scratch)
        for label, build in sets:
            clean, scaled = build(root / label / "clean", False), build(root / label / "scaled", True)
            for name in clean:
                t0 = time.perf_counter()
                row = judge(f"{label}:{name}", clean[name], scaled[name], root / "work" / label / name)
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                print(_line(row), flush=True)
    total = time.perf_counter() - started
    fixed = sum(1 for r in rows if r["verified"])
    broken = [r for r in rows if r["broken"]]
    print(f"\n{len(rows)} models: clean {sum(r['clean'] for r in rows)}/{len(rows)}, verdicts agree "
          f"{sum(int(r['verdict'].split('/')[0]) for r in rows)}/{sum(int(r['verdict'].split('/')[1]) for r in rows)}, "
          f"false alarms {sum(r['false_alarms'] for r in rows)}; scaled and broken: {len(broken)}, fix restores "
          f"{sum(1 for r in broken if r['verified'])}/{len(broken)} (verified in the reference) in at most "
          f"{max((r['evaluations'] for r in broken), default=0)} evaluations; {total:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if fixed == len(rows) else 1


def _line(row: dict) -> str:
    return (f"{row['model']:<20} cases {row['cases']}  clean {'yes' if row['clean'] else 'NO ':<3}  verdict "
            f"{row['verdict']:<5}  false alarms {row['false_alarms']}  scaled: {', '.join(row['scaled_first_failure'])}"
            f"  | fix: " + (f"{row['evaluations']} evaluations, {'restored' if row['verified'] else 'NOT restored'}, kept "
                            f"{row['kept']} ({row['casts']} Cast), {row['fusion_off']} pass off" if row["broken"] else
                            "output cosine >= 0.99 already, nothing to fix") + f"  [{row['seconds']} s]")


if __name__ == "__main__":
    raise SystemExit(main())
