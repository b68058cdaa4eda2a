"""Is a verdict's evidence in the regime the paper describes? (Section 5.1, Appendix B)

The paper trains each run until its training loss is below 1e-4 (at most 15,000 steps) and judges the
mechanism claims on "configurations with sufficient capacity", whose d reaches several times the
smallest d that memorises (its grid: d up to 768 against thresholds <= 128). A verdict taken on runs
that stopped at the step budget, or only on cells at the capacity threshold, says nothing about the
paper's claim, so such a verdict is recorded as "not in regime" (geofact.pages.report) instead of "holds"
or "does not hold".

    converged fraction  among the runs that memorise (accuracy >= perfect), the fraction that met the
                        stop rule (loss < loss_threshold before max_steps)
    headroom            d / d_min(R), with d_min(R) the smallest grid d from which the learned model's
                        mean accuracy stays >= perfect (geofact.training.grid)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from geofact.evidence import NOT_IN_REGIME, judge
from geofact.store import to_jsonable

MIN_CONVERGED = 0.9  # the fraction of memorising runs that must meet the stop rule
MIN_HEADROOM = 6.0  # the largest judged d / d_min(R) must reach this (the paper's grid: 768 / 128)


@dataclass(frozen=True)
class Regime:
    """The runs behind one verdict, summarised against the paper's regime."""

    runs: int  # runs behind the verdict
    memorised: int  # ... of which reach accuracy >= perfect
    converged: int  # ... of which also met the stop rule
    median_steps: float
    max_steps_taken: int
    median_final_loss: float
    max_final_loss: float
    headroom_max: float  # largest d / d_min(R) among the judged cells (NaN: none)
    min_converged: float = MIN_CONVERGED
    min_headroom: float = MIN_HEADROOM

    @property
    def converged_fraction(self) -> float:
        return self.converged / self.memorised if self.memorised else float("nan")

    @property
    def reasons(self) -> list[str]:
        """Why the evidence is outside the paper's regime (empty when it is in it)."""
        out = []
        if not self.memorised:
            out.append("no run reaches the 'perfect' accuracy")
        elif self.converged_fraction < self.min_converged:
            out.append(f"only {self.converged} of {self.memorised} memorising runs met the stop rule "
                       f"(fraction {self.converged_fraction:.2f} < {self.min_converged})")
        if not np.isfinite(self.headroom_max) or self.headroom_max < self.min_headroom:
            out.append(f"largest judged headroom d/d_min = {self.headroom_max:.1f} < {self.min_headroom:g}")
        return out

    @property
    def ok(self) -> bool:
        return not self.reasons

    def summary(self) -> str:
        return (f"{self.converged}/{self.memorised} memorising runs met the stop rule (of {self.runs}); steps median "
                f"{self.median_steps:.0f}, max {self.max_steps_taken}; final loss median {self.median_final_loss:.1e}, "
                f"max {self.max_final_loss:.1e}; headroom up to {self.headroom_max:.1f}")

    def as_dict(self) -> dict:
        return {**asdict(self), "converged_fraction": self.converged_fraction, "ok": self.ok, "reasons": self.reasons}


def regime(records: list[dict], headroom: np.ndarray | list[float], perfect: float = 0.99,
           min_converged: float = MIN_CONVERGED, min_headroom: float = MIN_HEADROOM) -> Regime:
    """Summarise run records (geofact.training.sweep) and the headroom of the cells a verdict judges."""
    if not records:
        raise ValueError("regime needs at least one run record")
    memorised = [r for r in records if r["accuracy"] >= perfect]
    h = np.asarray(headroom, dtype=float)
    h = h[np.isfinite(h)]
    steps = np.array([r["steps"] for r in records])
    losses = np.array([r["final_loss"] for r in records])
    return Regime(runs=len(records), memorised=len(memorised), converged=sum(r["stopped_early"] for r in memorised),
                  median_steps=float(np.median(steps)), max_steps_taken=int(steps.max()),
                  median_final_loss=float(np.median(losses)), max_final_loss=float(losses.max()),
                  headroom_max=float(h.max()) if h.size else float("nan"),
                  min_converged=min_converged, min_headroom=min_headroom)



def claim_in_regime(report, claim_id: str, holds: bool, measured: str, regime: Regime, note: str = "") -> None:
    """`report.claim(...)` (geofact.pages.report.Report) with the regime of the runs behind the verdict: when
    they are outside the paper's regime the verdict is "not in regime", with the reasons and what the
    rule alone gave, whatever `holds` says, since such runs can neither confirm nor refute the claim."""
    report.claim(claim_id, holds=holds, measured=f"{measured}; regime: {regime.summary()}", note=note)
    _apply_regime(report.claims[claim_id], regime)


def judge_in_regime(report, claim_id: str, tests, measured: str, population: dict, regime: Regime, note: str = "") -> None:
    """`geofact.evidence.judge(report, ...)` (tests against the claim's alternative) with the regime of
    the runs behind it, as `claim_in_regime`: outside the paper's regime the verdict is "not in regime"."""
    judge(report, claim_id, tests, measured=f"{measured}; regime: {regime.summary()}", population=population, note=note)
    _apply_regime(report.claims[claim_id], regime)


def mark_not_in_regime(entry: dict, *reasons: str) -> None:
    """Turn a judged claim's entry (`report.claims[claim_id]`) into "not in regime": its runs are outside
    the regime the paper's sentence is about, for `reasons`. The note keeps what the rule alone gives, so
    a reader sees the verdict the data would have read, and why it does not stand. Pages call it for a
    regime of their own (a step budget below the paper's, a curve that never reaches the predicted range)."""
    entry["note"] = "; ".join([*reasons, f"the rule alone gives '{entry['verdict']}'", *filter(None, [entry.get("note")])])
    entry["verdict"] = NOT_IN_REGIME


def _apply_regime(entry: dict, regime: Regime) -> None:
    entry["regime"] = to_jsonable(regime.as_dict())
    if not regime.ok:
        mark_not_in_regime(entry, *regime.reasons)
