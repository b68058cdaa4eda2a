"""The test that turns a measurement into a verdict on a claim of the paper.

A verdict on an experiment claim is a test against the alternative the claim must rule out
(`separate`): the measured quantity's interval (`Estimate`: Student t over seeds or cells, a
bootstrap, or for accuracies an interval inside [0, 1], `fraction_interval`; `Estimate.within` cuts an
interval to the values the quantity can take) is set against the range the claim predicts and the
range the alternative predicts (`Range`). The claim holds where the whole interval lies in the claim's
range, does not hold where the interval misses the claim's range, and is *inconclusive* otherwise: the
data at this scale cannot tell the two apart (`Contrast.units_to_decide` says roughly how many seeds,
cells or runs would). A universal claim ("near-perfect in every
cell") is one such test per unit, taken together (`conjunction`), its alternative the complement of
its range. `judge` records such a verdict in a page's report
(geofact.pages.report.Report) with the estimate, both ranges and the population judged, which the
status page shows as the effect size and `geofact check` holds against the ledger's population rule.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from geofact.outcomes import FAILS, HOLDS, INCONCLUSIVE, NOT_IN_REGIME, NOT_RUN  # the pages take these from here
from geofact.intervals import wilson
from geofact.store import to_jsonable


def t_quantile(level: float, df: int) -> float:
    """t with P(|T| <= t) = level for Student's T with `df` degrees of freedom (exact series for
    integer df, Abramowitz & Stegun 26.7.3-4, inverted by bisection)."""
    if not 0 < level < 1 or df < 1:
        raise ValueError(f"level must be in (0, 1) and df >= 1, got {level}, {df}")

    def central(t: float) -> float:  # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
        if df % 2 == 0:
            for j in range(1, df // 2):
                term *= c2 * (2 * j - 1) / (2 * j)
                total += term
            return math.sin(theta) * total
        if df == 1:
            return 2 * theta / math.pi
        term = total = math.cos(theta)
        for j in range(1, (df - 1) // 2):
            term *= c2 * (2 * j) / (2 * j + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * total)

    lo, hi = 0.0, 1.0
    while central(hi) < level:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if central(mid) < level else (lo, mid)
    return hi




@dataclass(frozen=True)
class Estimate:
    """A measured quantity, its point value and its two-sided interval at `confidence`."""

    quantity: str  # what is measured, as a reader reads it: "beta in d_min ~ R^beta"
    value: float
    lo: float
    hi: float
    confidence: float  # e.g. 0.95
    method: str  # how the interval is made: "Student t over 4 R values"
    n: int  # the independent units behind it (seeds, cells, points)

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if not (math.isnan(self.lo) or math.isnan(self.hi)) and self.lo > self.hi:
            raise ValueError(f"an interval needs lo <= hi, got [{self.lo}, {self.hi}]")

    @classmethod
    def missing(cls, quantity: str, why: str, confidence: float = 0.95, n: int = 0) -> Estimate:
        """No estimate to give (no unit to measure, or too few): `why` says which. Its test is inconclusive."""
        return cls(quantity, math.nan, math.nan, math.nan, confidence, why, n)

    @property
    def defined(self) -> bool:
        return all(math.isfinite(x) for x in (self.value, self.lo, self.hi))

    def within(self, lo: float = -math.inf, hi: float = math.inf) -> Estimate:
        """This estimate with its interval cut to [lo, hi], the values the quantity can take (an absolute
        value: [0, inf)). The true value lies there, so the cut interval covers it as often as the whole."""
        if self.defined and not lo <= self.value <= hi:
            raise ValueError(f"the estimate {self.value} lies outside the quantity's range [{lo}, {hi}]")
        if not self.defined or (lo <= self.lo and self.hi <= hi):
            return self
        ends = ("-inf" if lo == -math.inf else f"{lo:g}", "inf" if hi == math.inf else f"{hi:g}")
        return replace(self, lo=max(self.lo, lo), hi=min(self.hi, hi),
                       method=f"{self.method}; cut to the quantity's range [{ends[0]}, {ends[1]}]")

    def text(self, digits: int = 3) -> str:
        """The estimate as a page's prose gives it; one that could not be made says why, never "nan"."""
        if math.isnan(self.value):
            return f"{self.quantity}: no estimate ({self.method})"
        if math.isnan(self.lo) or math.isnan(self.hi):
            return f"{self.quantity} = {self.value:.{digits}g}, no interval ({self.method}, n = {self.n})"
        return (f"{self.quantity} = {self.value:.{digits}g}, {self.confidence:.0%} interval "
                f"[{self.lo:.{digits}g}, {self.hi:.{digits}g}] ({self.method}, n = {self.n})")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Range:
    """The values of the measured quantity a hypothesis predicts: [lo, hi], either end open (infinite)."""

    lo: float = -math.inf
    hi: float = math.inf
    label: str = ""  # the hypothesis in words: "linear growth", "flat"

    def __post_init__(self) -> None:
        if math.isnan(self.lo) or math.isnan(self.hi) or self.lo > self.hi:
            raise ValueError(f"a range needs lo <= hi, got [{self.lo}, {self.hi}]")

    def meets(self, lo: float, hi: float) -> bool:
        """Whether [lo, hi] shares a value with this range."""
        return lo <= self.hi and hi >= self.lo

    def contains(self, lo: float, hi: float) -> bool:
        """Whether [lo, hi] lies wholly in this range."""
        return self.lo <= lo and hi <= self.hi

    def text(self) -> str:
        ends = ("-inf" if self.lo == -math.inf else f"{self.lo:g}", "inf" if self.hi == math.inf else f"{self.hi:g}")
        return f"{self.label} [{ends[0]}, {ends[1]}]".strip()

    def as_dict(self) -> dict:
        return {"lo": self.lo, "hi": self.hi, "label": self.label}


def separate(estimate: Estimate, claim: Range, alternative: Range) -> str:
    """The verdict of a claim against its alternative, from the interval of the measured quantity:

        does not hold   the interval misses the claim's range
        holds           the whole interval lies in the claim's range (and so misses the alternative's,
                        but for an end they share)
        inconclusive    otherwise (or no interval): this scale cannot tell them apart

    A holding verdict needs the whole interval inside, not only the estimate (issue 46: a mean transfer
    of 0.563 [0.387, 0.739] against a claim of at least 0.5 held although half its interval lies below).
    """
    if claim.meets(alternative.lo, alternative.hi) and claim.lo != alternative.hi and claim.hi != alternative.lo:
        raise ValueError(f"the claim's range {claim.text()} and the alternative's {alternative.text()} overlap: "
                         "no measurement can separate them")
    if not estimate.defined:
        return INCONCLUSIVE
    if not claim.meets(estimate.lo, estimate.hi):
        return FAILS
    if claim.contains(estimate.lo, estimate.hi):
        return HOLDS
    return INCONCLUSIVE


def _units(values, name: str) -> np.ndarray:
    """The measured units as a flat float array; a clear error if one is not finite or there is none."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"{name} needs finite values, got {x.tolist()}")
    return x


def t_interval(values, quantity: str, confidence: float = 0.95, unit: str = "values") -> Estimate:
    """The mean of `values` with its Student-t interval (independent units: seeds, cells)."""
    x = _units(values, "t_interval")
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(quantity, mean, math.nan, math.nan, confidence, f"one {unit[:-1] or unit}: no interval", 1)
    half = t_quantile(confidence, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Estimate(quantity, mean, mean - half, mean + half, confidence, f"Student t over {x.size} {unit}", x.size)


def fraction_interval(values, quantity: str, trials: int, confidence: float = 0.95, unit: str = "values") -> Estimate:
    """The mean of `values`, fractions in [0, 1] each counting `trials` outcomes (a run's accuracy over
    its N x R facts), with an interval inside [0, 1] (issue 46: a Student-t interval on a few accuracies
    reached 1.05, and three perfect seeds gave "1 [1, 1]"). The hull of two intervals: the spread between
    units, the Student-t interval of the mean cut to [0, 1] (where the mean must lie, so the cut interval
    covers it as often; none for one unit), and the counts' own, the Clopper-Pearson interval of the
    pooled successes, which identical units still leave. (A Student t on the logit scale would keep inside
    [0, 1] too, but it bounds the mean logit, not the mean: over cells as unlike as 0.3 and 0.999 its
    interval missed the mean accuracy.)"""
    from geofact.intervals import clopper_pearson

    x = _units(values, "fraction_interval")
    if x.min() < 0 or x.max() > 1:
        raise ValueError(f"fraction_interval needs values in [0, 1], got {x.tolist()}")
    mean = float(x.mean())
    lo, hi = clopper_pearson(int(round(float(np.sum(x)) * trials)), int(x.size * trials), confidence)
    method = f"Clopper-Pearson on {x.size} x {trials} pooled trials"
    if x.size > 1:
        spread = t_interval(x, quantity, confidence).within(0.0, 1.0)
        lo, hi = min(lo, spread.lo), max(hi, spread.hi)
        method = f"Student t over {x.size} {unit} cut to [0, 1], hulled with the " + method
    return Estimate(quantity, mean, min(lo, mean), max(hi, mean), confidence, method, x.size)


def bootstrap_interval(values, quantity: str, statistic=np.mean, confidence: float = 0.95, resamples: int = 10_000,
                       seed: int = 0, unit: str = "values") -> Estimate:
    """`statistic` of `values` with a percentile bootstrap interval, resampling the units (seeded)."""
    x = _units(values, "bootstrap_interval")
    if resamples < 100:
        raise ValueError(f"resamples must be >= 100, got {resamples}")
    value = float(statistic(x))
    if x.size < 2:
        return Estimate(quantity, value, math.nan, math.nan, confidence, f"one {unit[:-1] or unit}: no interval", 1)
    draws = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    stats = np.array([statistic(x[row]) for row in draws])
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(stats, [tail, 1 - tail])
    return Estimate(quantity, value, float(lo), float(hi), confidence, f"bootstrap over {x.size} {unit}", x.size)


@dataclass(frozen=True)
class Contrast:
    """One measured quantity against the ranges a claim and its alternative predict."""

    estimate: Estimate
    claim: Range
    alternative: Range

    @property
    def verdict(self) -> str:
        return separate(self.estimate, self.claim, self.alternative)

    def units_to_decide(self) -> float | None:
        """Where the verdict is inconclusive, about how many units (seeds, cells, runs: the estimate's n)
        would decide it at the same estimate and spread, an interval's half-width shrinking as 1/sqrt(n):
        enough to lie wholly in the claim's range if the estimate does, else to miss it. inf where the
        estimate sits on an end of the claim's range; None where the verdict is decided or the estimate
        has no interval."""
        e = self.estimate
        if self.verdict != INCONCLUSIVE or not e.defined or e.n < 2:
            return None
        if self.claim.meets(e.value, e.value):
            distance = min(e.value - self.claim.lo, self.claim.hi - e.value)
        else:
            distance = max(self.claim.lo - e.value, e.value - self.claim.hi)
        if distance == 0.0:
            return math.inf
        half = max(e.hi - e.value, e.value - e.lo)
        return math.ceil(e.n * (half / distance) ** 2)

    def text(self) -> str:
        out = f"{self.estimate.text()}; the claim predicts {self.claim.text()}, the alternative {self.alternative.text()}"
        needed = self.units_to_decide()
        if needed is not None:
            out += ("; at this estimate no number of units decides it" if math.isinf(needed)
                    else f"; about {needed} units (now {self.estimate.n}) would decide it at this spread")
        return out

    def as_dict(self) -> dict:
        return {"estimate": self.estimate.as_dict(), "claim_range": self.claim.as_dict(),
                "alternative_range": self.alternative.as_dict(), "verdict": self.verdict,
                "units_to_decide": self.units_to_decide()}


def conjunction(verdicts: list[str]) -> str:
    """A claim made of several parts: it does not hold if one part does not, is inconclusive if one
    part is, and holds only if every part does."""
    if not verdicts:
        raise ValueError("a verdict needs at least one test")
    return FAILS if FAILS in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else HOLDS


SHOWN_PARTS = 3  # a verdict's text spells out this many parts; beyond, the first (the headline) and the counts


def judge(report, claim_id: str, tests: Contrast | list[Contrast], measured: str, population: dict, note: str = "") -> str:
    """Record on `report` (geofact.pages.report.Report) the verdict of `claim_id` as a test against its
    alternative (`separate`; several tests: their `conjunction`, the first being the claim's headline
    effect), with every estimate and range and `population`: the rule that chose the runs or cells
    judged, as claims.yaml's `population_rule` states it. Returns the verdict."""
    if claim_id in report.claims:
        raise ValueError(f"claim {claim_id!r} reported twice in {report.notebook}")
    tests = [tests] if isinstance(tests, Contrast) else list(tests)
    verdicts = [t.verdict for t in tests]
    verdict = conjunction(verdicts)
    shown = [t.text() for t in tests] if len(tests) <= SHOWN_PARTS else [
        tests[0].text(), f"{len(tests)} parts: " + ", ".join(f"{verdicts.count(v)} {v}" for v in (HOLDS, INCONCLUSIVE, FAILS))]
    report.claims[claim_id] = {"verdict": verdict, "measured": "; ".join([measured, *shown]), "note": note,
                               "estimate": to_jsonable(tests[0].estimate.as_dict()), "tests": to_jsonable([t.as_dict() for t in tests]),
                               "population": to_jsonable(population)}
    return verdict


def sensitivity_table(estimate_at, ranges_at, confidences=(0.9, 0.95, 0.99), settings=(), setting_name: str = "") -> str:
    """How the verdict moves with its rule, as a Markdown table: confidence levels down, the rule's
    other setting across. `estimate_at(confidence)` gives the Estimate, `ranges_at(setting)` the
    (claim, alternative) Ranges at one value of the setting (a tolerance, a cutoff)."""
    settings = list(settings) or [None]
    lines = ["| confidence | " + " | ".join(f"{setting_name} {s:g}" if s is not None else "verdict" for s in settings) + " |",
             "|---|" + "---|" * len(settings)]
    for level in confidences:
        estimate = estimate_at(level)
        cells = [separate(estimate, *ranges_at(s)) for s in settings]
        interval = f"[{estimate.lo:.3g}, {estimate.hi:.3g}]" if estimate.defined else "no interval"
        lines.append(f"| {level:.0%}: {interval} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def estimate_words(entry: dict) -> str:
    """A judged claim's estimate as its page and the status page write it: "0.563 [0.387, 0.739]", "0.92 (no
    interval)", "no estimate"; empty for an entry judged without one. Reads a report's entry in memory or
    from its JSON, where NaN is the string "nan" (geofact.store.to_jsonable)."""
    estimate = entry.get("estimate")
    try:
        value, lo, hi = (float(estimate[k]) for k in ("value", "lo", "hi"))
    except (KeyError, TypeError, ValueError):
        return ""
    if not math.isfinite(value):
        return "no estimate"
    return f"{value:.3g} [{lo:.3g}, {hi:.3g}]" if math.isfinite(lo) and math.isfinite(hi) else f"{value:.3g} (no interval)"


def exact(value: float, quantity: str, confidence: float = 0.95, method: str = "exact count") -> Estimate:
    """A quantity with no sampling error (a count, a table's entry): its interval is the point."""
    return Estimate(quantity, float(value), float(value), float(value), confidence, method, 1)


def proportion_difference(a: tuple[int, int], b: tuple[int, int], quantity: str, confidence: float = 0.95) -> Estimate:
    """p_a - p_b of two independent proportions, each (successes, trials), with Newcombe's hybrid score
    interval (method 10 of Newcombe 1998: built from the two Wilson intervals, sound near 0 and 1)."""
    (sa, na), (sb, nb) = a, b
    if na < 1 or nb < 1 or not (0 <= sa <= na and 0 <= sb <= nb):
        raise ValueError(f"proportion_difference needs 0 <= successes <= trials, trials >= 1; got {a}, {b}")
    (la, ua), (lb, ub) = wilson(sa, na, confidence), wilson(sb, nb, confidence)
    pa, pb = sa / na, sb / nb
    lo = pa - pb - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
    hi = pa - pb + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)
    return Estimate(quantity, pa - pb, lo, hi, confidence, f"Newcombe score interval, {na} and {nb} trials", na + nb)


def welch_difference(a: tuple[float, float, int], b: tuple[float, float, int], quantity: str, confidence: float = 0.95) -> Estimate:
    """a - b from two independent estimates, each (value, standard error, degrees of freedom), with the
    Welch-Satterthwaite interval (its degrees of freedom rounded down: the interval errs wide)."""
    (va, sa, da), (vb, sb, db) = a, b
    if min(da, db) < 1 or not all(map(math.isfinite, (va, sa, vb, sb))):
        return Estimate(quantity, va - vb, math.nan, math.nan, confidence, "no interval (an estimate without one)", 0)
    se = math.sqrt(sa**2 + sb**2)
    df = max(1, int((sa**2 + sb**2) ** 2 / (sa**4 / da + sb**4 / db))) if se > 0 else da + db
    half = t_quantile(confidence, df) * se
    return Estimate(quantity, va - vb, va - vb - half, va - vb + half, confidence, f"Welch t, {df} degrees of freedom", da + db)


def universal(units: dict[str, np.ndarray], quantity: str, claim: Range, alternative: Range, confidence: float = 0.95,
              unit: str = "seeds", trials: int | dict[str, int] | None = None) -> list[Contrast]:
    """A claim about every unit ("in every cell"): one Contrast per unit, its values (e.g. a cell's seeds)
    giving the mean and its interval, Student t, or `fraction_interval` where the values are fractions
    of `trials` outcomes each (one count for all units, or one per unit's name). `quantity` is formatted
    with the unit's name: "readout from s_x at {}". The part the verdict rests on comes first (the one
    whose estimate `judge` shows): a part that does not hold, then an inconclusive one, each the weakest
    (lowest lower end, no interval first)."""
    def interval(values, name):
        if trials is None:
            return t_interval(values, quantity.format(name), confidence, unit=unit)
        count = trials[name] if isinstance(trials, dict) else trials
        return fraction_interval(values, quantity.format(name), count, confidence, unit=unit)

    tests = [Contrast(interval(values, name), claim, alternative) for name, values in units.items()]
    rank = {FAILS: 0, INCONCLUSIVE: 1, HOLDS: 2}
    return sorted(tests, key=lambda t: (rank[t.verdict], t.estimate.lo if math.isfinite(t.estimate.lo) else -math.inf))
