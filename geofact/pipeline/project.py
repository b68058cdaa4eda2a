"""Where things live in a geofact checkout; every path is derived from one root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

from geofact.settings import checkout_root, runs_dir


@dataclass(frozen=True)
class Project:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> "Project":
        """The checkout at or above `start` (geofact.settings.checkout_root)."""
        return cls(checkout_root(start))

    @property
    def notebooks_dir(self) -> Path:
        return self.root / "notebooks"

    @property
    def profiles_dir(self) -> Path:
        return self.notebooks_dir / "profiles"

    @property
    def book_dir(self) -> Path:
        return self.root / "book"

    @property
    def results_dir(self) -> Path:
        return self.root / "results"

    @property
    def runs_dir(self) -> Path:
        """The training-run cache (geofact.settings.runs_dir)."""
        return runs_dir(self.root)

    @property
    def ledger_path(self) -> Path:
        return self.root / "claims.yaml"

    @property
    def toc_path(self) -> Path:
        return self.root / "_toc.yml"

    @property
    def status_page(self) -> Path:
        return self.book_dir / "reproduction-status.md"

    @property
    def claims_page(self) -> Path:
        """Each claim's card (geofact.pipeline.claim_cards), linked from the status page."""
        return self.book_dir / "claims.md"

    def notebooks(self) -> list[str]:
        """Names of all notebooks (jupytext percent files notebooks/<name>.py)."""
        return sorted(p.stem for p in self.notebooks_dir.glob("*.py"))

    def source(self, name: str) -> Path:
        path = self.notebooks_dir / f"{name}.py"
        if not path.exists():
            raise ValueError(f"notebook must be one of {self.notebooks()}, got {name!r}")
        return path

    def page(self, name: str) -> Path:
        return self.book_dir / f"{name}.ipynb"

    def results(self, profile: str, name: str) -> Path:
        return self.results_dir / profile / f"{name}.json"

    def read_notebook(self, name: str) -> nbformat.NotebookNode:
        return jupytext.read(self.source(name))
