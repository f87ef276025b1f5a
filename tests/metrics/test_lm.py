"""Language-model metrics (ascendpipe.metrics.lm) on logits whose answers are known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.metrics import label_accuracy, next_token_agreement, perplexity


def test_agreement_counts_positions_whose_greedy_token_is_the_references():
    ref = np.zeros((2, 3, 5))
    ref[..., 1] = 1.0  # the reference predicts token 1 at every position
    got = ref.copy()
    got[0, 2] = [0, 0, 0, 3, 0]  # one position predicts token 3
    found = next_token_agreement(got, ref)
    assert found == {"agreement": 5 / 6, "positions": 6, "skipped": 0}
    got[1, 0, 0] = np.nan  # an overflowed position agrees with nothing, even where its argmax would
    assert next_token_agreement(got, ref)["agreement"] == 4 / 6
    ref[1, 1, 2] = np.inf  # a reference that is not finite is no yardstick: left out, counted
    assert next_token_agreement(got, ref) == {"agreement": 3 / 5, "positions": 5, "skipped": 1}


def test_perplexity_is_exp_of_the_mean_negative_log_likelihood():
    uniform = np.zeros((1, 4, 8))
    labels = np.array([[3, 1, 7, 0]])
    assert perplexity(uniform, labels)["perplexity"] == pytest.approx(8.0)  # uniform over 8 tokens
    sharp = np.full((1, 4, 8), -1e4)
    sharp[0, np.arange(4), labels[0]] = 0.0
    assert perplexity(sharp, labels)["perplexity"] == pytest.approx(1.0)
    logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]]))
    found = perplexity(logits, np.array([[0, 2]]))
    assert found["nll"] == pytest.approx(-(math.log(0.5) + math.log(0.8)) / 2) and found["tokens"] == 2
    # -100: no token to predict there (Hugging Face's ignore_index)
    assert perplexity(logits, np.array([[0, -100]]))["perplexity"] == pytest.approx(2.0)
    assert label_accuracy(logits, np.array([[0, 1]])) == 0.5


def test_perplexity_of_non_finite_logits_is_undefined_not_inf():
    logits = np.zeros((1, 3, 4))
    logits[0, 1, 2] = np.inf
    found = perplexity(logits, np.array([[0, 1, 2]]))
    assert found["perplexity"] is None and found["nonfinite"] == 1
    assert perplexity(logits, np.array([[0, -100, 2]]))["perplexity"] == pytest.approx(4.0)


def test_bad_labels_and_shapes_say_what_is_wrong():
    logits = np.zeros((1, 3, 4))
    with pytest.raises(UserError, match="label 4 at position 1 is not a token id of the 4-token vocabulary"):
        perplexity(logits, np.array([[0, 4, 1]]))
    with pytest.raises(UserError, match="labels hold 2 positions but the logits 3"):
        perplexity(logits, np.array([[0, 1]]))
    with pytest.raises(UserError, match="token ids"):
        perplexity(logits, np.array([[0.0, 1.0, 2.0]]))
    with pytest.raises(UserError, match="differ in shape"):
        next_token_agreement(logits, np.zeros((1, 2, 4)))
