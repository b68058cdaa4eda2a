"""Profiles: named parameter sets (YAML under notebooks/profiles/) that scale every notebook at once.

    smoke   seconds per notebook, for the tests and CI
    laptop  the default: reproduces every qualitative claim on a 2-core CPU, minutes per notebook
    paper   the paper's full scale (a GPU where training is involved)

A profile file has `description`, `defaults` (offered to every notebook) and `notebooks`
(per-notebook values). A notebook receives only the parameters its `parameters` cell declares:
defaults it does not declare are skipped, while a per-notebook key it does not declare is an error,
so a typo in a profile can never pass silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from geofact.precision import check_precision, default_precision

PROFILE_ORDER = ("smoke", "laptop", "paper")


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)
    notebooks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def parameters_for(self, notebook: str, declared: set[str], device: str | None = None,
                       precision: str | None = None) -> dict[str, Any]:
        """The parameters passed to `notebook`, given the names its parameters cell declares. A notebook
        that declares `device` gets the device asked for; one that declares `precision` gets the policy
        asked for, or the device's default (geofact.precision: tf32 on CUDA, fp32 elsewhere)."""
        own = self.notebooks.get(notebook, {})
        unknown = sorted(set(own) - declared)
        if unknown:
            raise ValueError(
                f"profile {self.name!r} sets {unknown} for notebook {notebook!r}, "
                f"which declares only {sorted(declared)} in its parameters cell"
            )
        params = {k: v for k, v in self.defaults.items() if k in declared}
        params.update(own)
        if device is not None and "device" in declared:
            params["device"] = device
        if "precision" in declared and (precision is not None or device is not None):
            params["precision"] = check_precision(precision or default_precision(device), device)
        return params


def load_profile(name: str, profiles_dir: Path) -> Profile:
    path = Path(profiles_dir) / f"{name}.yaml"
    if not path.exists():
        available = sorted(p.stem for p in Path(profiles_dir).glob("*.yaml"))
        raise ValueError(f"profile must be one of {available}, got {name!r}")
    data = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(data) - {"description", "defaults", "notebooks"})
    if unknown:
        raise ValueError(f"{path}: unknown top-level keys {unknown} (allowed: description, defaults, notebooks)")
    return Profile(
        name=name,
        description=str(data.get("description", "")),
        defaults=dict(data.get("defaults") or {}),
        notebooks={k: dict(v or {}) for k, v in (data.get("notebooks") or {}).items()},
    )


def profile_rank(name: str) -> int:
    """Scale order of a profile (unknown custom profiles sort after the built-in ones)."""
    return PROFILE_ORDER.index(name) if name in PROFILE_ORDER else len(PROFILE_ORDER)
