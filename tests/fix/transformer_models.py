"""Small transformer blocks written in plain torch and exported with ``torch.onnx.export`` (issue 40):
the shapes of the models people take to Ascend, without ``transformers``.

- ``bert``: token embeddings (int64 ids) + a bool attention mask turned into an additive mask of
  float32's lowest value, LayerNorm, attention, GELU FFN (BERT's encoder layer).
- ``vit``: a Conv patch embedding, a class token, LayerNorm, attention, FFN (ViT's encoder layer).
- ``llama``: a decoder layer with RMSNorm (``x.pow(2).mean(-1)``), RoPE from position ids, SDPA over a
  KV cache (``past_key``/``past_value`` [1, heads, past, head_dim], 0 for an empty cache) with a
  causal ``Where`` mask, SiLU-gated FFN; prefill (8 tokens, empty cache) and one decode step (1 token,
  an 8-token cache) run the same graph.
- ``gpt2``: GPT-2's layer: LayerNorm, fused QKV, scores / sqrt(d), ``Where(causal, scores, lowest)``,
  Softmax, GELU FFN, with the same KV cache inputs.
- ``t5``: T5's encoder layer: RMS layer norms that cast to float first (``h.to(torch.float32)``: a
  ``Cast(to=float)`` the emulation rounds in force_fp16), relu FFN.

``scaled=True`` scales weights past fp16's range where each family breaks on real checkpoints:
embeddings (RMSNorm's mean of squares beyond 65504), query/key projections (attention scores beyond
65504), T5's FFN output (the residual and the layer norm's squares beyond 65504). Weights are seeded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB, DIM, HEADS, SEQ, PAST = 64, 32, 2, 8, 8
HEAD_DIM = DIM // HEADS


def _torch():
    import torch

    return torch


def _modules():
    """The module classes (defined lazily: torch is imported only when a model is built)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional
    lowest = torch.finfo(torch.float32).min

    class RMSNorm(nn.Module):
        def __init__(self, dim, cast=False):
            super().__init__()
            self.weight, self.cast = nn.Parameter(torch.ones(dim)), cast

        def forward(self, h):
            if self.cast:  # T5LayerNorm: the variance in float32 whatever the weights' dtype
                variance = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
            else:
                variance = h.pow(2).mean(-1, keepdim=True)
            return self.weight * (h * torch.rsqrt(variance + 1e-6))

    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.ln0, self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))
            self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

        def forward(self, input_ids, attention_mask):
            h = self.ln0(self.embed(input_ids))
            b, s, _ = h.shape
            split = lambda t: t.view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
            q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
            additive = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * lowest
            scores = q @ k.transpose(-1, -2) / HEAD_DIM ** 0.5 + additive
            ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, DIM)
            h = self.ln1(h + self.o(ctx))
            return self.ln2(h + self.down(F.gelu(self.up(h))))

    class Vit(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, DIM, 4, stride=4)
            self.cls = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
            self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.up, self.down = nn.Linear(DIM, 2 * DIM), nn.Linear(2 * DIM, DIM)

        def forward(self, pixel_values):
            h = self.patch(pixel_values).flatten(2).transpose(1, 2)
            h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1)
            b, s, _ = h.shape
            q, k, v = self.qkv(self.ln1(h)).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
            ctx = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, DIM)
            h = h + self.o(ctx)
            return h + self.down(F.gelu(self.up(self.ln2(h))))

    class Decoder(nn.Module):
        """LLaMA-style (``gpt2=False``) or GPT-2-style layer over a KV cache."""

        def __init__(self, gpt2=False):
            super().__init__()
            self.gpt2 = gpt2
            self.embed = nn.Embedding(VOCAB, DIM)
            if gpt2:
                self.ln1, self.ln2, self.lnf = nn.LayerNorm(DIM), nn.LayerNorm(DIM), nn.LayerNorm(DIM)
                self.qkv = nn.Linear(DIM, 3 * DIM)
                self.pos = nn.Embedding(64, DIM)  # GPT-2's learnt positions (wpe)
                self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
            else:
                self.ln1, self.ln2, self.lnf = RMSNorm(DIM), RMSNorm(DIM), RMSNorm(DIM)
                self.q, self.k, self.v = (nn.Linear(DIM, DIM, bias=False) for _ in range(3))
                self.gate, self.up = nn.Linear(DIM, 2 * DIM, bias=False), nn.Linear(DIM, 2 * DIM, bias=False)
                self.down = nn.Linear(2 * DIM, DIM, bias=False)
            self.o = nn.Linear(DIM, DIM, bias=gpt2)
            self.head = nn.Linear(DIM, VOCAB, bias=False)
            inv = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
            angles = torch.arange(64, dtype=torch.float32)[:, None] * inv[None, :]
            self.register_buffer("cos_table", torch.cat([angles.cos(), angles.cos()], -1), persistent=False)
            self.register_buffer("sin_table", torch.cat([angles.sin(), angles.sin()], -1), persistent=False)

        def forward(self, input_ids, position_ids, past_key=None, past_value=None):
            if past_key is None:  # a prefill graph: the cache starts empty
                past_key = past_value = torch.zeros(input_ids.shape[0], HEADS, 0, HEAD_DIM)
            h = self.embed(input_ids) + (self.pos(position_ids) if self.gpt2 else 0.0)
            b, s, _ = h.shape
            split = lambda t: t.view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
            x = self.ln1(h)
            if self.gpt2:
                q, k, v = (split(t) for t in self.qkv(x).split(DIM, dim=-1))
            else:
                q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
                cos, sin = self.cos_table[position_ids][:, None], self.sin_table[position_ids][:, None]
                q, k = rope(q, cos, sin), rope(k, cos, sin)
            key, value = torch.cat([past_key, k], dim=2), torch.cat([past_value, v], dim=2)
            total = key.shape[2]
            # query i sits at position total - s + i: it sees the keys up to there
            causal = torch.arange(total)[None, :] <= (torch.arange(s) + (total - s))[:, None]
            if self.gpt2:
                scores = q @ key.transpose(-1, -2) / HEAD_DIM ** 0.5
                scores = torch.where(causal, scores, torch.tensor(lowest))
                ctx = scores.softmax(-1) @ value
            else:
                ctx = F.scaled_dot_product_attention(q, key, value, attn_mask=causal)
            h = h + self.o(ctx.transpose(1, 2).reshape(b, s, DIM))
            x = self.ln2(h)
            ffn = self.down(F.gelu(self.up(x))) if self.gpt2 else self.down(F.silu(self.gate(x)) * self.up(x))
            h = h + ffn
            return self.head(self.lnf(h)), key, value

    class T5(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.ln1, self.ln2, self.lnf = RMSNorm(DIM, True), RMSNorm(DIM, True), RMSNorm(DIM, True)
            self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
            self.wi, self.wo = nn.Linear(DIM, 2 * DIM, bias=False), nn.Linear(2 * DIM, DIM, bias=False)

        def forward(self, input_ids):
            h = self.embed(input_ids)
            b, s, _ = h.shape
            split = lambda t: t.view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
            x = self.ln1(h)
            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            ctx = ((q @ k.transpose(-1, -2)).softmax(-1) @ v).transpose(1, 2).reshape(b, s, DIM)
            h = h + self.o(ctx)
            h = h + self.wo(F.relu(self.wi(self.ln2(h))))
            return self.lnf(h)

    return {"bert": Bert, "vit": Vit, "llama": lambda: Decoder(False), "gpt2": lambda: Decoder(True), "t5": T5}


FAMILIES = ("bert", "vit", "llama", "gpt2", "t5")
DECODERS = ("llama", "gpt2")


def _scale(name: str, model) -> None:
    """Weights past fp16's range where each family breaks (see the module docstring)."""
    torch = _torch()
    with torch.no_grad():
        if name == "llama":
            model.embed.weight.mul_(400.0)  # |h| ~ 400: RMSNorm's mean of h*h ~ 1.6e5
        elif name in ("bert", "gpt2"):
            target = model.qkv if name == "gpt2" else None
            if target is not None:
                target.weight[: 2 * DIM].mul_(250.0)  # q and k: scores ~ 2e5
            else:
                model.q.weight.mul_(250.0)
                model.k.weight.mul_(250.0)
        elif name == "vit":
            model.qkv.weight[: 2 * DIM].mul_(250.0)
        elif name == "t5":
            model.wo.weight.mul_(1.0e5)  # the FFN output ~ 1e5: the residual and the last layer norm beyond 65504


def build(name: str, path: Path | str, *, scaled: bool = False, seed: int = 0, prefill: bool = False) -> Path:
    """Export family ``name`` to ``path`` (ONNX, opset 17); decoders take past_key/past_value of any
    length, or with ``prefill`` none (a prefill graph: its cache starts empty inside the graph)."""
    torch = _torch()
    from ascendpipe.stages.export import legacy_exporter_kwargs

    torch.manual_seed(seed)
    model = _modules()[name]().eval()
    if scaled:
        _scale(name, model)
    if prefill:
        return _export_prefill(model, name, Path(path), seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a decoder is traced with a cache and several tokens, so neither length is taken for a constant
    example = inputs(name, seed=seed, past=4, tokens=3) if name in DECODERS else inputs(name, seed=seed)
    feeds = {k: torch.from_numpy(v) for k, v in example.items()}
    names = list(feeds)
    dynamic = {}
    if name in DECODERS:
        dynamic = {"input_ids": {1: "seq"}, "position_ids": {1: "seq"}, "past_key": {2: "past"},
                   "past_value": {2: "past"}, "present_key": {2: "total"}, "present_value": {2: "total"}}
    outputs = ["logits", "present_key", "present_value"] if name in DECODERS else ["output"]
    with torch.no_grad():
        torch.onnx.export(model, tuple(feeds[n] for n in names), str(path), input_names=names, output_names=outputs,
                          opset_version=17, dynamic_axes=dynamic or None, do_constant_folding=True,
                          **legacy_exporter_kwargs(torch.onnx.export))
    return path


def _export_prefill(decoder, name: str, path: Path, seed: int) -> Path:
    """The same layer without cache inputs (its op names are the decode graph's: no wrapper scope)."""
    torch = _torch()
    from ascendpipe.stages.export import legacy_exporter_kwargs

    decoder.prefill = True
    feeds = prefill_inputs(name, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(decoder, tuple(torch.from_numpy(v) for v in feeds.values()), str(path),
                          input_names=list(feeds), output_names=["logits", "present_key", "present_value"],
                          opset_version=17, dynamic_axes={"input_ids": {1: "seq"}, "position_ids": {1: "seq"}},
                          do_constant_folding=True, **legacy_exporter_kwargs(torch.onnx.export))
    return path


def prefill_inputs(name: str, *, seed: int = 0) -> dict[str, np.ndarray]:
    """A prefill graph's feeds: the tokens and positions of ``inputs(name, past=0)``."""
    feeds = inputs(name, seed=seed, past=0)
    return {"input_ids": feeds["input_ids"], "position_ids": feeds["position_ids"]}


def inputs(name: str, *, seed: int = 0, past: int = 0, tokens: int | None = None) -> dict[str, np.ndarray]:
    """Feeds for family ``name``; decoders: ``tokens`` new tokens (default SEQ with an empty cache, 1
    with a non-empty one) after a cache of ``past`` positions."""
    rng = np.random.default_rng(seed)
    if name == "vit":
        return {"pixel_values": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
    if name in DECODERS:
        tokens = tokens or (SEQ if past == 0 else 1)
        return {"input_ids": rng.integers(0, VOCAB, (1, tokens), dtype=np.int64),
                "position_ids": np.arange(past, past + tokens, dtype=np.int64)[None, :],
                "past_key": rng.standard_normal((1, HEADS, past, HEAD_DIM)).astype(np.float32),
                "past_value": rng.standard_normal((1, HEADS, past, HEAD_DIM)).astype(np.float32)}
    ids = {"input_ids": rng.integers(0, VOCAB, (1, SEQ), dtype=np.int64)}
    if name == "bert":
        mask = np.ones((1, SEQ), dtype=bool)
        mask[0, SEQ - 2:] = False  # two padding positions
        ids["attention_mask"] = mask
    return ids
