"""`geofact plan`: the predicted minutes of each experiment page at a profile on a device, per stacked
group, and the order a GPU lease runs them in (book/paper-scale.md, "A GPU lease").

The publisher reads the notebooks (every page's parameters at the profile, defaults included) and
hands them to `python -m geofact.ops.costs`, which knows the runs they ask for and the device's
calibration (geofact.ops.costs): the publishing side imports no model, as `geofact compute` runs
pages in their own interpreters.
"""

from __future__ import annotations

import json
import subprocess
import sys

from geofact.pipeline.project import Project
from geofact.pipeline.script import page_parameters

PLANNED_PAGES = ("exp-capacity", "exp-readout", "exp-interventions", "exp-freeze-transfer", "exp-multihop", "exp-scaling")


def plan(project: Project, profile: str, device: str, precision: str | None = None, minutes: float = 12.0,
         check: bool = False, card: str | None = None) -> str:
    """The plan as text (raises ValueError with the planner's message when it cannot be made); with `check`,
    its error on every group the run cache says was trained on that kind of device."""
    parameters = {name: page_parameters(project, name, profile, device, precision) for name in PLANNED_PAGES}
    done = subprocess.run([sys.executable, "-m", "geofact.ops.costs", "--root", str(project.root), "--device", device,
                           "--minutes", str(minutes), *(["--check"] if check else []), *(["--card", card] if card else [])], input=json.dumps(parameters),
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(done.stderr.strip().removeprefix("geofact plan: error: ") or f"the planner exited with {done.returncode}")
    return done.stdout
