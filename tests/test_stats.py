import math

import pytest

from geofact.stats import binomial_upper_tail


def test_binomial_upper_tail():
    assert binomial_upper_tail(10, 0, 0.3) == 1.0
    assert binomial_upper_tail(3, 3, 0.5) == pytest.approx(1 / 8)
    assert binomial_upper_tail(5, 2, 0.1) == pytest.approx(1 - 0.9**5 - 5 * 0.1 * 0.9**4)
    assert binomial_upper_tail(20, 1, 1e-9) == pytest.approx(1 - (1 - 1e-9) ** 20, rel=1e-6)
    assert not math.isnan(binomial_upper_tail(100, 50, 0.0))
