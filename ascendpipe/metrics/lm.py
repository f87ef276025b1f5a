"""Language-model metrics on logits: agreement with a reference model's next token, and perplexity.

Pure numpy (float64); no onnx/torch imports. ``logits`` are ``[..., V]`` (batch, positions, vocabulary:
a prefill's ``[B, T, V]``, a decode step's ``[B, 1, V]``); every leading index is one position.

- ``next_token_agreement(logits, reference)``: the share of positions whose top-1 token (the argmax of
  the logits, the greedy next token) is the reference's, in [0, 1]. The reference is the golden model's
  logits over the same inputs: 1.0 means the converted model would generate the same greedy text on
  them. A position whose logits hold NaN/inf agrees with nothing (fp16 overflow shows there); a position
  where the reference itself is not finite is left out and counted (``skipped``), never scored.
- ``perplexity(logits, labels)``: ``exp`` of the mean negative log-likelihood of the labels, with
  ``labels`` shaped as the positions (``logits.shape[:-1]``): the token each position is to predict (the
  next token, already shifted), ``-100`` where no token is to be predicted (Hugging Face's
  ``ignore_index``). A position whose logits are not finite makes the perplexity undefined: None, with
  the count of such positions, never ``inf`` printed as a number.
- ``label_accuracy(logits, labels)``: the share of labelled positions whose top-1 token is the label.
"""

from __future__ import annotations

import numpy as np

IGNORE_INDEX = -100  # Hugging Face's ignore_index: a position with no token to predict


def _positions(logits, what: str) -> np.ndarray:
    from ascendpipe.errors import UserError

    a = np.asarray(logits)
    if a.ndim < 1 or a.shape[-1] < 1 or a.dtype.kind not in "fiu":
        raise UserError(f"{what}: expected logits [..., vocabulary] of numbers, got shape {list(a.shape)} {a.dtype}")
    return a.reshape(-1, a.shape[-1]).astype(np.float64, copy=False)


def next_token_agreement(logits, reference) -> dict:
    """``{"agreement", "positions", "skipped"}`` (see the module docstring)."""
    from ascendpipe.errors import UserError

    target, golden = _positions(logits, "logits"), _positions(reference, "reference logits")
    if target.shape != golden.shape:
        raise UserError(f"logits {list(np.asarray(logits).shape)} and reference logits "
                        f"{list(np.asarray(reference).shape)} differ in shape: the same inputs must give both")
    usable = np.isfinite(golden).all(axis=1)
    finite = np.isfinite(target).all(axis=1)
    same = finite & (target.argmax(axis=1) == golden.argmax(axis=1))
    n = int(usable.sum())
    return {"agreement": float(same[usable].mean()) if n else None, "positions": n, "skipped": int((~usable).sum())}


def _labels(labels, rows: int, vocabulary: int) -> np.ndarray:
    from ascendpipe.errors import UserError

    y = np.asarray(labels)
    if y.dtype.kind not in "iu":
        raise UserError(f"labels must be token ids (integers), got {y.dtype}")
    y = y.reshape(-1).astype(np.int64)
    if y.size != rows:
        raise UserError(f"labels hold {y.size} positions but the logits {rows}: one label per position "
                        f"(the next token, already shifted; {IGNORE_INDEX} where none is to be predicted)")
    bad = (y != IGNORE_INDEX) & ((y < 0) | (y >= vocabulary))
    if bad.any():
        raise UserError(f"label {int(y[bad][0])} at position {int(np.flatnonzero(bad)[0])} is not a token id of the "
                        f"{vocabulary}-token vocabulary (use {IGNORE_INDEX} for a position without a label)")
    return y


def perplexity(logits, labels) -> dict:
    """``{"perplexity", "nll", "tokens", "nonfinite"}``; perplexity and nll are None where undefined."""
    x = _positions(logits, "logits")
    y = _labels(labels, x.shape[0], x.shape[1])
    keep = y != IGNORE_INDEX
    x, y = x[keep], y[keep]
    if not y.size:
        return {"perplexity": None, "nll": None, "tokens": 0, "nonfinite": 0}
    finite = np.isfinite(x).all(axis=1)
    if not finite.all():
        return {"perplexity": None, "nll": None, "tokens": int(y.size), "nonfinite": int((~finite).sum())}
    top = x.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(x - top).sum(axis=1)) + top[:, 0]
    nll = float((log_z - x[np.arange(y.size), y]).mean())
    return {"perplexity": float(np.exp(nll)), "nll": nll, "tokens": int(y.size), "nonfinite": 0}


def label_accuracy(logits, labels) -> float | None:
    x = _positions(logits, "logits")
    y = _labels(labels, x.shape[0], x.shape[1])
    keep = y != IGNORE_INDEX
    if not keep.any():
        return None
    finite = np.isfinite(x[keep]).all(axis=1)
    return float((finite & (x[keep].argmax(axis=1) == y[keep])).mean())
