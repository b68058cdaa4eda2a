"""Verdicts under another rounding: `geofact run --rounding`, and which verdicts move (issue 45).

A trained run's numbers depend on the order in which its matmuls sum, which the CPU's BLAS kernels
decide: the same recipe on another machine can memorise at a threshold cell where this one does not, and
a verdict resting on that cell then flips. A verdict that moves with the rounding is not a finding about
the paper; the book marks it **fragile**.

**The perturbation.** `geofact run PAGE --rounding mkl-compatible` executes pages with MKL's
conditional-numerical-reproducibility branch forced to its *compatible* code path (`MKL_CBWR=COMPATIBLE`):
every float32 GEMM of training then sums in another order than the machine's native kernels (AVX2 or
AVX-512), exactly what another CPU does, while the recipe (seeds, batches, data, stop rule, the model's
code) is untouched. The runs train into a cache of their own (`.geofact/rounding/<perturbation>/runs`),
the executed pages go to `.geofact/rounding/<perturbation>/book/` (not the book) and their results to
`results/rounding/<profile>/<perturbation>/<page>.json`, which are committed (one file a perturbation: a run under
one never replaces another's). Before any page runs, the machine's rounding digest (`rounding_digest`: a step's
matmuls and reductions) is computed with and without the perturbation in fresh interpreters: where the two agree bit
for bit (a BLAS
without that setting: OpenBLAS, Apple's Accelerate) the command refuses to run instead of reporting
every verdict stable. On this project's 2-core AMD EPYC VMs the compatible path trains about 1.6x slower
(the one-layer LM of exp-nl-lm at the paper's width about 3x: 19-23 optimiser steps a minute). `--rounding
another-cpu` is the other perturbation: the pages executed with the native kernels of a CPU other than the one
the book's run had (its model, kernel path or BLAS differ; refused where they do not), what a reader's machine
does, at native speed. Each run records its machine's rounding digest (`geofact.pipeline.machine.rounding_digest`:
a step's matmuls and reductions, bit for bit); where the two digests are equal the CPUs round alike and the
verdicts are *not compared*, and where a run predates the digest, a stable verdict says that the two CPUs' rounding
otherwise is not shown.

**The comparison.** Each claim's verdict in `results/<profile>/<page>.json` (the book's) against the same
claim in the perturbed results of the same page, under each perturbation that has them: *stable* where the two
agree, *fragile* where they differ, and *not compared* where either is missing or the two ran different code (the
page's notebook or parameters other than its run cache). A verdict is fragile where any perturbation moves it,
stable where one at least compared it and none moved it, and its text names each (`combined`); `geofact check`
names perturbed results filed where `rounding_results` would not put them (`misfiled`). The status page and each page's closing section show it
(`geofact status` writes both), and `geofact check` fails where they are out of date.

**How far the estimates moved, and how far they would have to.** Where a claim is a test against an alternative
(geofact.evidence: an estimate's interval against the claim's range), `measured_shift` is how far the perturbation
moved its estimates, in half-widths of the book's intervals (the largest over the claim's tests, paired by what they
measure: `paired_tests`), with the largest factor by which an interval's width changed, and which tests' verdicts
moved. For a verdict not compared, `shift_to_change` is the least shift of one of its tests' intervals, in the same
unit, that changes that test's verdict: a lower bound on what changes the claim's. The status page sets the
second against the first (measured at another profile, on that profile's runs and intervals): a verdict no
perturbed run has tested is not shown fragile, nor called stable.

**Another machine.** `moved_since` compares each results file of the working tree with the version
a commit (HEAD by default) holds: after `make book` on another CPU, `geofact check` lists every verdict
that moved and the CPU of each side (`geofact.pipeline.machine`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from geofact.outcomes import NOT_RUN
from geofact.pipeline.machine import KERNEL_PATH_ENVS, describe_machine, rounding_digest, machine_line
from geofact.pipeline.project import Project

ANOTHER_CPU = "another-cpu"
PERTURBATIONS: dict[str, dict[str, str]] = {
    # MKL's compatible code path (Intel oneMKL, "Conditional Numerical Reproducibility"): honoured on AMD and
    # Intel CPUs alike, where the other MKL_CBWR branches fall back to the native kernels on non-Intel CPUs.
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
    # the native kernels of a CPU other than the one the book's run had (`check_another_cpu`): what a reader's
    # machine does. It runs at native speed where the compatible path is several times slower on a large page.
    ANOTHER_CPU: {},
}
ROUNDING_DIR = "rounding"  # results/rounding/<profile>/<perturbation>/, .geofact/rounding/<perturbation>/
STABLE, FRAGILE, NOT_COMPARED = "stable", "fragile", "not compared"
RUN_CACHE_PARAMETER = "cache_dir"  # the one parameter a perturbed page runs with differently


def perturbation_environ(name: str) -> dict[str, str]:
    """The environment variables of perturbation `name`, which the page's kernel and its workers inherit."""
    if name not in PERTURBATIONS:
        raise ValueError(f"rounding must be one of {sorted(PERTURBATIONS)}, got {name!r}")
    return dict(PERTURBATIONS[name])


def check_effective(name: str) -> None:
    """Refuse a perturbation that changes no bit of a float32 GEMM on this machine (`another-cpu` changes nothing on
    it: `check_another_cpu` asks whether the book's runs had another CPU)."""
    extra = perturbation_environ(name)
    if name == ANOTHER_CPU:
        return
    if rounding_digest(extra) == rounding_digest({}):
        raise ValueError(f"rounding {name!r} ({extra}) changes no bit of a float32 GEMM on this machine (its BLAS "
                         "ignores the setting), so it cannot test the verdicts: run it where torch uses MKL")


def _same_cpu(a: dict | None, b: dict | None) -> bool:
    """Whether two provenance records of a machine name one CPU with one kernel path and BLAS."""
    keys = ("cpu", "kernel_path", "blas")
    return bool(a) and bool(b) and all(a.get(k) == b.get(k) for k in keys)


def _round_alike(a: dict | None, b: dict | None) -> bool | None:
    """Whether two machines round a step alike by their rounding digests (`geofact.pipeline.machine.rounding_digest`);
    None where either record has none (results executed before the digest was recorded)."""
    digests = [(m or {}).get("rounding_digest") for m in (a, b)]
    return None if None in digests else digests[0] == digests[1]


def check_another_cpu(project: Project, profile: str, notebooks: list[str]) -> None:
    """Refuse `--rounding another-cpu` for a page whose book results are missing or ran on this machine's kind of CPU
    or on one that rounds as this one does (`_round_alike`), and where this shell sets the kernels' code path (then the CPU does not choose them)."""
    if set_here := sorted(k for k in KERNEL_PATH_ENVS if os.environ.get(k)):
        raise ValueError(f"rounding {ANOTHER_CPU!r} compares the kernels two CPUs choose, and this shell sets "
                         f"{', '.join(set_here)}: unset it")
    here = describe_machine({})
    for name in notebooks:
        path = project.results(profile, name)
        if not path.exists():
            raise ValueError(f"rounding {ANOTHER_CPU!r} compares with the book's results of {name} at {profile}, and "
                             f"{path.relative_to(project.root)} does not exist: execute it there first")
        theirs = json.loads(path.read_text()).get("provenance", {}).get("machine")
        if not theirs or _same_cpu(theirs, here) or _round_alike(theirs, here):
            raise ValueError(f"rounding {ANOTHER_CPU!r} needs a CPU other than the one {name}'s results at {profile} ran on "
                             f"({machine_line(theirs) or 'not recorded'}), one that rounds otherwise; this machine: "
                             f"{machine_line(here)}")


def rounding_cache(project: Project, name: str) -> Path:
    return project.root / ".geofact" / ROUNDING_DIR / name / "runs"


def rounding_page(project: Project, name: str, notebook: str) -> Path:
    return project.root / ".geofact" / ROUNDING_DIR / name / "book" / f"{notebook}.ipynb"


def rounding_results(project: Project, profile: str, notebook: str, perturbation: str) -> Path:
    return project.results_dir / ROUNDING_DIR / profile / perturbation / f"{notebook}.json"


def _perturbation_of(path: Path) -> str | None:
    """The perturbation a perturbed results file records in its provenance (None where it records none)."""
    try:
        return json.loads(path.read_text())["provenance"]["rounding"]["perturbation"]
    except (ValueError, KeyError, TypeError):
        return None


def misfiled(project: Project) -> list[str]:
    """Perturbed results not where `rounding_results` puts them: in the layout before each perturbation had a folder
    (results/rounding/<profile>/<page>.json), in a folder that is no perturbation, or in another perturbation's."""
    root = project.results_dir / ROUNDING_DIR
    out = [f"{path.relative_to(project.root)}: perturbed results go under results/{ROUNDING_DIR}/<profile>/<perturbation>/ "
           f"(git mv it to results/{ROUNDING_DIR}/{path.parent.name}/{_perturbation_of(path) or '<perturbation>'}/{path.name})"
           for path in sorted(root.glob("*/*.json"))]
    for path in sorted(root.glob("*/*/*.json")):
        rel, kind = path.relative_to(project.root), _perturbation_of(path)
        if path.parent.name not in PERTURBATIONS:
            out.append(f"{rel}: {path.parent.name!r} is not a perturbation ({', '.join(PERTURBATIONS)})")
        elif kind != path.parent.name:
            out.append(f"{rel}: its provenance says it ran under {kind!r}, not {path.parent.name!r}")
    return out


def perturbed_results(project: Project, profile: str, notebook: str) -> list[dict]:
    """A page's results under each perturbation that has them (PERTURBATIONS' order)."""
    paths = [rounding_results(project, profile, notebook, name) for name in PERTURBATIONS]
    return [json.loads(path.read_text()) for path in paths if path.exists()]


@dataclass(frozen=True)
class Stability:
    """One claim's verdict in the book's run and under the rounding perturbation."""

    claim: str
    state: str  # STABLE, FRAGILE or NOT_COMPARED
    verdict: str | None  # the book's
    perturbed: str | None  # under the perturbation
    why: str = ""  # for NOT_COMPARED
    shift: float | None = None  # compared: how far the estimate moved, in half-widths of its interval (`measured_shift`)
    widening: float | None = None  # compared: the largest factor by which one of its intervals' widths changed
    to_change: float | None = None  # not compared: the least shift that changes a test's verdict (`shift_to_change`)
    parts_moved: tuple[str, ...] = ()  # compared: "before -> after" of each of its tests whose verdict moved
    parts: int = 0  # compared: its tests both runs judged
    unpaired: int = 0  # compared: its tests judged in one run only (cells the other did not judge)
    perturbation: str | None = None  # the perturbed run's (PERTURBATIONS), where there is one
    unshown: bool = False  # compared natively on two CPUs that do not both record how they round (`_round_alike`)
    others: tuple["Stability", ...] = ()  # the same claim compared under the other perturbations (`combined`)

    @property
    def each(self) -> tuple["Stability", ...]:
        """This comparison and those under the other perturbations."""
        return (self, *self.others)

    @property
    def moved_to(self) -> str:
        """The verdicts the perturbations that moved it gave, each with its perturbation where there are several."""
        fragile = [k for k in self.each if k.state == FRAGILE]
        if len(fragile) == 1:
            return str(fragile[0].perturbed)
        return ", ".join(f"{k.perturbed} ({k.perturbation})" for k in fragile)

    def _under(self) -> str:
        return "natively on another kind of CPU" if self.perturbation == ANOTHER_CPU else "under the rounding perturbation"

    def text(self) -> str:
        # beside a comparison made, one not made says why, not how far its interval would have to move
        return "; and ".join([self._own_text(), *(replace(k, to_change=None)._own_text() for k in self.others)])

    def _own_text(self) -> str:
        if self.state == STABLE:
            out = f"stable {self._under()}: {self.verdict} in both"
            if self.parts_moved:
                out += (f"; parts whose verdict changed, {len(self.parts_moved)} of {self.parts}: "
                        + ", ".join(self.parts_moved))
            if self.unpaired:
                out += f"; {self.unpaired} part{'s' if self.unpaired > 1 else ''} judged in one of the runs only"
            if self.shift is not None:
                what = "its estimates" if self.parts > 1 else "its estimate"
                out += (f"; {what} did not move (under 0.01 half-widths of {'their intervals' if self.parts > 1 else 'its interval'})"
                        if self.shift < 0.01 else
                        f"; {what} moved {'up to ' if self.parts > 1 else ''}{self.shift:.2g} half-widths of "
                        f"{'their intervals' if self.parts > 1 else 'its interval'}")
                if self.widening is not None and self.widening >= 1.5:
                    out += f", and {'an interval' if self.parts > 1 else 'its interval'}'s width changed {self.widening:.2g}-fold"
            if self.unshown:
                out += " (a run records no rounding digest: that the two CPUs round otherwise is not shown)"
            return out
        if self.state == FRAGILE:
            return f"**fragile**: {self.perturbed} {self._under()}"
        needs = (f"; its interval would have to move at least {self.to_change:.2g} half-widths to change a part's verdict"
                 if self.to_change is not None else "")
        return f"not compared {self._under()} ({self.why}){needs}"


def _number(value: Any) -> float:
    """A number of a results file: geofact.store.to_jsonable writes NaN and the infinities as strings."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _interval(test: dict | None) -> tuple[float, float, float] | None:
    """(lo, value, hi) of a test's estimate (geofact.evidence.judge) where its interval is finite and has a width."""
    e = (test or {}).get("estimate") or {}
    lo, value, hi = (_number(e.get(k)) for k in ("lo", "value", "hi"))
    return (lo, value, hi) if all(map(math.isfinite, (lo, value, hi))) and hi > lo else None


JUDGED = ("holds", "does not hold", "inconclusive")  # verdicts an interval decides (not in regime, not run: others)


def _ranges(test: dict) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """(claim's range, alternative's range) of a test as (lo, hi) pairs; None where one is unreadable."""
    ranges = tuple(tuple(_number((test.get(key) or {}).get(end, default)) for end, default in (("lo", "-inf"), ("hi", "inf")))
                   for key in ("claim_range", "alternative_range"))
    return None if any(math.isnan(x) for r in ranges for x in r) else ranges


def _least_shift(lo: float, hi: float, claim_lo: float, claim_hi: float) -> float:
    """The least distance the interval [lo, hi] must move, keeping its width, to change `geofact.evidence.separate`'s
    verdict against the claim's range [claim_lo, claim_hi]: out of the range where it lies inside (holds), onto it
    where it misses it (does not hold), wholly off or wholly into it where it overlaps an end (inconclusive). Both
    ends count, so at an end the quantity cannot pass (an accuracy's 1) the shift is smaller than what would move
    the verdict: a lower bound."""
    if hi < claim_lo or lo > claim_hi:  # does not hold
        return claim_lo - hi if hi < claim_lo else lo - claim_hi
    if claim_lo <= lo and hi <= claim_hi:  # holds
        return min(lo - claim_lo, claim_hi - hi)
    off = min(hi - claim_lo, claim_hi - lo)  # past the nearer end, so that it misses the range
    into = max(claim_lo - lo, hi - claim_hi) if hi - lo <= claim_hi - claim_lo else math.inf
    return min(off, into)


def shift_to_change(entry: dict | None) -> float | None:
    """The least shift of any of a claim's test intervals, in half-widths of that interval, that changes that test's
    verdict (`_least_shift`): a lower bound on what changes the claim's, its tests' conjunction. None where the claim
    is no such test (a theory page's check, an exact count) or was not judged so (not in regime, not run: what
    decides it is not an interval)."""
    if (entry or {}).get("verdict") not in JUDGED:
        return None
    shifts = []
    for test in entry.get("tests") or []:
        interval, ranges = _interval(test), _ranges(test)
        if interval is not None and ranges is not None:
            lo, _, hi = interval
            shifts.append(_least_shift(lo, hi, *ranges[0]) / ((hi - lo) / 2))
    return min(shifts) if shifts else None


def _key(test: dict) -> tuple:
    """What names a test apart from its outcome: its quantity and both ranges (`evidence.universal` sorts a claim's
    tests by their verdicts, so their order is not the same in two runs)."""
    return ((test.get("estimate") or {}).get("quantity"), json.dumps(test.get("claim_range"), sort_keys=True),
            json.dumps(test.get("alternative_range"), sort_keys=True))


def paired_tests(reference: dict | None, perturbed: dict | None) -> tuple[list[tuple[dict, dict]], int]:
    """(the tests of a claim in two runs paired by `_key`, in the first run's order; how many of either run's tests
    have no partner: a cell judged in one run only)."""
    theirs: dict[tuple, list[dict]] = {}
    for test in (perturbed or {}).get("tests") or []:
        theirs.setdefault(_key(test), []).append(test)
    pairs, alone = [], 0
    for test in (reference or {}).get("tests") or []:
        partners = theirs.get(_key(test))
        if partners:
            pairs.append((test, partners.pop(0)))
        else:
            alone += 1
    return pairs, alone + sum(len(rest) for rest in theirs.values())


def measured_shift(reference: dict | None, perturbed: dict | None) -> tuple[float, float] | None:
    """How far the perturbation moved a claim's estimates, over the tests both runs judged (`paired_tests`): (the
    largest |change of a test's value| in half-widths of the book's interval, the largest factor by which a test's
    interval widened or narrowed). None where the claim was not judged by intervals in both runs (not in regime,
    not run) or has no test with an interval."""
    if (reference or {}).get("verdict") not in JUDGED or (perturbed or {}).get("verdict") not in JUDGED:
        return None
    shifts, widths = [], []
    for ours, theirs in paired_tests(reference, perturbed)[0]:
        a, b = _interval(ours), _interval(theirs)
        if a is not None and b is not None:
            shifts.append(abs(b[1] - a[1]) / ((a[2] - a[0]) / 2))
            ratio = (b[2] - b[0]) / (a[2] - a[0])
            widths.append(max(ratio, 1 / ratio))
    return (max(shifts), max(widths)) if shifts else None


def largest_shift(by_profile: dict[str, dict[str, Stability]]) -> tuple[float, str, str, str | None] | None:
    """(shift, claim, profile, perturbation) of the compared estimate a perturbation moved furthest, over every
    profile and every perturbation that compared it."""
    moved = [(k.shift, claim, p, k.perturbation) for p, claims in by_profile.items() for claim, s in claims.items()
             for k in s.each if k.shift is not None]
    return max(moved, key=lambda m: m[:3]) if moved else None


def _comparable(reference: dict, perturbed: dict) -> str:
    """'' where the perturbed run is the book's run with the rounding perturbed and nothing else: the same
    notebook, parameters (the run cache aside), code, device, precision policy and library versions, the
    book's run on the native kernels and the other under a perturbation (for `another-cpu`: the two on CPUs of
    different kinds, neither with its kernels set by the environment, and rounding otherwise where both say);
    else why not."""
    a, b = reference.get("provenance", {}), perturbed.get("provenance", {})
    if not b.get("rounding") or a.get("rounding"):
        return "the two runs are not the book's and a perturbed one"
    if any(k in (a.get("machine") or {}).get("kernel_env", {}) for k in b["rounding"].get("environ", {})):
        return "the book's run was itself executed under the perturbation's setting"
    if b["rounding"].get("perturbation") == ANOTHER_CPU:
        if not a.get("machine"):
            return "the book's run does not record its CPU"
        if _same_cpu(a.get("machine"), b.get("machine")):
            return "the two runs had one kind of CPU"
        if (a["machine"].get("kernel_env") or (b.get("machine") or {}).get("kernel_env")):
            return "a run's kernels were set by the environment, not chosen by its CPU"
        if _round_alike(a["machine"], b.get("machine")):
            return ("the two CPUs round alike (the same rounding digest of a step's matmuls and reductions), so the "
                    "comparison tests nothing")
    for key, what in (("device", "device"), ("precision_arg", "precision policy")):
        if a.get(key) != b.get(key):
            return f"the perturbed run had another {what}"
    versions = ("torch", "numpy", "python")
    if any(a.get("environment", {}).get(v) != b.get("environment", {}).get(v) for v in versions):
        return "the perturbed run had other versions of torch, numpy or python"
    if a.get("notebook_sha256") != b.get("notebook_sha256"):
        return "the perturbed run executed another version of the notebook"
    drop = lambda p: {k: v for k, v in (p or {}).items() if k != RUN_CACHE_PARAMETER}  # noqa: E731
    if drop(a.get("parameters")) != drop(b.get("parameters")):
        return "the perturbed run had other parameters"
    changed = sorted(m for m, h in b.get("modules", {}).items() if a.get("modules", {}).get(m, h) != h)
    if changed:
        return f"the perturbed run imported other code ({', '.join(changed)})"
    return ""


def compare(reference: dict[str, Any], perturbed: dict[str, Any] | None) -> dict[str, Stability]:
    """{claim: Stability} for every claim of `reference` (a page's results) against `perturbed` (the same
    page's results under the perturbation, or None)."""
    why = "no perturbed run" if perturbed is None else _comparable(reference, perturbed)
    kind = ((perturbed or {}).get("provenance", {}).get("rounding") or {}).get("perturbation")
    unshown = kind == ANOTHER_CPU and _round_alike(*((r or {}).get("provenance", {}).get("machine")
                                                    for r in (reference, perturbed))) is None
    out = {}
    for claim, entry in reference.get("claims", {}).items():
        other = (perturbed or {}).get("claims", {}).get(claim)
        verdict, moved = entry.get("verdict"), (other or {}).get("verdict")
        if why or other is None or NOT_RUN in (verdict, moved):
            reason = why or ("not reported by the perturbed run" if other is None else "not run in one of them")
            out[claim] = Stability(claim, NOT_COMPARED, verdict, moved, reason, to_change=shift_to_change(entry),
                                   perturbation=kind)
        else:
            pairs, unpaired = paired_tests(entry, other)
            shift = measured_shift(entry, other)
            out[claim] = Stability(claim, STABLE if verdict == moved else FRAGILE, verdict, moved,
                                   shift=shift[0] if shift else None, widening=shift[1] if shift else None,
                                   parts=len(pairs), unpaired=unpaired, perturbation=kind, unshown=unshown,
                                   parts_moved=tuple(f"{a.get('verdict')} -> {b.get('verdict')}" for a, b in pairs
                                                     if a.get("verdict") != b.get("verdict")))
    return out


def combined(reference: dict[str, Any], perturbed: list[dict[str, Any]]) -> dict[str, Stability]:
    """{claim: Stability} of `reference` against each of `perturbed` (a page's results under each perturbation that
    has them): fragile where any moves the verdict, stable where one at least compared it and none moved it, else not
    compared; the comparison shown first is a fragile one, else the one whose estimates moved furthest, the
    others beside it (`Stability.others`), those not compared saying why."""
    if not perturbed:
        return compare(reference, None)
    each = [compare(reference, p) for p in perturbed]
    out = {}
    for claim in each[0]:
        ways = [s[claim] for s in each]
        compared = [s for s in ways if s.state != NOT_COMPARED]
        if not compared:
            why = "; ".join(dict.fromkeys(f"{s.perturbation}: {s.why}" if len(ways) > 1 else s.why for s in ways))
            out[claim] = replace(ways[0], why=why)
            continue
        first = max(compared, key=lambda s: (s.state == FRAGILE, -1.0 if s.shift is None else s.shift))
        out[claim] = replace(first, others=tuple(s for s in ways if s is not first))  # those not compared say why
    return out


def page_stability(project: Project, profile: str, notebook: str) -> dict[str, Stability]:
    """The claims of one page's committed results against its perturbed results ({} without results)."""
    path = project.results(profile, notebook)
    if not path.exists():
        return {}
    return combined(json.loads(path.read_text()), perturbed_results(project, profile, notebook))


def trains(results: dict) -> bool:
    """Whether a page's results (or its provenance) come from trained models (it imported geofact.training),
    the pages whose verdicts the rounding can move; the theory pages compute exact constructions and bounds."""
    provenance = results.get("provenance", results)
    return any(m.startswith("geofact.training.") for m in provenance.get("modules", {}))


def stability(project: Project) -> dict[str, dict[str, Stability]]:
    """{profile: {claim: Stability}} over every training page with results (compared or not yet)."""
    out: dict[str, dict[str, Stability]] = {}
    for path in sorted(project.results_dir.glob("*/*.json")):
        if path.parent.name in ("interactive", ROUNDING_DIR) or not trains(json.loads(path.read_text())):
            continue
        out.setdefault(path.parent.name, {}).update(page_stability(project, path.parent.name, path.stem))
    return out


@dataclass(frozen=True)
class Moved:
    """A verdict that differs between a results file and its version at a commit."""

    path: str
    claim: str
    before: str
    after: str
    machine_before: str
    machine_after: str

    def line(self) -> str:
        return (f"{self.path}: {self.claim} {self.before} -> {self.after} "
                f"(before: {self.machine_before or 'CPU not recorded'}; now: {self.machine_after or 'CPU not recorded'})")


def _at_commit(root: Path, rev: str, rel: str) -> dict | None:
    done = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=root, capture_output=True, text=True, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def moved_since(project: Project, rev: str = "HEAD") -> list[Moved]:
    """Every claim verdict of the working tree's results (book and perturbed) that differs from `rev`'s."""
    out = []
    for path in sorted([*project.results_dir.glob("*/*.json"), *project.results_dir.glob(f"{ROUNDING_DIR}/*/*/*.json")]):
        rel = str(path.relative_to(project.root))
        now, before = json.loads(path.read_text()), _at_commit(project.root, rev, rel)
        if before is None or path.parent.name == "interactive":
            continue
        for claim, entry in now.get("claims", {}).items():
            old = before.get("claims", {}).get(claim)
            if old is not None and old.get("verdict") != entry.get("verdict"):
                out.append(Moved(rel, claim, old["verdict"], entry["verdict"],
                                 machine_line(before.get("provenance", {}).get("machine")),
                                 machine_line(now.get("provenance", {}).get("machine"))))
    return out
