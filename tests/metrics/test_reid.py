import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from ascendpipe.errors import UserError
from ascendpipe.metrics import reid_map_cmc


def sklearn_reference(qf, gf, qid, gid, qcam=None, gcam=None):
    dist = np.sqrt(((qf[:, None, :] - gf[None, :, :]) ** 2).sum(-1))
    aps, ranks = [], []
    for i in range(len(qf)):
        valid = np.ones(len(gf), bool) if qcam is None else ~((gid == qid[i]) & (gcam == qcam[i]))
        match = gid[valid] == qid[i]
        if not match.any():
            continue
        aps.append(average_precision_score(match, -dist[i, valid]))
        order = np.argsort(dist[i, valid], kind="stable")  # no ties in random features
        ranks.append(np.nonzero(match[order])[0][0] + 1)
    ranks = np.array(ranks)
    return np.mean(aps), {k: np.mean(ranks <= k) for k in (1, 5, 10)}


def random_split(seed, n_ids=12, per_id=6, dim=16):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_ids, dim))
    ids = np.repeat(np.arange(n_ids), per_id)
    feats = centres[ids] + rng.normal(scale=1.2, size=(len(ids), dim))
    cams = np.tile(np.arange(per_id) % 2, n_ids)
    q = np.arange(len(ids)) % per_id == 0
    return feats[q], feats[~q], ids[q], ids[~q], cams[q], cams[~q]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_and_cmc_match_sklearn_without_cameras(seed):
    qf, gf, qid, gid, _, _ = random_split(seed)
    got = reid_map_cmc(qf, gf, qid, gid)
    ref_map, ref_cmc = sklearn_reference(qf, gf, qid, gid)
    assert got["mAP"] == pytest.approx(ref_map, abs=1e-12)
    for k in (1, 5, 10):
        assert got[f"rank{k}"] == pytest.approx(ref_cmc[k])


@pytest.mark.parametrize("seed", [3, 4])
def test_market1501_rule_matches_sklearn_on_valid_gallery(seed):
    qf, gf, qid, gid, qcam, gcam = random_split(seed)
    got = reid_map_cmc(qf, gf, qid, gid, qcam, gcam)
    ref_map, ref_cmc = sklearn_reference(qf, gf, qid, gid, qcam, gcam)
    assert got["mAP"] == pytest.approx(ref_map, abs=1e-12)
    assert got["rank1"] == pytest.approx(ref_cmc[1])
    # the rule changes the answer here: ignoring cameras uses a different gallery
    assert reid_map_cmc(qf, gf, qid, gid)["mAP"] != pytest.approx(got["mAP"], abs=1e-9)


def test_ties_follow_sklearn_and_count_against_cmc():
    # gallery distances from query 0 (1-d features): 1 (match), 1 (non-match), 2 (match)
    qf = np.array([[0.0]])
    gf = np.array([[1.0], [-1.0], [2.0]])
    got = reid_map_cmc(qf, gf, [7], [7, 3, 7])
    # sklearn: threshold at d=1 has precision 1/2, recall 1/2; at d=2 precision 2/3, recall 1
    assert got["mAP"] == pytest.approx(average_precision_score([1, 0, 1], [-1.0, -1.0, -2.0]))
    assert got["mAP"] == pytest.approx(0.5 * 0.5 + 0.5 * (2 / 3))
    assert got["rank1"] == 0.0 and got["rank5"] == 1.0


def test_hand_computed_cmc_and_same_camera_exclusion():
    qf = np.array([[0.0], [10.0]])
    gf = np.array([[0.1], [0.2], [9.0], [10.5]])
    qid, gid = [1, 2], [1, 2, 1, 2]
    # query 0 (id 1): nearest is its own id -> rank 1; query 1 (id 2): 10.5 is id 2 -> rank 1
    assert reid_map_cmc(qf, gf, qid, gid)["rank1"] == 1.0
    # same camera as the query for the nearest true matches: they are ignored
    got = reid_map_cmc(qf, gf, qid, gid, [0, 0], [0, 1, 1, 0])
    # query 0 valid gallery: 0.2 (id 2, d .2), 9.0 (id 1, d 9), 10.5 (id 2, d 10.5) -> first match rank 2
    # query 1 valid gallery (10.5 is id 2 on camera 0: ignored): 9.0 (id 1, d 1), 0.2 (id 2, d 9.8),
    # 0.1 (id 1, d 9.9) -> first match rank 2; each query has one match at position 2: AP 1/2
    assert got["rank1"] == 0.0
    assert got["rank5"] == 1.0
    assert got["mAP"] == pytest.approx(0.5)


def test_collapsed_features_give_chance_map_and_zero_rank1():
    ids = np.repeat(np.arange(4), 3)
    got = reid_map_cmc(np.zeros((4, 8)), np.zeros((12, 8)), np.arange(4), ids)
    assert got["rank1"] == 0.0
    assert got["mAP"] == pytest.approx(3 / 12)  # one threshold: precision = share of matches
    nan = reid_map_cmc(np.full((4, 8), np.nan), np.full((12, 8), np.nan), np.arange(4), ids)
    assert nan["mAP"] == pytest.approx(3 / 12) and nan["rank1"] == 0.0


def test_errors():
    with pytest.raises(UserError, match="no query has a true match"):
        reid_map_cmc(np.zeros((1, 2)), np.ones((2, 2)), [5], [1, 2])
    with pytest.raises(UserError, match="for both query and gallery"):
        reid_map_cmc(np.zeros((1, 2)), np.ones((2, 2)), [1], [1, 2], query_cams=[0])
    with pytest.raises(UserError, match="gallery_ids has 3 entries, expected 2"):
        reid_map_cmc(np.zeros((1, 2)), np.ones((2, 2)), [1], [1, 2, 3])


def torchreid_market1501(qf, gf, qid, gid, qcam, gcam):
    """torchreid's ``eval_market1501`` (torchreid/metrics/rank.py), restated: gallery sorted by distance
    (np.argsort), same identity + same camera removed, CMC from the first hit, AP = the mean of the
    precision at each hit, queries without a hit skipped."""
    dist = np.sqrt(((qf[:, None, :] - gf[None, :, :]) ** 2).sum(-1))
    aps, first = [], []
    for i in range(len(qf)):
        order = np.argsort(dist[i])
        keep = ~((gid[order] == qid[i]) & (gcam[order] == qcam[i]))
        hits = (gid[order][keep] == qid[i]).astype(float)
        if not hits.any():
            continue
        first.append(int(np.argmax(hits)) + 1)
        aps.append(float((np.cumsum(hits) / np.arange(1, hits.size + 1) * hits).sum() / hits.sum()))
    first = np.array(first)
    return float(np.mean(aps)), {k: float(np.mean(first <= k)) for k in (1, 5, 10)}


@pytest.mark.parametrize("seed", [3, 4])
def test_market1501_matches_torchreid_without_ties(seed):
    qf, gf, qid, gid, qcam, gcam = random_split(seed)
    ref_map, ref_cmc = torchreid_market1501(qf, gf, qid, gid, qcam, gcam)
    got = reid_map_cmc(qf, gf, qid, gid, qcam, gcam)
    assert got["mAP"] == pytest.approx(ref_map, abs=1e-12)
    assert [got["rank1"], got["rank5"], got["rank10"]] == pytest.approx([ref_cmc[1], ref_cmc[5], ref_cmc[10]])


def test_tied_distances_are_where_torchreid_differs():
    """torchreid ranks tied gallery entries in argsort order, so a tie between a match and a non-match
    gives it rank 1 or 2 by storage order; ours counts the tie against the query (documented)."""
    qf = np.zeros((1, 2))
    gf = np.array([[1.0, 0.0], [0.0, 1.0]])  # both at distance 1
    qid, qcam, gcam = np.array([7]), np.array([0]), np.array([1, 1])
    match_first = torchreid_market1501(qf, gf, qid, np.array([7, 8]), qcam, gcam)
    match_second = torchreid_market1501(qf, gf, qid, np.array([8, 7]), qcam, gcam)
    assert (match_first[1][1], match_second[1][1]) == (1.0, 0.0)  # torchreid: depends on the order
    for gid in (np.array([7, 8]), np.array([8, 7])):
        got = reid_map_cmc(qf, gf, qid, gid, qcam, gcam)
        assert got["rank1"] == 0.0 and got["mAP"] == pytest.approx(0.5)  # the tie counts against it
