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
`results/rounding/<profile>/<page>.json`, which are committed. Before any page runs, a probe GEMM is
computed with and without the perturbation in fresh interpreters: where the two agree bit for bit (a BLAS
without that setting: OpenBLAS, Apple's Accelerate) the command refuses to run instead of reporting
every verdict stable. On this project's 2-core AMD EPYC VMs the compatible path trains about 1.6x slower.

**The comparison.** Each claim's verdict in `results/<profile>/<page>.json` (the book's) against the same
claim in the perturbed results of the same page: *stable* where the two agree, *fragile* where they
differ, and *not compared* where either is missing or the two ran different code (the page's notebook or
parameters other than its run cache). The status page and each page's closing section show it
(`geofact status` writes both), and `geofact check` fails where they are out of date.

**Another machine.** `moved_since` compares each results file of the working tree with the version
a commit (HEAD by default) holds: after `make book` on another CPU, `geofact check` lists every verdict
that moved and the CPU of each side (`geofact.pipeline.machine`).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geofact.outcomes import NOT_RUN
from geofact.pipeline.machine import gemm_digest, machine_line
from geofact.pipeline.project import Project

PERTURBATIONS: dict[str, dict[str, str]] = {
    # MKL's compatible code path (Intel oneMKL, "Conditional Numerical Reproducibility"): honoured on AMD and
    # Intel CPUs alike, where the other MKL_CBWR branches fall back to the native kernels on non-Intel CPUs.
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
}
ROUNDING_DIR = "rounding"  # results/rounding/<profile>/, .geofact/rounding/<perturbation>/
STABLE, FRAGILE, NOT_COMPARED = "stable", "fragile", "not compared"
RUN_CACHE_PARAMETER = "cache_dir"  # the one parameter a perturbed page runs with differently


def perturbation_environ(name: str) -> dict[str, str]:
    """The environment variables of perturbation `name`, which the page's kernel and its workers inherit."""
    if name not in PERTURBATIONS:
        raise ValueError(f"rounding must be one of {sorted(PERTURBATIONS)}, got {name!r}")
    return dict(PERTURBATIONS[name])


def check_effective(name: str) -> None:
    """Refuse a perturbation that changes no bit of a float32 GEMM on this machine."""
    extra = perturbation_environ(name)
    if gemm_digest(extra) == gemm_digest({}):
        raise ValueError(f"rounding {name!r} ({extra}) changes no bit of a float32 GEMM on this machine (its BLAS "
                         "ignores the setting), so it cannot test the verdicts: run it where torch uses MKL")


def rounding_cache(project: Project, name: str) -> Path:
    return project.root / ".geofact" / ROUNDING_DIR / name / "runs"


def rounding_page(project: Project, name: str, notebook: str) -> Path:
    return project.root / ".geofact" / ROUNDING_DIR / name / "book" / f"{notebook}.ipynb"


def rounding_results(project: Project, profile: str, notebook: str) -> Path:
    return project.results_dir / ROUNDING_DIR / profile / f"{notebook}.json"


@dataclass(frozen=True)
class Stability:
    """One claim's verdict in the book's run and under the rounding perturbation."""

    claim: str
    state: str  # STABLE, FRAGILE or NOT_COMPARED
    verdict: str | None  # the book's
    perturbed: str | None  # under the perturbation
    why: str = ""  # for NOT_COMPARED

    def text(self) -> str:
        if self.state == STABLE:
            return f"stable under the rounding perturbation ({self.verdict} in both)"
        if self.state == FRAGILE:
            return f"**fragile**: {self.perturbed} under the rounding perturbation"
        return f"not compared under the rounding perturbation ({self.why})"


def _comparable(reference: dict, perturbed: dict) -> str:
    """'' where the perturbed run is the book's run with the rounding perturbed and nothing else: the same
    notebook, parameters (the run cache aside), code, device, precision policy and library versions, the
    book's run on the native kernels and the other under a perturbation; else why not."""
    a, b = reference.get("provenance", {}), perturbed.get("provenance", {})
    if not b.get("rounding") or a.get("rounding"):
        return "the two runs are not the book's and a perturbed one"
    if any(k in (a.get("machine") or {}).get("kernel_env", {}) for k in b["rounding"].get("environ", {})):
        return "the book's run was itself executed under the perturbation's setting"
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
    out = {}
    for claim, entry in reference.get("claims", {}).items():
        other = (perturbed or {}).get("claims", {}).get(claim)
        verdict, moved = entry.get("verdict"), (other or {}).get("verdict")
        if why or other is None or NOT_RUN in (verdict, moved):
            reason = why or ("not reported by the perturbed run" if other is None else "not run in one of them")
            out[claim] = Stability(claim, NOT_COMPARED, verdict, moved, reason)
        else:
            out[claim] = Stability(claim, STABLE if verdict == moved else FRAGILE, verdict, moved)
    return out


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def page_stability(project: Project, profile: str, notebook: str) -> dict[str, Stability]:
    """The claims of one page's committed results against its perturbed results ({} without results)."""
    reference = _read(project.results(profile, notebook))
    return compare(reference, _read(rounding_results(project, profile, notebook))) if reference else {}


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
    for path in sorted([*project.results_dir.glob("*/*.json"), *project.results_dir.glob(f"{ROUNDING_DIR}/*/*.json")]):
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
