"""bench/bench_dmin_stacking.py: exp-scaling's searches replayed on cached accuracies, seeds together or apart."""

import pytest

from tests.bench import script


def test_seeds_searched_together_train_the_same_d_min_in_fewer_stacks(monkeypatch, tmp_path):
    stacking = script("bench_dmin_stacking")
    # accuracy steps up at d_min(N) = 3 log2 N (learned) or 6 log2 N (frozen), seed 1's a little higher at some N
    truth = lambda c: (6 if c.frozen_embeddings else 3) * c.N.bit_length() + c.seed * (c.N in (32, 128))
    monkeypatch.setattr(stacking, "load_result", lambda cache_dir, c: {"accuracy": float(c.d >= truth(c))})
    p = dict(N_values=[16, 32, 64, 128], R=2, widths=[8, "4d"], budgets=["fixed steps"], seeds=[0, 1], level=0.95,
             lr=1e-3, max_steps=100, batch_size=32, decide_every=50, d_start=4, d_max=256, rel_tol=0.1)
    apart, _ = stacking.replay(p, tmp_path, together=False)
    together, found = stacking.replay(p, tmp_path, together=True)
    for (name, w, _, N, s), search in found.items():  # each seed's own level, bracketed to rel_tol
        lo, hi = search.bracket
        assert lo < (6 if name == "frozen" else 3) * N.bit_length() + s * (N in (32, 128)) <= hi == search.d_min
    assert len(together) < 0.8 * len(apart) and sum(map(len, together)) <= 1.2 * sum(map(len, apart))
    per_N = {way: [sum(s[0].N == N for s in stacks) for N in p["N_values"]] for way, stacks in (("together", together), ("apart", apart))}
    assert per_N["together"][0] == per_N["apart"][0]  # the first N doubles d from d_start either way
    assert all(t <= a for t, a in zip(per_N["together"], per_N["apart"]))
    monkeypatch.setattr(stacking, "load_result", lambda cache_dir, c: None)
    with pytest.raises(SystemExit, match="not in"):
        stacking.replay(p, tmp_path, together=True)
