"""Train the mechanism pages' second grid on its own (`python -m geofact.analysis.second_grid PARAMS`): what
`geofact run --jobs J` starts as a unit of its own beside exp-capacity (geofact.pipeline.runner), in a
process of its own so that the pipeline never imports a model. PARAMS is JSON: the page's
`trajectory_grid`, `precision`, `spike_second`, `spike_steps` and `spike_keep_every` parameters, the run
cache and the device. The spike study at the second N (`spike_second`) trains here too, after the grid."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from geofact.analysis.trajectory import train_grids
from geofact.training.grid import ladder_grids
from geofact.training.variants import kept_jobs, second_study, variant_runs


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m geofact.analysis.second_grid "
                         "'{\"trajectory_grid\": {...}, \"precision\": ..., \"cache\": ..., \"device\": ...}'")
    params = json.loads(argv[0])
    grids = ladder_grids(params["trajectory_grid"], params.get("precision"))
    train_grids(grids, Path(params["cache"]), params["device"])
    study = second_study(grids, params.get("spike_second"))
    if study is not None and params.get("spike_keep_every") is not None:
        variant_runs(kept_jobs(*study, params["spike_steps"], params["spike_keep_every"]), Path(params["cache"]) / "variants",
                     params["device"])


if __name__ == "__main__":
    main(sys.argv[1:])
