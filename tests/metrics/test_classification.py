import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.metrics import topk_accuracy


def reference_topk(logits, labels, k):
    # independent: torch-free sort-based reference on data without ties
    top = np.argsort(-logits, axis=1)[:, :k]
    return float(np.mean([labels[i] in top[i] for i in range(len(labels))]))


def test_matches_sort_reference_on_random_scores():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 10))
    labels = rng.integers(0, 10, size=500)
    for k in (1, 3, 5):
        assert topk_accuracy(logits, labels, k) == pytest.approx(reference_topk(logits, labels, k))


def test_hand_computed_case():
    logits = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    labels = np.array([1, 2, 1])
    assert topk_accuracy(logits, labels, 1) == pytest.approx(1 / 3)
    assert topk_accuracy(logits, labels, 2) == pytest.approx(2 / 3)  # sample 1: class 2 ties class 1 -> out
    assert topk_accuracy(logits, labels, 3) == pytest.approx(1.0)


def test_collapsed_outputs_score_zero():
    labels = np.array([0, 1, 2, 3])
    assert topk_accuracy(np.zeros((4, 10)), labels, 1) == 0.0
    assert topk_accuracy(np.full((4, 10), np.nan), labels, 5) == 0.0


def test_bad_labels_are_user_errors():
    with pytest.raises(UserError, match="labels must lie"):
        topk_accuracy(np.zeros((2, 3)), np.array([0, 3]), 1)
    with pytest.raises(UserError, match="2 score rows but 3 labels"):
        topk_accuracy(np.zeros((2, 3)), np.array([0, 1, 2]), 1)
