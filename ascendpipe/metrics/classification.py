"""Top-k accuracy for classification outputs (pure numpy, float64)."""

from __future__ import annotations

import numpy as np

from ascendpipe.errors import UserError


def topk_accuracy(logits, labels, k: int = 1) -> float:
    """Fraction of samples whose true class is among the k highest scores.

    Ties count against the sample: the true class is in the top k only if fewer than k other
    classes score at least as high. A collapsed model (all scores equal, or NaN) therefore scores
    0, not 1. NaN scores rank lowest.
    """
    scores = np.asarray(logits, dtype=np.float64)
    truth = np.asarray(labels).reshape(-1)
    if scores.ndim != 2:
        scores = scores.reshape(scores.shape[0], -1) if scores.ndim > 2 else scores.reshape(1, -1)
    if scores.shape[0] != truth.shape[0]:
        raise UserError(f"topk_accuracy: {scores.shape[0]} score rows but {truth.shape[0]} labels")
    if scores.shape[0] == 0:
        raise UserError("topk_accuracy: no samples")
    if k < 1:
        raise UserError(f"topk_accuracy: k must be at least 1, got {k}")
    num_classes = scores.shape[1]
    truth = truth.astype(np.int64)
    if truth.min() < 0 or truth.max() >= num_classes:
        raise UserError(f"topk_accuracy: labels must lie in [0, {num_classes - 1}] for {num_classes} classes, "
                        f"got [{truth.min()}, {truth.max()}]")
    scores = np.where(np.isnan(scores), -np.inf, scores)
    true_score = scores[np.arange(scores.shape[0]), truth]
    true_is_nan = np.isneginf(true_score)
    at_least_as_high = (scores >= true_score[:, None]).sum(axis=1) - 1  # minus the true class itself
    hit = (at_least_as_high < k) & ~true_is_nan
    return float(hit.mean())
