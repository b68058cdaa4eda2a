from pathlib import Path

import pytest

from geofact.project import Project

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Project:
    return Project(REPO)
