import math

import numpy as np
import pytest

from geofact.d_min_search import (LOG_FORM, POWER_FORM, DminSearch, chain_guess, find_d_min, find_d_min_many, find_d_min_streaming,
                                     fit_log, fit_power)


@pytest.mark.parametrize("true_d", [1, 2, 3, 37, 64, 65, 1000])
def test_find_d_min_on_a_step(true_d):
    calls = []

    def acc(d):
        calls.append(d)
        return 1.0 if d >= true_d else 0.1

    s = find_d_min(acc, level=0.95, d_start=2, d_max=4096)
    assert s.d_min == true_d
    lo, hi = s.bracket
    assert hi == true_d and lo == true_d - 1
    assert len(calls) == len(set(calls))  # nothing trained twice
    assert len(calls) <= 2 * int(np.log2(4096)) + 2


def test_find_d_min_none_when_d_max_fails_and_rel_tol_stops_early():
    s = find_d_min(lambda d: 0.5, d_max=100)
    assert s.d_min is None and s.trials[-1][0] == 100
    exact = find_d_min(lambda d: float(d >= 300), d_max=1024)
    coarse = find_d_min(lambda d: float(d >= 300), d_max=1024, rel_tol=0.125)
    assert exact.d_min == 300
    assert 300 <= coarse.d_min <= 300 * 1.15 and len(coarse.trials) < len(exact.trials)


@pytest.mark.parametrize("kwargs, match", [({"level": 0}, "level"), ({"d_start": 0}, "d_start"), ({"rel_tol": -1}, "rel_tol")])
def test_find_d_min_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        find_d_min(lambda d: 1.0, **kwargs)


def test_fits_recover_their_own_model_and_prefer_it():
    N = 2.0 ** np.arange(7, 16)
    log_curve, power_curve = 5 + 3 * np.log2(N), 0.5 * N**0.9
    lf, pf = fit_log(N, log_curve), fit_power(N, power_curve)
    assert lf.form == LOG_FORM and lf.params == pytest.approx({"a": 5, "b": 3}) and lf.r2 == pytest.approx(1)
    assert pf.form == POWER_FORM and pf.params == pytest.approx({"c": 0.5, "alpha": 0.9}) and pf.r2 == pytest.approx(1)
    assert fit_power(N, log_curve).r2 < 0.999 and fit_log(N, power_curve).r2 < 0.9
    np.testing.assert_allclose(lf(N), log_curve)
    with pytest.raises(ValueError, match="y > 0"):
        fit_power(N, log_curve - 100)


def test_find_d_min_many_asks_in_rounds_and_matches_one_at_a_time():
    truth = {"a": 5, "b": 40, "c": 300}
    rounds = []

    def accuracies(asks):
        rounds.append(asks)
        return [float(d >= truth[k]) for k, d in asks]

    many = find_d_min_many(accuracies, list(truth), d_start=2, d_max=1024)
    assert {k: s.d_min for k, s in many.items()} == truth
    assert rounds[0] == [("a", 2), ("b", 2), ("c", 2)]  # the doubling phase asks every curve for the same d
    for k, t in truth.items():
        assert many[k].trials == find_d_min(lambda d, t=t: float(d >= t), d_start=2, d_max=1024).trials


def test_fit_intervals_cover_the_true_shape_parameter_at_their_level():
    """Over many noisy data sets the 90% interval on alpha (and on b) holds the true value about 90% of the time."""
    rng = np.random.default_rng(0)
    N = np.repeat(2.0 ** np.arange(4, 11), 2)  # 7 N, 2 seeds each
    covered = {"alpha": 0, "b": 0}
    trials = 400
    for _ in range(trials):
        power = 3 * N**0.7 * np.exp(rng.normal(0, 0.1, N.shape))
        log = 5 + 4 * np.log2(N) + rng.normal(0, 1.0, N.shape)
        lo, hi = fit_power(N, power, level=0.9).interval
        covered["alpha"] += lo <= 0.7 <= hi
        lo, hi = fit_log(N, log, level=0.9).interval
        covered["b"] += lo <= 4 <= hi
    for name, count in covered.items():
        assert 0.85 < count / trials < 0.95, name  # binomial sd at 400 trials is 0.015
    assert all(math.isnan(v) for v in fit_log([2, 4], [1, 2]).interval)  # two points: no interval
    with pytest.raises(ValueError, match="2 distinct x"):
        fit_log([4, 4, 4], [1, 2, 3])


def test_find_d_min_streaming_advances_each_curve_on_its_own_answer_and_matches_rounds():
    truth = {"a": 5, "b": 40, "c": 300}
    waiting, calls = [], []

    def answers():  # one answer per call, the most recent ask first: curves move out of step
        k, d = waiting.pop()
        calls.append((k, d))
        return [(k, d, float(d >= truth[k]))]

    streamed = find_d_min_streaming(waiting.extend, answers, list(truth), d_start=2, d_max=1024)
    rounds = find_d_min_many(lambda asks: [float(d >= truth[k]) for k, d in asks], list(truth), d_start=2, d_max=1024)
    assert {k: s.d_min for k, s in streamed.items()} == truth
    assert all(streamed[k].trials == rounds[k].trials for k in truth)
    assert calls[:3] == [("c", 2), ("c", 4), ("c", 8)]  # "c" went on while "a" and "b" still waited


def test_find_d_min_streaming_refuses_an_answer_it_did_not_ask_for_or_none():
    with pytest.raises(ValueError, match="not asked"):
        find_d_min_streaming(lambda asks: None, lambda: [("a", 3, 1.0)], ["a"], d_start=2)
    with pytest.raises(RuntimeError, match="returned nothing"):
        find_d_min_streaming(lambda asks: None, lambda: [], ["a"], d_start=2)


def _chain(truths: list[int], rel_tol: float, d_max: int = 1024, chained: bool = True):
    """d_min searches of curves 0, 1, ... on step accuracies (1 from truths[i] on), each following
    the one before; also returns the order in which (curve, d) were asked."""
    waiting, asked = [], []

    def answers():
        k, d = waiting.pop(0)
        return [(k, d, float(d >= truths[k]))]

    def ask(pairs):
        asked.extend(pairs)
        waiting.extend(pairs)

    after = {i: i - 1 for i in range(1, len(truths))} if chained else None
    return find_d_min_streaming(ask, answers, list(range(len(truths))), d_start=4, d_max=d_max,
                                rel_tol=rel_tol, after=after), asked


@pytest.mark.parametrize("truths", [[5, 6, 8, 12, 16, 24, 40], [40, 30, 9, 9, 100, 3, 1], [17, 20, 22, 24, 28, 30, 34]])
def test_chained_searches_find_what_the_doubling_search_finds(truths):
    exact, _ = _chain(truths, rel_tol=0.0)
    assert [exact[i].d_min for i in range(len(truths))] == truths
    coarse, _ = _chain(truths, rel_tol=0.1)
    for i, t in enumerate(truths):  # the level bracketed to rel_tol: (lo, hi] holds the truth
        lo, hi = coarse[i].bracket
        assert coarse[i].d_min == hi and lo < t <= hi and hi - lo <= max(1, math.floor(0.1 * hi))


def test_a_chained_curve_starts_after_the_one_it_follows_at_the_extrapolated_guess():
    truths = [5, 6, 8, 12, 16, 24, 40]  # d_min of a log-like curve, as exp-scaling measures it
    searches, asked = _chain(truths, rel_tol=0.1)
    for i in range(1, len(truths)):
        first_ask = next(n for n, (k, _) in enumerate(asked) if k == i)
        assert first_ask > max(n for n, (k, _) in enumerate(asked) if k == i - 1)
        earlier = [searches[j].d_min for j in range(i - 1, -1, -1)]
        assert searches[i].trials[0][0] == chain_guess(earlier, 1024)
    doubling, _ = _chain(truths, rel_tol=0.1, chained=False)
    n_chained, n_doubling = (sum(len(s.trials) for s in r.values()) for r in (searches, doubling))
    assert n_chained < 0.75 * n_doubling


def test_chain_guess_extrapolates_and_a_failed_curve_sends_the_next_to_d_max():
    assert chain_guess([12], 1024) == 12
    assert chain_guess([12, 8], 1024) == 18  # 12 * 12 / 8
    assert chain_guess([1000, 100], 1024) == 1024
    assert chain_guess([None, 8], 512) == 512
    failed, _ = _chain([5, 2000, 3000], rel_tol=0.1)
    assert failed[1].d_min is None and failed[2].trials == [(1024, 0.0)]  # one run at d_max, failing


def test_chained_searches_refuse_unknown_curves_and_cycles():
    for after, match in [({1: 7}, "among keys"), ({0: 1, 1: 0}, "cycle")]:
        with pytest.raises(ValueError, match=match):
            find_d_min_streaming(lambda asks: None, lambda: [], [0, 1], after=after)


def _seeds(truths: dict[tuple[int, int], int], together: bool):
    """d_min searches of curves (n, seed) on step accuracies (1 from truths[n, seed] on), each chained to the
    same seed at n - 1, the seeds of an n one family when `together`; answered a stack at a time, as SweepPool
    trains the runs queued at one shape (one n, one d) together. Returns the searches and the stacks."""
    waiting, stacks = [], []

    def answers():
        n, d = waiting[0][0][0], waiting[0][1]
        stack = [(k, e) for k, e in waiting if (k[0], e) == (n, d)]
        for pair in stack:
            waiting.remove(pair)
        stacks.append(stack)
        return [(k, e, float(e >= truths[k])) for k, e in stack]

    keys = list(truths)
    after = {(n, s): (n - 1, s) for n, s in keys if n > 0}
    searches = find_d_min_streaming(waiting.extend, answers, keys, d_start=4, d_max=1024, rel_tol=0.1, after=after,
                                    together={(n, s): n for n, s in keys} if together else None)
    return searches, stacks


def test_seeds_searched_together_start_at_one_guess_stack_while_they_agree_and_each_brackets_its_own_d_min():
    from geofact.d_min_search import family_d_min

    alike = {(n, s): t for n, t in enumerate([5, 7, 12, 20, 33, 50]) for s in range(2)}
    searches, stacks = _seeds(alike, together=True)
    assert all(len(stack) == 2 for stack in stacks)  # seeds that answer alike train every run stacked
    assert {k: s.d_min for k, s in searches.items()} == {k: s.d_min for k, s in _seeds(alike, together=False)[0].items()}
    # seeds whose d_min differ (as trained seeds do, by a few percent to a third)
    truths = alike | {(1, 1): 8, (3, 1): 26, (4, 1): 40, (5, 0): 61}
    searches, stacks = _seeds(truths, together=True)
    for k, t in truths.items():  # each curve's own level, bracketed to rel_tol
        lo, hi = searches[k].bracket
        assert searches[k].d_min == hi and lo < t <= hi and hi - lo <= max(1, math.floor(0.1 * hi))
    for n in range(1, 6):  # a family starts once the one before it is done, every seed at the families' guess
        earlier = [family_d_min([searches[m, s] for s in range(2)]) for m in range(n - 1, -1, -1)]
        assert searches[n, 0].trials[0][0] == searches[n, 1].trials[0][0] == chain_guess(earlier, 1024)
    apart, alone = _seeds(truths, together=False)
    runs = {way: sum(len(s.trials) for s in found.values()) for way, found in (("together", searches), ("apart", apart))}
    assert runs["together"] <= 1.2 * runs["apart"] and len(stacks) < 0.75 * len(alone)  # about as many runs, fewer stacks
    assert family_d_min([searches[0, 0], DminSearch(0.95, None, 1024)]) == searches[0, 0].d_min  # a failed seed left out
    with pytest.raises(ValueError, match="one family"):
        find_d_min_streaming(lambda asks: None, lambda: [], [0, 1, 2], after={1: 0}, together={0: "a", 1: "b", 2: "b"})
    # a family's label may equal a curve's key: curve 0 stays its own, and the family {1, 2} follows it
    waiting = []

    def answer():
        k, d = waiting.pop(0)
        return [(k, d, float(d >= 10))]

    found = find_d_min_streaming(waiting.extend, answer, [0, 1, 2], d_start=4, d_max=64, after={1: 0, 2: 0}, together={1: 0, 2: 0})
    assert found[1].trials[0][0] == found[2].trials[0][0] == chain_guess([found[0].d_min], 64) == 10


def test_log_log_curvature_is_zero_for_a_power_law_and_negative_for_a_logarithm():
    from geofact.d_min_search import log_log_curvature

    N = np.repeat(2.0 ** np.arange(3, 12), 2)
    rng = np.random.default_rng(0)
    gamma, se, df = log_log_curvature(N, 3 * N**0.5 * np.exp(rng.normal(0, 0.02, N.size)))
    assert abs(gamma) < 3 * se and df == N.size - 3
    gamma, se, df = log_log_curvature(N, (2 + 3 * np.log2(N)) * np.exp(rng.normal(0, 0.02, N.size)))
    assert gamma + 3 * se < 0  # concave, clearly
    assert math.isnan(log_log_curvature([8, 16], [3, 4])[1])  # two N: no curvature to fit
