import itertools
import math

import numpy as np
import pytest

from geofact import codes


def brute_inner(c):
    g = c.astype(int) @ c.T.astype(int)
    iu = np.triu_indices(len(c), 1)
    return g[iu], iu


def test_code_length_and_threshold_use_exact_log2():
    assert codes.lemma_code_length(2**15, "2") == 60  # 4*log2(2^15) is exact, no spurious ceil
    assert codes.lemma_threshold(2**15, "2") == 45
    assert codes.lemma_code_length(2**15, "e") == math.ceil(4 * math.log(2**15))
    assert codes.lemma_code_length(3, "2") == 7


@pytest.mark.parametrize("bad", [1, 0, 2.5])
def test_k_below_two_is_rejected(bad):
    with pytest.raises(ValueError, match="k"):
        codes.lemma_code_length(bad, "2")


def test_unknown_base_is_rejected():
    with pytest.raises(ValueError, match="base"):
        codes.lemma_threshold(8, "10")


@pytest.mark.parametrize("k,m,t,block", [(40, 7, 3.5, 8), (300, 70, 20.0, 64), (129, 130, 40.0, 50), (1000, 12, 7.9, 256)])
def test_pair_stats_and_violations_match_brute_force(k, m, t, block):
    c = codes.random_codes(k, m, np.random.default_rng(k))
    ip, iu = brute_inner(c)
    stats = codes.pair_stats(c, t, block=block)
    assert stats.n_pairs == k * (k - 1) // 2
    assert stats.n_violations == int((np.abs(ip) > t).sum())
    assert stats.max_abs_inner == np.abs(ip).max() and stats.max_inner == ip.max()
    pairs = codes.violating_pairs(c, t, block=block)
    expected = {(int(i), int(j)) for i, j, v in zip(*iu, ip) if abs(v) > t}
    assert {tuple(p) for p in pairs.tolist()} == expected


def test_sample_valid_codes_meets_the_bound_and_fails_loudly_when_impossible():
    c = codes.lemma_codes(500, "e", seed=3)
    ip, _ = brute_inner(c)
    assert c.shape == (500, codes.lemma_code_length(500, "e"))
    assert np.abs(ip).max() <= codes.lemma_threshold(500, "e")
    with pytest.raises(RuntimeError, match="repair rounds"):
        codes.sample_valid_codes(10, 4, 0.5, max_rounds=5)  # 10 pairwise orthogonal codes in R^4: impossible


@pytest.mark.parametrize("m", [3, 4, 7, 10])
def test_exact_pair_probability_matches_enumeration(m):
    vectors = np.array(list(itertools.product([-1, 1], repeat=m)))
    inner = (vectors @ vectors.T).ravel()  # all ordered pairs (v, w): uniform independent draws
    for t in [0.5, 1.0, 2.0, 2.5, m - 1.0]:
        assert codes.pair_exceedance_probability(m, t) == pytest.approx(np.mean(np.abs(inner) > t))
        assert codes.pair_exceedance_probability(m, t, strict=False) == pytest.approx(np.mean(np.abs(inner) >= t))
        assert codes.pair_exceedance_probability(m, t, strict=False) <= codes.hoeffding_pair_bound(m, t) + 1e-12


def test_paper_hoeffding_step_is_below_the_truth():
    # the proof's bound 2exp(-4 log k) is violated by the exact tail already at k = 64
    k = 64
    m, t = codes.lemma_code_length(k, "2"), codes.lemma_threshold(k, "2")
    assert codes.pair_exceedance_probability(m, t, strict=False) > codes.paper_pair_bound(k, "2")


@pytest.mark.parametrize("base", codes.LOG_BASES)
def test_alteration_scan_matches_scalar_version(base):
    ks, ratio = codes.alteration_ratios(300, base)
    for k in [2, 3, 5, 17, 64, 255, 300]:
        m, t = codes.lemma_code_length(k, base), codes.lemma_threshold(k, base)
        assert ratio[k - 2] == pytest.approx((2 * k - 1) * codes.pair_exceedance_probability(m, t))
        assert codes.alteration_certifies(k, base) == (ratio[k - 2] <= 1)


def test_expected_violations_predicts_monte_carlo():
    s = codes.random_code_trials(256, "e", trials=40, seed=0)
    lam = codes.expected_violations(256, "e")
    assert s.violations / s.trials == pytest.approx(lam, rel=0.25)


def test_binary_codes_are_shortest_distinct_and_decode():
    c = codes.binary_codes(1000)
    assert c.shape == (1000, 10)
    assert len(np.unique(c, axis=0)) == 1000
    assert (codes.decode(c.astype(float), c) == np.arange(1000)).all()


def test_index_bits_is_the_binary_expansion_least_significant_bit_first():
    bits = codes.index_bits(100)
    assert bits.shape == (100, 7) and codes.n_bits(100) == 7
    assert (bits @ (1 << np.arange(7)) == np.arange(100)).all()  # the expansion, read back
    assert codes.n_bits(1) == 0 and codes.n_bits(2) == 1 and codes.n_bits(1024) == 10 and codes.n_bits(1025) == 11
    assert codes.index_bits(5, width=4).shape == (5, 4)
    with pytest.raises(ValueError, match="width must be >= ceil"):
        codes.index_bits(5, width=2)
    with pytest.raises(ValueError, match="n must be >= 1"):
        codes.n_bits(0)
