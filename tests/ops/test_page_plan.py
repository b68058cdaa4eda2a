"""`geofact plan`: the runs it prices are the runs the pages train, and the command prints the plan."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from geofact.ops.compute import compute_page
from geofact.pipeline.project import Project
from geofact.pipeline.script import page_parameters
from geofact.ops.calibration import H100_SPEC
from geofact.ops.costs import plan_pages

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", ["exp-capacity", "exp-multihop"])
def test_the_plan_prices_the_runs_the_page_trains(page, tmp_path):
    """At smoke, in a cache of its own: the plan lists exactly the runs the page trains, but for those it
    prices as a guess (exp-capacity's threshold cells under another precision, exp-multihop's runs trained again
    to judge_steps: which, the page learns from its grid)."""
    project = Project(ROOT)
    params = page_parameters(project, page, "smoke", "cpu") | {"cache_dir": str(tmp_path)}
    _, results, why = compute_page(project, page, params, io.BytesIO())
    assert results is not None, why
    trained = {p.stem: json.loads(p.read_text())["config"] for p in tmp_path.glob("*.json")}
    (plan,) = plan_pages({page: params}, H100_SPEC, lambda c: 8)
    exact = {c.key() for g in plan.groups if not g.guess for c in g.configs}
    guessed = {c.key() for g in plan.groups if g.guess for c in g.configs}
    assert exact and exact <= set(trained)
    assert all(k in guessed or trained[k].get("precision", "fp32") != params["precision"] for k in set(trained) - exact)


def test_the_command_prints_every_page_and_the_lease_order():
    # the smoke profile: its stacks' steps read from the committed counts (bench/calibration/step-counts), or counted on
    # fake tensors where they are of other code (geofact.ops.step_counts: about three minutes for the paper profile)
    done = subprocess.run([sys.executable, "-m", "geofact.pipeline.cli", "--root", str(ROOT), "plan", "--profile", "smoke",
                           "--device", "cuda", "--card", "h100"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for page in ("exp-capacity", "exp-readout", "exp-interventions", "exp-freeze-transfer", "exp-multihop", "exp-scaling"):
        assert f"\n{page}: " in done.stdout
    from geofact.ops.costs import LEASE_MINUTES  # the publisher's default (it imports no model) is the plan's own

    assert f"order in leases of {LEASE_MINUTES:.0f} min" in done.stdout and "total: " in done.stdout
    assert done.stdout.index("  exp-capacity ") < done.stdout.index("  exp-multihop ") < done.stdout.index("  exp-scaling ")


def test_a_device_without_a_calibration_is_a_clear_error(tmp_path):
    from geofact.ops.calibration import load_calibration

    with pytest.raises(ValueError, match="--calibrate"):
        load_calibration(tmp_path, "mps")
    assert load_calibration(tmp_path, "cuda") is H100_SPEC


def test_calibrations_are_kept_per_card_and_a_plan_names_one_when_several_are_stored(tmp_path):
    import json

    from geofact.ops.calibration import H100_SPEC, calibration_path, card_of, load_calibration, stored_cards

    assert card_of("cuda (NVIDIA H100 80GB HBM3)") == "h100" and card_of("cuda (NVIDIA H200)") == "h200"
    assert card_of("cpu") == ""
    h200 = {"calibration": {**H100_SPEC.as_dict(), "device": "cuda (NVIDIA H200)", "bandwidth": 4.8e12}}
    path = calibration_path(tmp_path, "cuda", "h200")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(h200))
    assert stored_cards(tmp_path, "cuda") == ["h200"] and load_calibration(tmp_path, "cuda").bandwidth == 4.8e12
    calibration_path(tmp_path, "cuda", "h100").write_text(json.dumps({"calibration": H100_SPEC.as_dict()}))
    with pytest.raises(ValueError, match="several cuda cards are stored"):
        load_calibration(tmp_path, "cuda")
    assert load_calibration(tmp_path, "cuda", "h100") == H100_SPEC
    assert load_calibration(tmp_path, "cuda", "h200").device == "cuda (NVIDIA H200)"
    with pytest.raises(ValueError, match="card must be one of the calibrated cuda cards"):
        load_calibration(tmp_path, "cuda", "a100")
