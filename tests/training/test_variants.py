"""geofact.training.variants: the paper's recipe is the pages' trainer's run; each knob changes the run."""

import math

import pytest
import torch

from geofact.training.config import TrainConfig
from geofact.training.trainer import train_group
from geofact.training.variants import MECHANISM_RECIPES, Recipe, kept_jobs, second_study, train_variant

EASY = TrainConfig(N=16, R=1, d=16, batch_size=16, max_steps=300, lr=5e-2, loss_threshold=1e-3, seed=0)


def test_the_paper_recipe_is_the_batched_trainers_run():
    (stacked,) = train_group([EASY], dtype=torch.float64, log_every=1)
    alone = train_variant(EASY, dtype=torch.float64)
    assert stacked.stopped_early and alone["stopped_early"] and alone["steps"] == stacked.steps
    assert alone["final_loss"] == pytest.approx(stacked.final_loss, rel=1e-9)
    ours, theirs = dict(alone["loss_curve"]), dict(stacked.loss_curve)
    assert set(theirs) <= set(ours) and all(ours[s] == pytest.approx(theirs[s], rel=1e-9) for s in theirs)
    assert alone["accuracy"] == stacked.accuracy == 1.0


def test_without_the_stop_rule_every_step_is_taken_and_each_knob_moves_the_run():
    low = {"memorised_below": 1e-2}  # this small run's loss levels off near 1e-3
    base = train_variant(EASY, Recipe(**low), stop_rule=False, dtype=torch.float64)
    assert base["steps"] == EASY.max_steps and len(base["loss_curve"]) == EASY.max_steps and not base["stopped_early"]
    assert base["memorised_at"] is not None
    for recipe in [Recipe("eps", eps=1e-6, **low), Recipe("beta2", beta2=0.95, **low), Recipe("wd0", weight_decay=0.0, **low),
                   Recipe("clip", grad_clip=0.1, **low), Recipe("noclip", grad_clip=math.inf, **low),
                   Recipe("decay", lr_after_memorised=0.1, **low)]:
        run = train_variant(EASY, recipe, stop_rule=False, dtype=torch.float64)
        assert run["final_loss"] != base["final_loss"], recipe.name
        assert run["recipe"]["name"] == recipe.name
    decayed = train_variant(EASY, Recipe("decay", lr_after_memorised=0.1, **low), stop_rule=False, dtype=torch.float64)
    at = decayed["memorised_at"]
    assert at == base["memorised_at"]  # the same run up to memorisation
    assert dict(decayed["loss_curve"])[at] == dict(base["loss_curve"])[at]
    assert Recipe("noclip", grad_clip=math.inf).as_dict()["grad_clip"] == "none"


@pytest.mark.parametrize("kwargs, field", [({"eps": 0.0}, "eps"), ({"beta2": 1.0}, "beta2"), ({"weight_decay": -1.0}, "weight_decay"),
                                           ({"grad_clip": 0.0}, "grad_clip"), ({"lr_after_memorised": 2.0}, "lr_after_memorised"),
                                           ({"name": ""}, "name")])
def test_bad_recipes_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"Recipe.{field}"):
        Recipe(**kwargs)


def test_variant_runs_are_cached_and_read_back(tmp_path, monkeypatch):
    from geofact.training import variants

    short = TrainConfig(**{**EASY.as_dict(), "max_steps": 50})
    jobs = [(short, Recipe()), (short, Recipe("wd0", weight_decay=0.0))]
    first = variants.variant_runs(jobs, tmp_path, device="cpu")
    assert [r["config"]["recipe"]["name"] for r in first] == ["paper", "wd0"]
    assert len(first[0]["loss_curve"]) == 50 and first[0]["provenance"]["device"].startswith("cpu")

    def untrainable(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(variants, "train_variants", untrainable)
    assert variants.variant_runs(jobs, tmp_path, device="cpu") == first
    with pytest.raises(AssertionError, match="trained again"):  # another recipe is another run
        variants.variant_runs([(short, Recipe("eps", eps=1e-6))], tmp_path, device="cpu")


def test_stacked_variants_equal_each_run_trained_alone():
    from geofact.training.variants import stop_at, train_variants

    cell = dict(N=16, R=2, d=12, batch_size=16, max_steps=120, lr=3e-2, loss_threshold=1e-3)
    configs = [TrainConfig(seed=0, **cell), TrainConfig(seed=1, frozen_embeddings=True, **cell), TrainConfig(seed=0, **cell),
               TrainConfig(seed=2, **cell), TrainConfig(seed=1, **cell)]
    recipes = [Recipe(), Recipe("eps", eps=1e-3, beta2=0.95), Recipe("wd0", weight_decay=0.0, grad_clip=0.05),
               Recipe("noclip", grad_clip=math.inf), Recipe("decay", lr_after_memorised=0.1, memorised_below=0.5)]
    stacked = train_variants(configs, recipes, dtype=torch.float64)
    for config, recipe, together in zip(configs, recipes, stacked):
        alone = train_variant(config, recipe, stop_rule=False, dtype=torch.float64)
        assert together["memorised_at"] == alone["memorised_at"] and together["accuracy"] == alone["accuracy"]
        assert [s for s, _ in together["loss_curve"]] == [s for s, _ in alone["loss_curve"]]
        for (_, a), (_, b) in zip(together["loss_curve"], alone["loss_curve"]):
            assert a == pytest.approx(b, rel=1e-7, abs=1e-12), recipe.name
        with_rule = train_variant(config, recipe, stop_rule=True, dtype=torch.float64)
        assert with_rule["steps"] == (stop_at(together, config.loss_threshold) or config.max_steps)
    assert recipes[4].lr_after_memorised < 1 and stacked[4]["memorised_at"] is not None
    with pytest.raises(ValueError, match="one cell"):
        train_variants([configs[0], TrainConfig(seed=0, **{**cell, "d": 8})], recipes[:2])


def test_kept_states_are_the_runs_own_states_at_their_steps(tmp_path):
    from geofact.analysis.trained import TrainedModel
    from geofact.training import variants
    from geofact.training.variants import Keep, train_variants

    long, short = (TrainConfig(**{**EASY.as_dict(), "max_steps": n}) for n in (120, 80))
    keep = Keep(every=40, floor=1e-2)  # this run's loss levels off near 1e-3: it "memorises" under 1e-2
    (run,) = train_variants([long], [Recipe()], dtype=torch.float64, keep=[keep])
    (shorter,) = train_variants([short], [Recipe()], dtype=torch.float64, keep=[Keep(every=80)])
    points, curve = run["points"], dict(run["loss_curve"])
    assert {0, 40, 80, 120} <= set(run["states"]) and points["last"] == 120
    assert set(run["states"]) == {0, 40, 80, 120} | {t for t in points.values() if t is not None}  # nothing else held
    for name in ("best", "stop"):
        assert points[name] is not None and run["state_losses"][str(points[name])] == curve[points[name]]
    assert curve[points["best"]] == min(loss for step, loss in curve.items()
                                        if points["before_spike"] is None or step <= points["before_spike"])
    for k, v in shorter["states"][80].items():  # the state after 80 updates is the 80-step run's last one
        assert torch.equal(run["states"][80][k], v), k

    jobs = [(long, Recipe(), Keep(every=40, floor=1e-2)), (long, Recipe())]
    kept, plain = variants.variant_runs(jobs, tmp_path, device="cpu")
    assert "points" in kept and "points" not in plain and kept["loss_curve"] == plain["loss_curve"]
    folder = variants.states_dir(tmp_path, long, Recipe(), Keep(every=40, floor=1e-2))
    model = TrainedModel.load(folder, long, kept["points"]["stop"])
    assert model.step == kept["points"]["stop"] and 0 < model.accuracy() <= 1


def test_a_bad_keep_names_the_field():
    from geofact.training.variants import Keep

    with pytest.raises(ValueError, match="Keep.every"):
        Keep(every=0)
    with pytest.raises(ValueError, match="floor"):
        Keep(every=10, floor=0.0)


def test_the_second_n_study_is_a_cell_of_a_ladder_and_trains_the_kept_recipes_alone():
    from geofact.training.grid import ladder_grids

    grids = ladder_grids(dict(N=48, d_ladders=[{"R": 1, "d_values": [4, 8]}, {"R": 2, "d_values": [6, 12]}], seeds=[0],
                              lr=0.01, batch_size=48, max_steps=40))
    assert second_study(grids, None) is None
    grid, R, d, seeds = second_study(grids, {"R": 2, "d": 12, "seeds": [0, 1]})
    assert (grid.N, grid.R_values, R, d, seeds) == (48, (2,), 2, 12, [0, 1])
    jobs = kept_jobs(grid, R, d, seeds, 30, 10)
    assert sorted((r.name, c.seed) for c, r, _ in jobs) == sorted((n, s) for n in MECHANISM_RECIPES for s in seeds)
    assert all(c.N == 48 and c.R == 2 and c.d == 12 and c.max_steps == 30 and not c.frozen_embeddings for c, _, _ in jobs)
    for cell, words in [({"R": 3, "d": 12, "seeds": [0, 1]}, "R in \\[1, 2\\]"), ({"R": 1, "d": 12, "seeds": [0, 1]}, "d on that"),
                        ({"R": 2, "d": 12, "seeds": [0]}, "at least 2 distinct"), ({"R": 2, "d": 12}, "must be None or")]:
        with pytest.raises(ValueError, match=words):
            second_study(grids, cell)
    with pytest.raises(ValueError, match="needs a second grid"):
        second_study([], {"R": 2, "d": 12, "seeds": [0, 1]})
