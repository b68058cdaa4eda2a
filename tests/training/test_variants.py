"""geofact.training.variants: the paper's recipe is the pages' trainer's run; each knob changes the run."""

import math

import pytest
import torch

from geofact.training.config import TrainConfig
from geofact.training.trainer import train_group
from geofact.training.variants import Recipe, train_variant

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
