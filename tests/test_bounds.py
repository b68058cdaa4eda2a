import math

import numpy as np
import pytest

from geofact import bounds


def test_formulas_match_the_statement():
    N, R, k, D = 2**16, 2, 2, 10.0
    assert bounds.n_disjoint_trees(N, R, k) == N // (2 * R**4) == 2048
    assert bounds.b_global(N, R, k, D) == pytest.approx((R - 1) * N * math.log2(N / math.e) - N * D)
    assert bounds.b_local(N, R, k, D) == pytest.approx(2048 * (R**k * (16 - 1) - D))
    assert bounds.b_local(N, R, k, D, leaves="proof") == pytest.approx(2048 * (R ** (2 * k) * 15 - D))


def test_stirling_form_is_below_the_exact_log_factorial():
    for N in [2, 10, 1000, 2**20]:
        assert bounds.b_global(N, 3, 2, 0.0) <= bounds.b_global(N, 3, 2, 0.0, exact=True)


def test_min_weight_bits_is_monotone_in_D_and_vanishes_for_huge_embeddings():
    D = np.linspace(0, 10**6, 50)
    w = bounds.min_weight_bits(2**12, 4, 3, D)
    assert np.all(np.diff(w) <= 0) and w[0] > 0 and w[-1] == 0


@pytest.mark.parametrize("N,R,k,match", [(1, 2, 2, "N"), (10, 1, 2, "R"), (10, 2, 1, "k")])
def test_out_of_range_arguments_are_rejected(N, R, k, match):
    with pytest.raises(ValueError, match=match):
        bounds.b_global(N, R, k, 0.0)
