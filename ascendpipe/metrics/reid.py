"""Re-identification metrics: mAP and CMC over a query/gallery split (pure numpy, float64).

Distances are Euclidean. For each query the valid gallery is every gallery entry except those of
the same identity *and* the same camera (the Market-1501 rule, applied when camera ids are given).
Queries with no true match in their valid gallery are left out, as in the Market-1501 code.

Ties are handled so that results do not depend on gallery order:
- AP is computed exactly as scikit-learn's ``average_precision_score(is_match, -distance)``: entries
  at the same distance enter the ranking together, AP = sum over distinct distances of
  (recall step) x (precision at that distance).
- CMC rank of a query = 1 + number of non-matches at a distance <= its nearest true match, so ties
  count against the query and a collapsed model (all features equal, or NaN) scores 0.
NaN distances are treated as +inf (ranked last).
Without ties the values equal torchreid's ``eval_market1501`` (tests/metrics/test_reid.py restates it);
with ties torchreid ranks tied entries in ``np.argsort`` order, so its numbers then depend on the
gallery's storage order and can be higher than ours.
"""

from __future__ import annotations

import numpy as np

from ascendpipe.errors import UserError

CMC_RANKS = (1, 5, 10)


def pairwise_euclidean(query: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """Euclidean distance matrix (queries x gallery), float64, NaN replaced by +inf."""
    q = np.asarray(query, dtype=np.float64)
    g = np.asarray(gallery, dtype=np.float64)
    sq = (q * q).sum(axis=1)[:, None] + (g * g).sum(axis=1)[None, :] - 2.0 * q @ g.T
    with np.errstate(invalid="ignore"):
        dist = np.sqrt(np.maximum(sq, 0.0))
    return np.where(np.isnan(dist), np.inf, dist)


def average_precision_tied(distances: np.ndarray, is_match: np.ndarray) -> float:
    """AP of one ranking where smaller distance is better; tied distances form one threshold."""
    order = np.argsort(distances, kind="mergesort")
    d = distances[order]
    m = is_match[order].astype(np.float64)
    # the last index of each run of equal distances is where a threshold falls
    ends = np.r_[np.nonzero(d[1:] != d[:-1])[0], d.size - 1]
    tp = np.cumsum(m)[ends]
    precision = tp / (ends + 1)
    recall_step = np.diff(np.r_[0.0, tp]) / m.sum()
    return float((recall_step * precision).sum())


def first_match_rank(distances: np.ndarray, is_match: np.ndarray) -> int:
    """1-based CMC rank of the nearest true match; ties with non-matches count against it."""
    nearest = distances[is_match].min()
    return int((distances[~is_match] <= nearest).sum()) + 1


def _as_vector(values, name: str, size: int) -> np.ndarray:
    arr = np.asarray(values).reshape(-1)
    if arr.size != size:
        raise UserError(f"reid_map_cmc: {name} has {arr.size} entries, expected {size}")
    return arr


def reid_map_cmc(query_features, gallery_features, query_ids, gallery_ids,
                 query_cams=None, gallery_cams=None) -> dict:
    """``{"mAP", "rank1", "rank5", "rank10", "queries"}``: fractions in [0, 1] and the query count."""
    qf = np.asarray(query_features, dtype=np.float64)
    gf = np.asarray(gallery_features, dtype=np.float64)
    qf = qf.reshape(qf.shape[0], -1)
    gf = gf.reshape(gf.shape[0], -1)
    if qf.shape[1] != gf.shape[1]:
        raise UserError(f"reid_map_cmc: query features have dimension {qf.shape[1]}, gallery {gf.shape[1]}")
    qid = _as_vector(query_ids, "query_ids", qf.shape[0])
    gid = _as_vector(gallery_ids, "gallery_ids", gf.shape[0])
    if (query_cams is None) != (gallery_cams is None):
        raise UserError("reid_map_cmc: give camera ids for both query and gallery, or for neither")
    use_cams = query_cams is not None
    if use_cams:
        qcam = _as_vector(query_cams, "query_cams", qf.shape[0])
        gcam = _as_vector(gallery_cams, "gallery_cams", gf.shape[0])
    dist = pairwise_euclidean(qf, gf)
    aps, ranks = [], []
    for i in range(qf.shape[0]):
        valid = ~((gid == qid[i]) & (gcam == qcam[i])) if use_cams else np.ones(gid.size, bool)
        match = gid[valid] == qid[i]
        if not match.any():
            continue
        aps.append(average_precision_tied(dist[i, valid], match))
        ranks.append(first_match_rank(dist[i, valid], match))
    if not aps:
        raise UserError("reid_map_cmc: no query has a true match in the gallery (check ids and cameras)")
    ranks_arr = np.asarray(ranks)
    result = {"mAP": float(np.mean(aps)), "queries": len(aps)}
    for k in CMC_RANKS:
        result[f"rank{k}"] = float((ranks_arr <= k).mean())
    return result
