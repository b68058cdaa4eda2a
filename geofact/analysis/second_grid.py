"""Train the mechanism pages' second grid on its own (`python -m geofact.analysis.second_grid PARAMS`): what
`geofact run --jobs J` starts as a unit of its own beside exp-capacity (geofact.pipeline.runner), in a
process of its own so that the pipeline never imports a model. PARAMS is JSON: the page's
`trajectory_grid` and `precision` parameters, the run cache and the device."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from geofact.analysis.trajectory import train_grids
from geofact.training.grid import ladder_grids


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m geofact.analysis.second_grid "
                         "'{\"trajectory_grid\": {...}, \"precision\": ..., \"cache\": ..., \"device\": ...}'")
    params = json.loads(argv[0])
    train_grids(ladder_grids(params["trajectory_grid"], params.get("precision")), Path(params["cache"]), params["device"])


if __name__ == "__main__":
    main(sys.argv[1:])
