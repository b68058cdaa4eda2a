import os

# Any hub access in the tests must fail at once rather than reach for the network: models are built
# from configs or read from installed packages. Set before transformers / huggingface_hub are imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from pathlib import Path

import pytest

from geofact.project import Project

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Project:
    return Project(REPO)
