"""A small digits classifier (conv + BN + ReLU, global pooling, linear) with a ``build()`` factory."""

from __future__ import annotations

from torch import nn


def build(num_classes: int = 10) -> nn.Module:
    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(*block(1, 16, 1), *block(16, 32, 2), *block(32, 64, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))
