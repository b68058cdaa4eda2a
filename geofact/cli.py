"""Command line: `geofact run`, `geofact check`, `geofact status`, `geofact list`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from geofact.project import Project

UNFINISHED = 3  # exit status of `geofact run --budget` when pages are left for the next call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="geofact", description=__doc__)
    parser.add_argument("--root", type=Path, default=None, help="geofact checkout (default: found from the current directory)")
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="execute notebooks into the book (all when none are named)")
    p_run.add_argument("notebooks", nargs="*", help="notebook names, e.g. thm-orthogonal-codes")
    p_run.add_argument("--profile", default="laptop", help="smoke | laptop | paper (default: laptop)")
    p_run.add_argument("--device", default="cpu", help="torch device passed to notebooks that declare `device` (default: cpu)")
    p_run.add_argument("--jobs", type=int, default=1,
                       help="pages executed at once, sharing the cores (default: 1); pages of the capacity grid run in turn")
    p_run.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                       help="work for at most this long: no page starts after it, training in flight checkpoints and "
                            "stops (exit status 3); the same command again resumes")
    sub.add_parser("check", help="fail when a page or result is stale, broken, or the status page is out of date")
    sub.add_parser("status", help="regenerate book/reproduction-status.md from claims.yaml and results/")
    sub.add_parser("list", help="list notebooks and profiles")

    args = parser.parse_args(argv)
    project = Project(args.root.resolve()) if args.root else Project.find()

    if args.command == "run":
        from geofact.runner import NotebookError, RunUnfinished, run

        try:
            run(project, args.notebooks, args.profile, args.device, jobs=args.jobs, budget=args.budget)
        except RunUnfinished as exc:
            print(f"geofact run: {exc}", file=sys.stderr)
            return UNFINISHED
        except (NotebookError, ValueError, RuntimeError) as exc:
            print(f"geofact run: error: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "check":
        from geofact.check import main_check

        return main_check(project.root)
    if args.command == "status":
        from geofact.status import write_status_page

        print(write_status_page(project))
        return 0
    print("notebooks:", " ".join(project.notebooks()))
    print("profiles: ", " ".join(sorted(p.stem for p in project.profiles_dir.glob("*.yaml"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
