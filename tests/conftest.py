import os

# Any hub access in the tests must fail at once rather than reach for the network: models are built
# from configs or read from installed packages. Set before transformers / huggingface_hub are imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Under pytest-xdist (`make test`: a process per core, each test file in one of them) every process
# runs on its own share of the cores, and computes on that many threads: torch's threads spin while they
# wait, and two processes of two threads each on two cores slowed the training tests a hundredfold. The
# pages and sweeps the tests start see the same share (geofact.processes.usable_cores reads the
# affinity). So does a shard of a GPU lease's CUDA tests (GEOFACT_TEST_SHARD="i/n": the i-th of n pytest
# processes run at once by tools/lease.sh, each running every n-th test). Set before torch is imported.
SHARD_ENV = "GEOFACT_TEST_SHARD"


def _read_shard() -> tuple[int, int] | None:
    """(i, n) from GEOFACT_TEST_SHARD="i/n", or None where it is unset; taken out of the environment, so that a
    pytest a test starts in a subprocess runs whole."""
    value = os.environ.pop(SHARD_ENV, "")
    if not value:
        return None
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        index = count = -1
    if not 0 <= index < count:
        raise ValueError(f"{SHARD_ENV} must be 'i/n' with 0 <= i < n, got {value!r}")
    return index, count


SHARD = _read_shard()


def _pin_to_share() -> None:
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker:
        index = int(worker.removeprefix("gw"))
    elif SHARD is not None:
        index, count = SHARD
    else:
        return
    if count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    share = cores[index % count :: count] or cores
    os.sched_setaffinity(0, share)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "GEOFACT_THREADS"):
        os.environ.setdefault(name, str(len(share)))


_pin_to_share()

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo():
    """The checkout as the publisher sees it. Imported here, not at the top: a GPU lease, which lacks
    jupytext and papermill, runs the training tests (tests/training/test_cuda.py) through this conftest."""
    from geofact.pipeline.project import Project

    return Project(REPO)


@pytest.fixture(scope="session")
def committed_book(repo, tmp_path_factory) -> Path:
    """The committed pages built into HTML once (strict mode), in a scratch copy; the HTML folder.
    GEOFACT_BOOK_HTML names an HTML folder already built instead (to check a book you just built)."""
    from tests.pipeline.book import build_book, copy_project

    if os.environ.get("GEOFACT_BOOK_HTML"):
        return Path(os.environ["GEOFACT_BOOK_HTML"])

    copy = copy_project(repo.root, tmp_path_factory.mktemp("committed"))
    done = build_book(copy.root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return copy.book_dir / "_build" / "html"


def pytest_collection_modifyitems(config, items):
    """Under GEOFACT_TEST_SHARD="i/n", only every n-th test in the order of their ids from the i-th (the others
    deselected): n processes together run each test once, whatever order each collected them in."""
    if SHARD is None:
        return
    index, count = SHARD
    kept = {item.nodeid for item in sorted(items, key=lambda item: item.nodeid)[index::count]}
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in kept])
    items[:] = [item for item in items if item.nodeid in kept]
