"""A small ReID-style embedding network for the digits ReID example.

Backbone: three conv + BN + ReLU blocks and global average pooling. Head: a linear embedding, a
BN-neck (BatchNorm1d, as in the "bag of tricks" ReID baseline) and the feature scale ``s`` of
NormFace/CosFace-style heads (s = 32; 30-64 is usual). Training uses a cosine classifier on the
embedding. The inference path returns the L2-normalised embedding, computed in the graph as
``x / sqrt(sum(x * x))``: with 256 dimensions of magnitude ~s the sum of squares is ~2.6e5, past
fp16's 65504, which is the forum case this example reproduces (force_fp16 -> inf -> features 0).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

EMBED_DIM = 256
FEATURE_SCALE = 32.0


def conv_block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ReidNet(nn.Module):
    def __init__(self, num_ids: int = 10, embed_dim: int = EMBED_DIM, scale: float = FEATURE_SCALE):
        super().__init__()
        self.backbone = nn.Sequential(conv_block(1, 16, 1), conv_block(16, 32, 2), conv_block(32, 64, 2))
        self.embed = nn.Linear(64, embed_dim)
        self.neck = nn.BatchNorm1d(embed_dim)
        self.scale = scale
        self.classifier = nn.Parameter(torch.randn(num_ids, embed_dim) * 0.01)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.backbone(x).mean(dim=(2, 3))
        return self.neck(self.embed(pooled)) * self.scale

    def forward(self, x: torch.Tensor, inference: bool = False) -> torch.Tensor:
        feat = self.features(x)
        if inference:
            # written out (not F.normalize) so the exported graph holds Mul, ReduceSum, Sqrt, Div
            return feat / torch.sqrt(torch.sum(feat * feat, dim=1, keepdim=True))
        cosine = F.normalize(feat, dim=1) @ F.normalize(self.classifier, dim=1).t()
        return cosine * self.scale  # logits for cross-entropy


def build(num_ids: int = 10) -> ReidNet:
    """The factory named in pipelines/reid.yaml (``pipelines/reid/reid_net.py:build``)."""
    return ReidNet(num_ids=num_ids)
