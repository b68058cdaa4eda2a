"""±1 codes: Lemma G.1 of the paper (`lem:orth vectors pm 1`, Appendix G).

    For any k >= 2 there exist v_1, ..., v_k in {±1}^{4 log k} with |<v_i, v_j>| <= 3 log k (i != j).

The paper proves it by sampling the codes uniformly and applying Hoeffding plus a union bound,
concluding that random codes succeed with probability >= 1 - 2/k^2. This module provides

* the objects of the statement (code length, threshold) for either log base,
* exact all-pairs checks (bit-packed popcounts, so k = 2^15 costs about a second),
* the exact per-pair tail of <v_i, v_j> for random codes, the correct Hoeffding bound and
  the bound the paper writes, so the proof's step can be compared with the truth,
* a sampler that *repairs* violating pairs (resampling one vector of each), which returns codes
  that provably satisfy the bound; the constructions use it,
* the alteration-method certificate that proves existence for a given k.

For two ±1 vectors of length m, <v, w> = m - 2 * hamming(v, w): every inner-product question is
a popcount question, which is what makes the exact checks cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

LogBase = Literal["2", "e"]
LOG_BASES: tuple[LogBase, ...] = ("2", "e")


def log_base(x: float, base: LogBase) -> float:
    """log_b(x) with math.log2 for base 2, so that 4*log2(2^j) is an exact integer."""
    if base == "2":
        return math.log2(x)
    if base == "e":
        return math.log(x)
    raise ValueError(f"base must be one of {LOG_BASES}, got {base!r}")


def lemma_code_length(k: int, base: LogBase) -> int:
    """m = ceil(4 log_b k): the lemma's dimension rounded up to an integer (the paper leaves it real)."""
    _check_k(k)
    return math.ceil(4 * log_base(k, base))


def lemma_threshold(k: int, base: LogBase) -> float:
    """t = 3 log_b k: the lemma's bound on |<v_i, v_j>|."""
    _check_k(k)
    return 3 * log_base(k, base)


def _check_k(k: int) -> None:
    if int(k) != k or k < 2:
        raise ValueError(f"k (number of codes) must be an integer >= 2, got {k!r}")


# ----------------------------------------------------------------------------- exact pair checks


def random_codes(k: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """k codes drawn uniformly from {±1}^m. Returns int8 array of shape (k, m)."""
    if k < 1 or m < 0:
        raise ValueError(f"need k >= 1 and m >= 0, got k={k}, m={m}")
    return rng.integers(0, 2, size=(k, m), dtype=np.int8) * 2 - 1


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """Bit-pack ±1 codes (k, m) into uint64 words (k, ceil(m/64)); +1 -> bit set."""
    k, m = codes.shape
    n_words = max(1, math.ceil(m / 64))
    bits = np.zeros((k, n_words * 64), dtype=np.uint64)
    bits[:, :m] = codes > 0
    weights = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))
    return (bits.reshape(k, n_words, 64) * weights).sum(axis=2, dtype=np.uint64)


def _hamming_blocks(codes: np.ndarray, block: int):
    """Yield (i0, j0, hamming) tiles covering every pair i < j once.

    hamming[a, b] is the Hamming distance between codes i0 + a and j0 + b. Tiles on the diagonal
    (i0 == j0) also hold pairs with a >= b, which the caller masks with `np.triu(..., 1)`.
    """
    packed = pack_codes(codes)
    k = len(packed)
    dtype = np.uint8 if packed.shape[1] <= 3 else np.uint16  # a distance <= 64 * words fits
    for i0 in range(0, k, block):
        for j0 in range(i0, k, block):
            xor = packed[i0 : i0 + block, None, :] ^ packed[None, j0 : j0 + block, :]
            yield i0, j0, np.bitwise_count(xor).sum(axis=2, dtype=dtype)


def _violation_hamming_bounds(m: int, threshold: float) -> tuple[int, int]:
    """|m - 2H| > t  <=>  H <= lo or H >= hi."""
    return math.ceil((m - threshold) / 2) - 1, math.floor((m + threshold) / 2) + 1


@dataclass(frozen=True)
class PairStats:
    """All-pairs summary of a code book: violations of |<v_i, v_j>| <= threshold, extreme inner products."""

    n_pairs: int
    n_violations: int
    max_abs_inner: int
    max_inner: int  # signed maximum: the quantity a query-key score sees (see the attention construction)


def pair_stats(codes: np.ndarray, threshold: float, block: int = 2048) -> PairStats:
    """Exact statistics over all k(k-1)/2 pairs of codes (k, m), in O(k^2) popcounts."""
    k, m = codes.shape
    lo, hi = _violation_hamming_bounds(m, threshold)
    n_viol, min_ham, max_ham = 0, m, 0
    for i0, j0, ham in _hamming_blocks(codes, block):
        if i0 == j0:
            pairs = ham[np.triu(np.ones(ham.shape, dtype=bool), 1)]
        else:
            pairs = ham.ravel()
        if pairs.size:
            n_viol += int(np.count_nonzero(pairs <= lo)) + int(np.count_nonzero(pairs >= hi))
            min_ham, max_ham = min(min_ham, int(pairs.min())), max(max_ham, int(pairs.max()))
    return PairStats(k * (k - 1) // 2, n_viol, max(m - 2 * min_ham, 2 * max_ham - m), m - 2 * min_ham)


def violating_pairs(codes: np.ndarray, threshold: float, block: int = 2048) -> np.ndarray:
    """Index pairs (i, j), i < j, with |<v_i, v_j>| > threshold. Shape (n, 2)."""
    lo, hi = _violation_hamming_bounds(codes.shape[1], threshold)
    found = [np.zeros((0, 2), dtype=np.int64)]
    for i0, j0, ham in _hamming_blocks(codes, block):
        bad = (ham <= lo) | (ham >= hi)
        if i0 == j0:
            bad = np.triu(bad, 1)
        a, b = np.nonzero(bad)
        found.append(np.stack([a + i0, b + j0], axis=1))
    return np.concatenate(found)


def sample_valid_codes(
    k: int,
    m: int,
    threshold: float,
    seed: int = 0,
    max_rounds: int = 200,
) -> np.ndarray:
    """Codes (k, m) with |<v_i, v_j>| <= threshold for all i != j, by repairing random codes.

    Each round resamples the higher-indexed vector of every violating pair (a Moser-Tardos style
    repair). Raises RuntimeError if no valid code book is reached within max_rounds, so a caller never
    receives codes that miss the bound.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    if m < math.log2(k) and threshold < m:
        raise ValueError(f"{k} distinct codes need length m >= log2(k) = {math.log2(k):.2f}, got m={m}")
    rng = np.random.default_rng(seed)
    codes = random_codes(k, m, rng)
    for _ in range(max_rounds):
        bad = violating_pairs(codes, threshold)
        if len(bad) == 0:
            return codes
        redraw = np.unique(bad[:, 1])
        codes[redraw] = random_codes(len(redraw), m, rng)
    raise RuntimeError(
        f"no code book of {k} codes of length {m} with |<v_i,v_j>| <= {threshold:g} after {max_rounds} repair rounds"
    )


def lemma_codes(k: int, base: LogBase = "2", seed: int = 0, m: int | None = None) -> np.ndarray:
    """Codes satisfying Lemma G.1's bound |<v_i, v_j>| <= 3 log_b k, of length m (default ceil(4 log_b k))."""
    m = lemma_code_length(k, base) if m is None else m
    return sample_valid_codes(k, m, lemma_threshold(k, base), seed=seed)


@dataclass(frozen=True)
class TrialSummary:
    """Monte Carlo over `trials` independent code books of the lemma's size, checked exactly."""

    k: int
    base: LogBase
    m: int
    threshold: float
    trials: int
    successes: int  # code books with no violating pair
    violations: int  # violating pairs summed over trials
    max_inner_over_half: int  # lemma-valid code books whose max <v_i, v_j> exceeds m/2

    @property
    def pairs(self) -> int:
        return self.trials * math.comb(self.k, 2)


def random_code_trials(k: int, base: LogBase, trials: int, seed: int) -> TrialSummary:
    """Draw `trials` uniform code books for Lemma G.1 and check each against the bound, exactly."""
    m, t = lemma_code_length(k, base), lemma_threshold(k, base)
    rng = np.random.default_rng(seed)
    successes = violations = over_half = 0
    for _ in range(trials):
        stats = pair_stats(random_codes(k, m, rng), t)
        successes += stats.n_violations == 0
        violations += stats.n_violations
        over_half += stats.n_violations == 0 and stats.max_inner > m / 2
    return TrialSummary(k, base, m, t, trials, successes, violations, over_half)


def construction_codes(k: int, m: int, seed: int = 0) -> np.ndarray:
    """Codes the constructions use: Lemma G.1's bound 3 log2 k at length m, capped at m - 1 so the
    codes stay distinct (all exact decoding needs); a single code is the all-ones vector."""
    if k == 1:
        return np.ones((1, m), dtype=np.int8)
    return sample_valid_codes(k, m, min(lemma_threshold(k, "2"), m - 1), seed=seed)


def decode(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Nearest code by inner product: argmax_a <x, v_a>. x has shape (..., m); returns (...,) indices."""
    return np.argmax(x @ codes.T.astype(x.dtype, copy=False), axis=-1)


# ----------------------------------------------------------------------------- exact probabilities


def binomial_half_cdf(m: int, h: int) -> float:
    """P(H <= h) for H ~ Binomial(m, 1/2), computed exactly with integers."""
    if h < 0:
        return 0.0
    h = min(h, m)
    return sum(math.comb(m, i) for i in range(h + 1)) / 2**m


def pair_exceedance_probability(m: int, t: float, strict: bool = True) -> float:
    """Exact P(|<v, w>| > t) (strict) or P(|<v, w>| >= t) for independent uniform v, w in {±1}^m.

    <v, w> = m - 2H with H ~ Binomial(m, 1/2); the two tails are symmetric and disjoint for t > 0.
    """
    if t <= 0:
        raise ValueError(f"threshold t must be > 0, got {t}")
    # |m - 2H| > t  <=>  H < (m - t)/2 or H > (m + t)/2 ;  >= t  <=>  H <= (m - t)/2 or ...
    half = (m - t) / 2
    h = math.ceil(half) - 1 if strict else math.floor(half)
    return min(1.0, 2 * binomial_half_cdf(m, h))


def hoeffding_pair_bound(m: int, t: float) -> float:
    """Correct Hoeffding bound P(|<v, w>| >= t) <= 2 exp(-t^2 / (2m)) (m summands, each in [-1, 1])."""
    return min(1.0, 2 * math.exp(-(t**2) / (2 * m)))


def paper_pair_bound(k: int, base: LogBase) -> float:
    """The bound the proof writes for one pair: 2 exp(-4 log k)."""
    return 2 * math.exp(-4 * log_base(k, base))


def paper_success_claim(k: int) -> float:
    """The proof's conclusion: random codes meet the bound with probability >= 1 - 2/k^2."""
    return 1 - 2 / k**2


def expected_violations(k: int, base: LogBase) -> float:
    """E[# violating pairs] for uniformly random lemma codes: C(k, 2) * P(|<v, w>| > 3 log k), exactly."""
    m, t = lemma_code_length(k, base), lemma_threshold(k, base)
    return math.comb(k, 2) * pair_exceedance_probability(m, t)


def alteration_certifies(k: int, base: LogBase) -> bool:
    """True when the alteration method proves the lemma's existence claim for this k.

    Draw 2k random codes; X = # violating pairs has E[X] = k(2k-1)p with p the exact pair probability.
    If (2k-1)p <= 1 then P(X <= k) > 0, and deleting one code from each violating pair leaves at least
    k codes with no violation. This replaces the proof's union bound, which fails (see the notebook).
    """
    m, t = lemma_code_length(k, base), lemma_threshold(k, base)
    return (2 * k - 1) * pair_exceedance_probability(m, t) <= 1


def alteration_ratios(k_max: int, base: LogBase) -> tuple[np.ndarray, np.ndarray]:
    """(k, (2k-1) p_k) for every k in [2, k_max], with p_k the exact pair probability; <= 1 certifies k.

    Vectorised form of `alteration_certifies`, using one exact binomial CDF table per code length.
    """
    k = np.arange(2, k_max + 1)
    log_k = np.log2(k) if base == "2" else np.log(k)  # np.log2 is exact on powers of two
    m = np.ceil(4 * log_k).astype(np.int64)
    h = np.ceil((m - 3 * log_k) / 2).astype(np.int64) - 1  # violation <=> H <= h (or the mirror tail)
    cdf = np.zeros((m.max() + 1, m.max() + 2))  # cdf[m, h + 1] = P(Binomial(m, 1/2) <= h)
    for mm in range(m.max() + 1):
        cdf[mm, 1 : mm + 2] = np.cumsum([math.comb(mm, i) for i in range(mm + 1)]) / 2**mm
        cdf[mm, mm + 2 :] = 1.0
    p = np.minimum(1.0, 2 * cdf[m, np.clip(h + 1, 0, None)])
    return k, (2 * k - 1) * p


def hoeffding_alteration_margin(log_k: float, base: LogBase) -> float:
    """For k beyond any finite check: 9L^2/(8L+2) - ln(4k), with L = log_b k.

    Hoeffding with m <= 4L + 1 gives p <= 2 exp(-9L^2/(8L+2)), so (2k-1)p <= 1 whenever this margin is
    >= 0. Its derivative in L is positive for L >= 1 in both bases, so a non-negative value at L_0
    certifies every larger k.
    """
    ln_k = log_k * (math.log(2) if base == "2" else 1.0)
    return 9 * log_k**2 / (8 * log_k + 2) - (math.log(4) + ln_k)


def n_bits(n: int) -> int:
    """ceil(log2 n): the bits an index in [0, n) needs (0 for n = 1)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return math.ceil(math.log2(n)) if n > 1 else 0


def index_bits(n: int, width: int | None = None) -> np.ndarray:
    """bin(i) in {0,1}^width for every index i in [0, n), least significant bit first: shape (n, width).

    The one index-to-bits map of the package: the k-hop proofs' bin(s), bin(r) (Theorems 4.3, 4.4), the
    hierarchical construction's relation bits (Theorem 4.1) and `binary_codes` read it. `width`
    defaults to `n_bits(n)`.
    """
    width = n_bits(n) if width is None else width
    if width < n_bits(n):
        raise ValueError(f"width must be >= ceil(log2 {n}) = {n_bits(n)} to tell {n} indices apart, got {width}")
    return ((np.arange(n)[:, None] >> np.arange(width)[None, :]) & 1).astype(np.int8)


def binary_codes(k: int) -> np.ndarray:
    """The shortest ±1 codes that are pairwise distinct: the binary expansion of the index, length ceil(log2 k).

    Distinct ±1 codes of equal norm are all that argmax decoding needs: <v_a, v_a> = m > <v_a, v_b>.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return index_bits(k, max(1, n_bits(k))) * 2 - 1
