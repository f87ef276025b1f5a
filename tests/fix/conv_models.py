"""Convolutional architectures whose residual stream is scaled past fp16's range (issue 49, item 3), in
plain torch (no ``diffusers``/``ultralytics``), exported with ``torch.onnx.export``:

- ``vae``: a diffusion VAE decoder: conv_in -> ResnetBlock (GroupNorm, SiLU, Conv, GroupNorm, SiLU,
  Conv, + skip) -> attention block (GroupNorm, q/k/v Linear, softmax, proj, + skip) -> nearest Upsample
  + Conv -> ResnetBlock with a 1x1 ``conv_shortcut`` (channels change) -> GroupNorm -> SiLU -> conv_out;
- ``unet``: a diffusion UNet: conv_in, a timestep embedding (sinusoidal -> Linear -> SiLU -> Linear)
  added inside each ResnetBlock, a down block (ResnetBlock, stride-2 Conv), a mid block, an up block
  reading the skip connection through Concat, conv_out;
- ``yolo``: a YOLOv8-style CSP backbone (Conv-BN-SiLU, a C2f with a split, bottlenecks and a Concat),
  an SPPF (MaxPools, Concat), and a detect head;
- ``convnext``: ConvNeXt blocks (a depthwise 7x7 Conv of the stream, LayerNorm, pointwise Linears, GELU,
  a residual Add the emulation fuses away: its tensor is golden-only), a pooled LayerNorm head.

``scaled=True`` multiplies ``conv_in`` (the VAE and UNet: the stream after it ~1e5, as a latent whose
scale is not undone) or the stem (YOLO) so the stream that the next Convs read lies beyond 65504: on a SoC
whose cube reads fp16 even for a kept op, no keep_dtype set can restore these outputs; on Ascend910B1
(the cube reads fp32 when kept) one can. Weights are seeded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ARCHS = ("vae", "unet", "yolo", "convnext")
C = 16  # channels of the stream


def _modules():
    import torch

    nn, F = torch.nn, torch.nn.functional

    class Resnet(nn.Module):
        def __init__(self, cin, cout, temb=None):
            super().__init__()
            self.norm1, self.conv1 = nn.GroupNorm(4, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.norm2, self.conv2 = nn.GroupNorm(4, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.time = nn.Linear(temb, cout) if temb else None
            self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

        def forward(self, x, t=None):
            h = self.conv1(F.silu(self.norm1(x)))
            if self.time is not None:
                h = h + self.time(F.silu(t))[:, :, None, None]
            h = self.conv2(F.silu(self.norm2(h)))
            return (self.conv_shortcut(x) if self.conv_shortcut is not None else x) + h

    class Attention(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.group_norm = nn.GroupNorm(4, c)
            self.to_q, self.to_k, self.to_v, self.to_out = (nn.Linear(c, c) for _ in range(4))

        def forward(self, x):
            b, c, hh, ww = x.shape
            h = self.group_norm(x).flatten(2).transpose(1, 2)
            q, k, v = self.to_q(h), self.to_k(h), self.to_v(h)
            ctx = ((q @ k.transpose(1, 2)) / c ** 0.5).softmax(-1) @ v
            return x + self.to_out(ctx).transpose(1, 2).reshape(b, c, hh, ww)

    class Vae(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_in = nn.Conv2d(4, C, 3, padding=1)
            self.mid = Resnet(C, C)
            self.attn = Attention(C)
            self.up_conv = nn.Conv2d(C, C, 3, padding=1)
            self.up = Resnet(C, C // 2)
            self.norm_out, self.conv_out = nn.GroupNorm(4, C // 2), nn.Conv2d(C // 2, 3, 3, padding=1)

        def forward(self, latent):
            h = self.attn(self.mid(self.conv_in(latent)))
            h = self.up_conv(F.interpolate(h, scale_factor=2.0, mode="nearest"))
            h = self.up(h)
            return self.conv_out(F.silu(self.norm_out(h)))

    class Unet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_in = nn.Conv2d(4, C, 3, padding=1)
            self.time1, self.time2 = nn.Linear(C, 2 * C), nn.Linear(2 * C, 2 * C)
            self.down = Resnet(C, C, 2 * C)
            self.downsample = nn.Conv2d(C, C, 3, stride=2, padding=1)
            self.mid = Resnet(C, C, 2 * C)
            self.up = Resnet(2 * C, C, 2 * C)
            self.norm_out, self.conv_out = nn.GroupNorm(4, C), nn.Conv2d(C, 4, 3, padding=1)

        def forward(self, sample, timestep):
            half = C // 2
            freqs = torch.exp(-np.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
            angle = timestep[:, None].float() * freqs[None, :]
            t = self.time2(F.silu(self.time1(torch.cat([angle.sin(), angle.cos()], -1))))
            h = self.conv_in(sample)
            skip = self.down(h, t)
            h = self.mid(self.downsample(skip), t)
            h = F.interpolate(h, scale_factor=2.0, mode="nearest")
            h = self.up(torch.cat([h, skip], 1), t)
            return self.conv_out(F.silu(self.norm_out(h)))

    class ConvBnSilu(nn.Module):
        def __init__(self, cin, cout, k=3, s=1):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(cout)

        def forward(self, x):
            return F.silu(self.bn(self.conv(x)))

    class C2f(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.cv1, self.cv2 = ConvBnSilu(c, c, 1), ConvBnSilu(2 * c, c, 1)
            self.m = nn.ModuleList([nn.Sequential(ConvBnSilu(c // 2, c // 2), ConvBnSilu(c // 2, c // 2))])

        def forward(self, x):
            y = list(self.cv1(x).chunk(2, 1))
            y.append(y[-1] + self.m[0](y[-1]))
            return self.cv2(torch.cat(y + [y[-1]], 1)[:, : 2 * self.cv1.conv.out_channels])

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = ConvBnSilu(3, C, 3, 2)
            self.c2f = C2f(C)
            self.down = ConvBnSilu(C, C, 3, 2)
            self.sppf_cv1, self.sppf_cv2 = ConvBnSilu(C, C // 2, 1), ConvBnSilu(2 * C, C, 1)
            self.box, self.cls = nn.Conv2d(C, 4 * 4, 1), nn.Conv2d(C, 3, 1)

        def forward(self, images):
            h = self.down(self.c2f(self.stem(images)))
            x = self.sppf_cv1(h)
            p1 = F.max_pool2d(x, 5, 1, 2)
            p2 = F.max_pool2d(p1, 5, 1, 2)
            p3 = F.max_pool2d(p2, 5, 1, 2)
            h = self.sppf_cv2(torch.cat([x, p1, p2, p3], 1))
            return torch.cat([self.box(h), self.cls(h).sigmoid()], 1).flatten(2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(C, C, 7, padding=3, groups=C)
            self.ln, self.pw1, self.pw2 = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            h = self.dw(x).permute(0, 2, 3, 1)
            return x + self.pw2(F.gelu(self.pw1(self.ln(h)))).permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, C, 4, 4)
            self.blocks = nn.ModuleList([Block() for _ in range(3)])
            self.norm, self.head = nn.LayerNorm(C), nn.Linear(C, 10)

        def forward(self, images):
            h = self.stem(images)
            for block in self.blocks:
                h = block(h)
            return self.head(self.norm(h.mean((2, 3))))

    return {"vae": Vae, "unet": Unet, "yolo": Yolo, "convnext": ConvNeXt}


def _scale(name: str, model) -> None:
    import torch

    with torch.no_grad():
        if name == "convnext":
            model.stem.weight.mul_(3.0e5)  # the stream ~5e5: each block's depthwise Conv reads it
            model.stem.bias.mul_(3.0e5)
        elif name in ("vae", "unet"):
            model.conv_in.weight.mul_(3.0e5)  # the stream after conv_in ~1e5
            model.conv_in.bias.mul_(3.0e5)
        else:
            model.stem.bn.weight.mul_(3.0e5)  # the stem's output ~1e5 (BN's scale, folded into its Conv)


def build(name: str, path: Path | str, *, scaled: bool = False, seed: int = 0) -> Path:
    import torch

    from ascendpipe.stages.export import legacy_exporter_kwargs

    torch.manual_seed(seed)
    model = _modules()[name]().eval()
    if name == "yolo":  # BN statistics as a trained model has them (not the identity)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
    if scaled:
        _scale(name, model)
    feeds = inputs(name, seed=seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, tuple(torch.from_numpy(v) for v in feeds.values()), str(path),
                          input_names=list(feeds), output_names=["output"], opset_version=17,
                          do_constant_folding=True, **legacy_exporter_kwargs(torch.onnx.export))
    return path


def inputs(name: str, *, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name == "vae":
        return {"latent": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    if name == "unet":
        return {"sample": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
                "timestep": np.asarray([500], np.int64)}
    if name == "convnext":
        return {"images": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    return {"images": rng.uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)}
