"""Command line: `geofact run`, `geofact compute`, `geofact plan`, `geofact check`, `geofact status`, `geofact pack`, `geofact unpack`,
`geofact spikes`, `geofact list`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from geofact.pipeline import standins

standins.install()  # a GPU lease has no Jupyter packages: `geofact compute`, `pack` and `unpack` run without them

from geofact.spikes import DEFAULT_FACTOR, DEFAULT_FLOOR  # noqa: E402
from geofact.ops.compute import DEFAULT_PAGES, GRID_CELLS_ENV, ComputeFailed, ComputeUnfinished, compute  # noqa: E402
from geofact.ops.pack import DEFAULT_PART_BYTES, MAX_PARTS, pack, unpack  # noqa: E402
from geofact.pipeline.project import Project  # noqa: E402
from geofact.pipeline.stability import PERTURBATIONS  # noqa: E402
from geofact.precision import PRECISIONS  # noqa: E402

UNFINISHED = 3  # exit status of `geofact run` / `geofact compute` with --budget when pages are left for the next call


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="geofact", description=__doc__)
    parser.add_argument("--root", type=Path, default=None, help="geofact checkout (default: found from the current directory)")
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="execute notebooks into the book (all when none are named)")
    p_run.add_argument("notebooks", nargs="*", help="notebook names, e.g. thm-orthogonal-codes")
    p_run.add_argument("--profile", default="laptop", help="smoke | laptop | paper (default: laptop)")
    p_run.add_argument("--device", default="cpu", help="torch device passed to notebooks that declare `device` (default: cpu)")
    p_run.add_argument("--precision", choices=sorted(PRECISIONS), default=None,
                       help="matmul precision of training, passed to notebooks that declare `precision` "
                            "(default: tf32 on cuda, fp32 on the CPU)")
    p_run.add_argument("--jobs", type=int, default=1,
                       help="pages executed at once, sharing the cores (default: 1); pages of the capacity grid run in turn")
    p_run.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                       help="work for at most this long: no page starts after it, training in flight checkpoints and "
                            "stops (exit status 3); the same command again resumes")
    p_run.add_argument("--executor", choices=["local", "slurm"], default=None,
                       help="train every sweep's stacked groups as submitit jobs: on SLURM, or as local processes")
    p_run.add_argument("--executor-option", action="append", default=[], metavar="KEY=VALUE",
                       help="a submitit parameter for --executor (repeatable), e.g. slurm_partition=gpu, timeout_min=120")
    p_run.add_argument("--rounding", choices=sorted(PERTURBATIONS), default=None,
                       help="execute the pages under a perturbation of the matmul kernels' rounding (same recipe; "
                            "mkl-compatible: MKL's compatible code path on this CPU; another-cpu: this CPU's native kernels, "
                            "where the book's results ran on another kind of CPU), into "
                            "results/rounding/<profile>/<perturbation>/ and a run cache of their own; `geofact status` then marks "
                            "each verdict that moved fragile (geofact.pipeline.stability)")
    p_run.add_argument("--records-only", action="store_true",
                       help="execute pages from the cached records alone (after `geofact unpack`): nothing trains and "
                            "no weights are read; a page that would need them is left unfinished (exit status 3)")
    p_compute = sub.add_parser(
        "compute", help="run the compute side of pages (training, per-model analyses, the benchmark) into the run "
                        "cache's records as plain scripts, without Jupyter (a GPU node); pages are rendered later "
                        "by `geofact run --records-only`")
    p_compute.add_argument("notebooks", nargs="*",
                           help="notebook names (default: the training pages, " + ", ".join(DEFAULT_PAGES) + ")")
    p_compute.add_argument("--profile", default="laptop", help="smoke | laptop | paper (default: laptop)")
    p_compute.add_argument("--device", default="cpu",
                           help="torch device passed to notebooks that declare `device` (default: cpu)")
    p_compute.add_argument("--precision", choices=sorted(PRECISIONS), default=None,
                           help="matmul precision of training (default: tf32 on cuda, fp32 on the CPU)")
    p_compute.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                           help="work for at most this long: no page starts after it, training in flight checkpoints "
                                "and stops (exit status 3); the same command again resumes")
    p_compute.add_argument("--force", action="store_true",
                           help="execute pages again that an earlier command finished (.geofact/computed/)")
    p_compute.add_argument("--grid-R", type=int, nargs="+", default=None, metavar="R",
                           help="compute on these R values of the capacity grid alone: their runs and analyses, "
                                "for a lease shorter than the grid (default pages: the mechanism pages)")
    p_compute.add_argument("--grid-d", type=int, nargs="+", default=None, metavar="D",
                           help="likewise, these d values of the capacity grid")
    _add_other_commands(sub)
    return parser


def _add_other_commands(sub) -> None:
    """The subcommands besides run and compute."""
    p_plan = sub.add_parser("plan", help="predicted minutes of each experiment page and stacked group at a profile on a "
                                         "device, and the order a GPU lease runs them in")
    p_plan.add_argument("--profile", default="paper", help="smoke | laptop | paper (default: paper)")
    p_plan.add_argument("--device", default="cuda", help="the device to plan for (default: cuda; a calibration of it "
                                                         "under bench/calibration/, else the H100's data sheet)")
    p_plan.add_argument("--precision", choices=sorted(PRECISIONS), default=None,
                        help="matmul precision of training (default: tf32 on cuda, fp32 on the CPU)")
    p_plan.add_argument("--minutes", type=float, default=12.0, help="usable minutes of one lease: 15 of device time less its start and packing (default: 12)")
    p_plan.add_argument("--check", action="store_true",
                        help="also the plan's error on every stacked group the run cache says was trained on that kind of device")
    p_plan.add_argument("--card", default=None, help="the card whose calibration prices the plan (e.g. h100, h200), "
                                                    "where several are stored under bench/calibration/")
    sub.add_parser("check", help="fail when a page or result is stale, broken, or the status page is out of date")
    sub.add_parser("status", help="regenerate the status page, the claims page, the front page and its figure from claims.yaml and results/")
    sub.add_parser("list", help="list notebooks and profiles")
    p_pack = sub.add_parser("pack", help="write the run cache's JSON records and a profile's pages and results to "
                                         "one .tar.gz, without the weights (to carry off a GPU node), in parts when large")
    p_pack.add_argument("archive", type=Path, help="the .tar.gz to write (ARCHIVE.part1ofN, ... when in parts)")
    p_pack.add_argument("--profile", default="paper", help="whose results and executed pages to include (default: paper)")
    p_pack.add_argument("--part-bytes", type=int, default=DEFAULT_PART_BYTES, metavar="N",
                        help=f"largest file written: a larger archive is split into at most {MAX_PARTS} parts "
                             f"(default: {DEFAULT_PART_BYTES} = {DEFAULT_PART_BYTES // 2**20} MiB)")
    p_unpack = sub.add_parser("unpack", help="check a `geofact pack` archive and put its files in place")
    p_unpack.add_argument("archive", type=Path, nargs="+",
                          help="the archive, or its parts (all of them, or one with the others beside it)")
    p_unpack.add_argument("--force", action="store_true", help="overwrite files in place whose contents differ")

    p_spikes = sub.add_parser("spikes", help="loss spikes after memorisation in run records (geofact.spikes): "
                                             "how the counts move with the rule, and every spiking run")
    p_spikes.add_argument("source", type=Path, nargs="*",
                          help="run-cache folders or `geofact pack` archives (default: the project's run cache)")
    p_spikes.add_argument("--floor", type=float, default=DEFAULT_FLOOR,
                          help=f"memorised: the running minimum of the loss below this (default {DEFAULT_FLOOR:g})")
    p_spikes.add_argument("--factor", type=float, default=DEFAULT_FACTOR,
                          help=f"a spike: the loss above this x the running minimum (default {DEFAULT_FACTOR:g})")



def _run(project: Project, args) -> int:
    from geofact.pipeline.runner import RunUnfinished, run
    from geofact.pipeline.verdicts import NotebookError

    try:
        from geofact.ops.cluster import parse_options

        run(project, args.notebooks, args.profile, args.device, jobs=args.jobs, budget=args.budget,
            records_only=args.records_only, executor=args.executor, executor_options=parse_options(args.executor_option),
            precision=args.precision, rounding=args.rounding)
    except RunUnfinished as exc:
        print(f"geofact run: {exc}", file=sys.stderr)
        return UNFINISHED
    except (NotebookError, ValueError, RuntimeError) as exc:
        print(f"geofact run: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _compute(project: Project, args) -> int:
    try:
        cells = {k: v for k, v in (("R", args.grid_R), ("d", args.grid_d)) if v is not None}
        computed = compute(project, args.notebooks, args.profile, args.device, budget=args.budget, force=args.force,
                           precision=args.precision, grid_cells=cells or None)
    except ComputeUnfinished as exc:
        print(f"geofact compute: {exc}", file=sys.stderr)
        return UNFINISHED
    except (ComputeFailed, ValueError, RuntimeError) as exc:
        print(f"geofact compute: error: {exc}", file=sys.stderr)
        return 1
    now = [c for c in computed if not c.skipped]
    print(f"geofact compute: {len(computed)} page(s) computed, {len(now)} by this command in "
          f"{sum(c.wall_time_s for c in now):.1f} s; `geofact pack` carries their records home")
    return 0


def _pack(project: Project, args) -> int:
    try:
        done = pack(project, args.archive, args.profile, args.part_bytes)
    except (ValueError, OSError) as exc:
        print(f"geofact pack: error: {exc}", file=sys.stderr)
        return 1
    print(f"geofact pack: {done.files} files ({done.bytes_in / 2**20:.1f} MiB) -> "
          f"{', '.join(str(p) for p in done.paths)} ({done.bytes_out / 2**20:.2f} MiB"
          + (f" in {len(done.paths)} parts)" if len(done.paths) > 1 else ")"))
    return 0


def _unpack(project: Project, args) -> int:
    try:
        got = unpack(project, args.archive, args.force)
    except (ValueError, OSError) as exc:
        print(f"geofact unpack: error: {exc}", file=sys.stderr)
        return 1
    made = got.manifest
    kept = f", {len(got.kept_newer)} kept (results executed later than the archive's, and their pages)" if got.kept_newer else ""
    print(f"geofact unpack: {len(got.written)} files written, {len(got.identical)} already in place{kept}; "
          f"made at commit {made['git_commit'][:12]} on {'; '.join(made['devices'])} (profile {made['profile']})")
    for warning in got.warnings:
        print(f"geofact unpack: warning: {warning}", file=sys.stderr)
    return 0


def _plan(project: Project, args) -> int:
    from geofact.ops.page_plan import plan

    try:
        print(plan(project, args.profile, args.device, args.precision, args.minutes, args.check, args.card), end="")
    except ValueError as exc:
        print(f"geofact plan: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _spikes(project: Project, args) -> int:
    from geofact.spikes import SpikeRule
    from geofact.pipeline.spike_scan import report

    try:
        print(report(args.source or [project.runs_dir], SpikeRule(args.floor, args.factor)), end="")
    except (ValueError, OSError) as exc:
        print(f"geofact spikes: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _check(project: Project, args) -> int:
    from geofact.pipeline.check import main_check

    return main_check(project.root)


def _status(project: Project, args) -> int:
    from geofact.pipeline.status import write_status_page

    print(write_status_page(project))
    return 0


def _list(project: Project, args) -> int:
    print("notebooks:", " ".join(project.notebooks()))
    print("profiles: ", " ".join(sorted(p.stem for p in project.profiles_dir.glob("*.yaml"))))
    return 0


COMMANDS = {"run": _run, "compute": _compute, "pack": _pack, "unpack": _unpack, "plan": _plan, "spikes": _spikes,
            "check": _check, "status": _status, "list": _list}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    project = Project(args.root.resolve()) if args.root else Project.find()
    if args.command in ("run", "plan") and os.environ.get(GRID_CELLS_ENV):
        print(f"geofact {args.command}: error: {GRID_CELLS_ENV} is set ({os.environ[GRID_CELLS_ENV]}): the pages would be "
              "built on part of the capacity grid; it is for `geofact compute --grid-R/--grid-d` alone, unset it",
              file=sys.stderr)
        return 1
    return COMMANDS[args.command](project, args)

if __name__ == "__main__":
    sys.exit(main())
