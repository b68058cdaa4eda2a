"""The paper's optimiser recipe and controlled variants of it, one run at a time (issue 46: what
causes the loss spikes after memorisation, geofact.spikes).

Appendix `app:exp-singlehop` fixes AdamW (weight decay 0.1), clipping at norm 1, a constant learning
rate and an early stop at training loss < 1e-4. Adam's step is m / (sqrt(v) + eps): once the
gradients have been tiny for a while, v (averaged over about 1 / (1 - beta2) = 1,000 steps) has
shrunk with them, so a gradient that is merely small again meets a denominator near eps and the
update is as large as at the start of training (Wortsman et al. 2023, "Small-scale proxies for
large-scale Transformer training instabilities", the eps term; Thilak et al. 2022, "The slingshot
mechanism", the same cycle in late training). Each knob below tests one part of that story:

- `eps`: a larger eps caps the update where v is tiny (1e-6 against the default 1e-8; 1e-12 lowers the cap);
- `beta2`: 0.95 makes v follow the gradient within ~20 steps, so a sudden gradient is met by its own
  size rather than by the small past;
- `weight_decay`: 0 removes the pull that keeps moving a memorised run (the pages' other suspect for erosion);
- `grad_clip`: a tighter clip (or none) bounds (or frees) the gradient that enters the moments;
- `lr_after_memorised`: the learning rate multiplied by this once the running minimum of the loss
  first falls below `memorised_below` (a decay after memorisation; 1.0 is the paper's constant rate).

The model and its initialisation are geofact.training.plain_loop's (`SingleRunModel`, the batched
trainer's yardstick, tested equal to it), and the batches are the trainer's (`FactSampler`), so the
paper's recipe here is the recipe of the pages' runs, and a variant differs from it in that knob only.
Every step's loss is recorded: spikes shorter than the pages' logging interval are seen.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from geofact.device import configure_cpu
from geofact.host import as_device
from geofact.processes import die_with_parent
from geofact.progress import progress
from geofact.spikes import DEFAULT_FACTOR, DEFAULT_FLOOR, FirstSpikeWatch, SpikeRule
from geofact.store import keyed, read_record, record_key, refuse_in_records_only, write_arrays, write_json
from geofact.training.config import TrainConfig
from geofact.training.data import FactSampler, facts
from geofact.training.model import forward
from geofact.training.optim import BETAS, EPS, FUSED_DEVICES, FlatStack
from geofact.training.plain_loop import SingleRunModel
from geofact.training.stack import run_weights, stack_params
from geofact.training.step import covers, loss_and_grads
from geofact.training.sweep import checkpoint_file, cpu_workers, provenance

BATCH_STEPS = 500  # batches drawn at once
SCHEMA = "geofact.training.variant/1"


@dataclass(frozen=True)
class Recipe:
    """An optimiser recipe: the paper's (the defaults, with the config's weight decay and clipping) or a
    variant of it. Fields left None take the run config's value."""

    name: str = "paper"
    eps: float = EPS
    beta2: float = BETAS[1]
    weight_decay: float | None = None
    grad_clip: float | None = None  # math.inf: no clipping
    lr_after_memorised: float = 1.0
    memorised_below: float = 3e-4  # geofact.spikes.DEFAULT_FLOOR: the loss at which a run counts as memorised

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"Recipe.{field} must be {allowed}, got {getattr(self, field)!r}")

        need(isinstance(self.name, str) and bool(self.name), "name", "a non-empty string")
        need(math.isfinite(self.eps) and self.eps > 0, "eps", "finite and > 0")
        need(0 <= self.beta2 < 1, "beta2", "in [0, 1)")
        need(self.weight_decay is None or (math.isfinite(self.weight_decay) and self.weight_decay >= 0), "weight_decay",
             "None or >= 0")
        need(self.grad_clip is None or self.grad_clip > 0, "grad_clip", "None, > 0 or math.inf")
        need(math.isfinite(self.lr_after_memorised) and 0 < self.lr_after_memorised <= 1, "lr_after_memorised", "in (0, 1]")
        need(math.isfinite(self.memorised_below) and self.memorised_below > 0, "memorised_below", "finite and > 0")

    def as_dict(self) -> dict:
        out = asdict(self)
        if out["grad_clip"] == math.inf:
            out["grad_clip"] = "none"  # JSON has no infinity
        return out


@dataclass(frozen=True)
class Keep:
    """Which states of a variant run are kept as weights (issue 46, item 3: the mechanism read around a
    spike): one every `every` steps (0, every, 2 every, ..., the last step) and the run's
    `geofact.spikes.READING_POINTS` under the spike rule (`floor`, `factor`) and the run's stop rule."""

    every: int  # steps between the states kept along training
    floor: float = DEFAULT_FLOOR
    factor: float = DEFAULT_FACTOR

    def __post_init__(self) -> None:
        if not (isinstance(self.every, int) and self.every >= 1):
            raise ValueError(f"Keep.every must be an integer number of steps >= 1, got {self.every!r}")
        SpikeRule(self.floor, self.factor)  # validates them

    def as_dict(self) -> dict:
        return asdict(self)


class KeptStates:
    """The states one run keeps while it trains (`Keep`): flat weight vectors by step, the trajectory's
    and the reading points' (a point that moves on frees the state it held unless another holds it)."""

    def __init__(self, keep: Keep, threshold: float) -> None:
        self.keep, self.watch = keep, FirstSpikeWatch(SpikeRule(keep.floor, keep.factor), threshold)
        self.states: dict[int, torch.Tensor] = {}
        self.losses: dict[int, float] = {}
        self.previous: tuple[int, float, torch.Tensor] | None = None

    def _held(self, step: int) -> bool:
        return step % self.keep.every == 0 or step in self.watch.points.values()

    def see(self, step: int, loss: float, flat: torch.Tensor) -> None:
        """The state after `step` updates (`flat`, this run's row of the stack) and its batch loss."""
        before = dict(self.watch.points)
        named = self.watch.see(step, loss)
        if step % self.keep.every == 0 or any(n != "before_spike" for n in named):
            self.states[step], self.losses[step] = flat.detach().clone(), loss
        if "before_spike" in named:
            at, value, weights = self.previous
            self.states[at], self.losses[at] = weights, value
        for old in before.values():
            if old is not None and old in self.states and not self._held(old):
                del self.states[old], self.losses[old]
        self.previous = (step, loss, flat.detach().clone()) if self.watch.wants_previous else None

    def finish(self, step: int, flat: torch.Tensor) -> None:
        """The state after the last update (`last`; its batch loss was never computed)."""
        self.watch.points["last"] = step
        self.states[step] = flat.detach().clone()


MECHANISM_RECIPES = ("paper", "wd 0", "lr/10 after")
"""The study's recipes whose states the mechanism pages read (issue 46, item 3): the paper's, one without
weight decay (the pages' other suspect for erosion) and one without spikes (the rate cut after memorisation)."""


def study_recipes(floor: float = DEFAULT_FLOOR) -> list[Recipe]:
    """exp-capacity's spike study: the paper's recipe and one knob changed at a time (the module docstring);
    `floor` is where "lr/10 after" counts a run as memorised (the spike rule's floor)."""
    return [Recipe(), Recipe("eps 1e-6", eps=1e-6), Recipe("eps 1e-12", eps=1e-12), Recipe("beta2 0.95", beta2=0.95),
            Recipe("wd 0", weight_decay=0.0), Recipe("lr/10 after", lr_after_memorised=0.1, memorised_below=floor),
            Recipe("no clip", grad_clip=math.inf)]


def study_jobs(grid, R: int, d: int, seeds: Sequence[int], steps: int, keep_every: int | None,
               floor: float = DEFAULT_FLOOR, factor: float = DEFAULT_FACTOR) -> list[Job]:
    """The spike study's runs at cell (R, d) of a capacity grid (learned embeddings, the grid's N, batch and
    rate, `steps` steps without the stop rule), every recipe x seed, the `MECHANISM_RECIPES` keeping a state
    every `keep_every` steps and at the reading points (None: none kept). exp-capacity trains them; the
    mechanism pages ask for the same jobs and find them cached."""
    keep = Keep(keep_every, floor, factor) if keep_every is not None else None
    return [(grid.config(R, d, False, s, max_steps=steps), r, keep if r.name in MECHANISM_RECIPES else None)
            for r in study_recipes(floor) for s in seeds]


def second_study(grids: Sequence, cell: dict | None) -> tuple | None:
    """The spike study's cell at the mechanism pages' second N (issue 46, item 3 "at N = 128 and N = 512"):
    `cell` is {"R": R, "d": d, "seeds": [...]}, R the R of one of the second grid's ladders (`grids`,
    geofact.training.grid.ladder_grids) and d on that ladder; None: no such study. Returns (the ladder's
    grid, R, d, seeds), whose `study_jobs` with a `Keep` (the MECHANISM_RECIPES) are the study's runs."""
    if cell is None:
        return None
    ladders = {grid.R_values[0]: grid for grid in grids}
    if not ladders:
        raise ValueError(f"spike_second needs a second grid (trajectory_grid), got spike_second = {cell!r} without one")
    if not (isinstance(cell, dict) and set(cell) == {"R", "d", "seeds"}):
        raise ValueError(f"spike_second must be None or {{'R': R, 'd': d, 'seeds': [...]}}, got {cell!r}")
    R, d, seeds = cell["R"], cell["d"], cell["seeds"]
    if R not in ladders or d not in ladders[R].d_values:
        raise ValueError(f"spike_second's R and d must be a cell of the second grid (R in {sorted(ladders)}, d on that "
                         f"R's ladder: {dict((r, list(g.d_values)) for r, g in ladders.items())}), got R = {R}, d = {d}")
    if not (isinstance(seeds, list) and len(seeds) >= 2 and len(set(seeds)) == len(seeds)
            and all(isinstance(s, int) and s >= 0 for s in seeds)):
        raise ValueError(f"spike_second's seeds must be at least 2 distinct integers >= 0 (the study pairs recipes "
                         f"by seed), got {seeds!r}")
    return ladders[R], R, d, list(seeds)


def kept_jobs(grid, R: int, d: int, seeds: Sequence[int], steps: int, keep_every: int | None) -> list[Job]:
    """The study's jobs the mechanism pages read (those keeping states): what a second N trains alone."""
    return [job for job in study_jobs(grid, R, d, seeds, steps, keep_every) if job[2] is not None]


def train_variant(config: TrainConfig, recipe: Recipe = Recipe(), stop_rule: bool = True,
                  device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> dict:
    """Train one run under `recipe`; with `stop_rule` False it takes all `config.max_steps` steps
    (what the optimiser does after memorisation, unmasked by the early stop).

    Returns a run record as geofact.training.sweep writes one (`loss_curve` at every step, `steps`,
    `stopped_early`, `final_loss`, `accuracy` over all N R facts), with the config, the recipe and
    `memorised_at` (the first step whose loss fell below `recipe.memorised_below`, or None)."""
    device = torch.device(device)
    model = SingleRunModel(config, dtype=dtype).to(device)
    table = facts(config.N, config.R, config.bijection_seed).to(device)  # (N R, 3)
    sampler = FactSampler([config.seed], [len(table)], config.batch_size, len(table), device)
    weight_decay = config.weight_decay if recipe.weight_decay is None else recipe.weight_decay
    clip = config.grad_clip if recipe.grad_clip is None else recipe.grad_clip
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=config.lr, betas=(BETAS[0], recipe.beta2), eps=recipe.eps,
                            weight_decay=weight_decay, fused=device.type in FUSED_DEVICES or None)
    curve: list[tuple[int, float]] = []
    memorised_at, stopped = None, False
    step = 0
    while step < config.max_steps and not stopped:
        block = sampler(range(step, min(step + BATCH_STEPS, config.max_steps)))[0]  # (steps, batch)
        for chosen in block:
            batch = table[chosen]  # (batch, 3)
            logits = model(torch.stack([batch[:, 0], config.N + batch[:, 1]], 1))  # (batch, N)
            loss = F.cross_entropy(logits, batch[:, 2])
            value = float(loss.detach())
            curve.append((step, value))
            if stop_rule and value < config.loss_threshold:
                stopped = True
                break
            if memorised_at is None and value < recipe.memorised_below:
                memorised_at = step
                for group in opt.param_groups:
                    group["lr"] = config.lr * recipe.lr_after_memorised
            opt.zero_grad()
            loss.backward()
            if clip != math.inf:
                torch.nn.utils.clip_grad_norm_(trained, clip)
            opt.step()
            step += 1
    with torch.no_grad():
        predicted = model(torch.stack([table[:, 0], config.N + table[:, 1]], 1)).argmax(-1)  # (N R,)
        accuracy = float((predicted == table[:, 2]).float().mean())
    return {"config": config.as_dict(), "recipe": recipe.as_dict(), "stop_rule": stop_rule, "steps": step,
            "stopped_early": stopped, "final_loss": curve[-1][1], "accuracy": accuracy, "memorised_at": memorised_at,
            "loss_curve": curve}


Job = tuple  # (TrainConfig, Recipe) or (TrainConfig, Recipe, Keep | None)


def _parts(job: Job) -> tuple[TrainConfig, Recipe, Keep | None]:
    config, recipe, *rest = job
    return config, recipe, (rest[0] if rest else None)


def _content(config: TrainConfig, recipe: Recipe, keep: Keep | None = None) -> dict:
    content = {"config": config.as_dict(), "recipe": recipe.as_dict(), "stop_rule": False}
    return content if keep is None else {**content, "keep": keep.as_dict()}


def variant_path(cache_dir: Path, config: TrainConfig, recipe: Recipe, keep: Keep | None = None) -> Path:
    content = _content(config, recipe, keep)
    return keyed(Path(cache_dir) / f"variant-{record_key(content)}.json", content)


def states_dir(cache_dir: Path, config: TrainConfig, recipe: Recipe, keep: Keep) -> Path:
    """Where a variant run's kept states lie, each as the run cache lays out a checkpoint
    (`geofact.training.sweep.checkpoint_file`), so that `TrainedModel.load(states_dir(...), config, step)`
    and the mechanism analyses (geofact.analysis.trajectory.analyse_state) read them as they read a grid run's."""
    return variant_path(cache_dir, config, recipe, keep).with_suffix("")


def _train_and_write(job: tuple) -> None:
    configs, recipes, keeps, cache_dir, device = job  # a torch.device, resolved where the sweep began
    origin = provenance(device)
    for config, recipe, keep, record in zip(configs, recipes, keeps, train_variants(configs, recipes, device, keep=keeps)):
        states = record.pop("states", None)
        if states is not None:  # the weights first: a record on disk means its states are there
            folder = states_dir(cache_dir, config, recipe, keep)
            folder.mkdir(parents=True, exist_ok=True)
            for step, weights in states.items():
                write_arrays(folder / checkpoint_file(config, step), {k: v.float().numpy() for k, v in weights.items()},
                             compress=False)
        write_json(variant_path(cache_dir, config, recipe, keep),
                   {"schema": SCHEMA, **record, "config": _content(config, recipe, keep), "provenance": origin})


def _init_worker(parent: int) -> None:
    die_with_parent(parent)
    configure_cpu(1)


def variant_runs(jobs: Sequence[Job], cache_dir: Path, device: str | torch.device = "cpu") -> list[dict]:
    """The records of `train_variants` for each (config, recipe) of one cell, all `max_steps` steps
    long, from the cache where there (a record's `config` field holds the config and the recipe), else
    trained: on a CPU as one stack per core this page may use, side by side in worker processes, each
    stack's records written when it ends. A job (config, recipe, keep) with a `Keep` also keeps states
    (`states_dir`; its record names them in `points` and `state_losses`)."""
    device = as_device(device)
    cache_dir = Path(cache_dir)
    jobs = [_parts(job) for job in jobs]
    paths = [variant_path(cache_dir, *job) for job in jobs]
    todo = [job for job, path in zip(jobs, paths) if not path.exists()]
    for config, recipe, _ in todo:
        refuse_in_records_only(f"the {recipe.name} variant of {config.as_dict()}")
    workers = max(1, min(len(todo), cpu_workers(device)))
    chunks = [todo[i::workers] for i in range(workers) if todo[i::workers]]
    work = [([c for c, _, _ in chunk], [r for _, r, _ in chunk], [k for _, _, k in chunk], cache_dir, device)
            for chunk in chunks]
    if len(work) > 1:
        with ProcessPoolExecutor(len(work), mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                                 initargs=(os.getpid(),)) as pool:
            for done in as_completed([pool.submit(_train_and_write, job) for job in work]):
                done.result()
    else:
        for job in work:
            _train_and_write(job)
    return [read_record(p, SCHEMA, _content(*job)) for job, p in zip(jobs, paths)]


class RecipeUpdates:
    """Each stacked run's clipping and AdamW under its own recipe, on one flat stack (M, P): the clipping
    norm over what the run trains (frozen entity embeddings get no gradient in their run, so they do not
    count), then torch's fused AdamW kernel on each run's trained columns, one call per set of
    hyperparameters (lr, beta2, eps, weight decay)."""

    def __init__(self, stack: FlatStack, configs: list[TrainConfig], recipes: list[Recipe], dtype: torch.dtype,
                 device: torch.device) -> None:
        M = len(configs)
        self.stack = stack
        self.entity_mask = torch.tensor([0.0 if c.frozen_embeddings else 1.0 for c in configs], dtype=dtype,
                                        device=device)[:, None, None]  # (M, 1, 1)
        self.ranges = [stack.column_ranges([k for k in stack.shapes if k != "E_ent" or not c.frozen_embeddings])
                       for c in configs]  # the columns each run trains
        self.base_lr = [c.lr for c in configs]
        self.lr_now = list(self.base_lr)
        self.hyper = [(r.beta2, r.eps, c.weight_decay if r.weight_decay is None else r.weight_decay)
                      for c, r in zip(configs, recipes)]
        self.clip = torch.tensor([c.grad_clip if r.grad_clip is None else r.grad_clip for c, r in zip(configs, recipes)],
                                 dtype=dtype, device=device)[:, None]  # (M, 1)
        self.m, self.v, self.grad = (torch.zeros_like(stack.flat) for _ in range(3))  # (M, P) each
        self.t = torch.zeros(M, dtype=torch.float32, device=device)  # each run's step count, as the fused kernel reads it
        self.groups = self._kernel_groups()

    def _kernel_groups(self) -> dict[tuple, tuple[list[torch.Tensor], ...]]:
        """{(lr, beta2, eps, weight decay): the fused AdamW kernel's tensor lists}: runs that step alike."""
        groups: dict[tuple, tuple[list[torch.Tensor], ...]] = {}
        for k, ranges in enumerate(self.ranges):
            lists = groups.setdefault((self.lr_now[k], *self.hyper[k]), ([], [], [], [], []))
            for a, b in ranges:
                for out, buffer in zip(lists, (self.stack.flat, self.grad, self.m, self.v)):
                    out.append(buffer[k, a:b])
                lists[4].append(self.t[k])
        return groups

    def scale_rate(self, k: int, factor: float) -> None:
        """Run k's learning rate from now on: its config's times `factor`."""
        self.lr_now[k] = self.base_lr[k] * factor
        self.groups = self._kernel_groups()

    @torch.no_grad()
    def __call__(self, grads: dict[str, torch.Tensor]) -> None:
        grad = self.grad  # (M, P)
        self.stack.columns({**grads, "E_ent": grads["E_ent"] * self.entity_mask}, out=grad)
        norms = torch.linalg.vector_norm(grad, dim=1, keepdim=True)  # clip_grad_norm_ over what each run trains
        grad.mul_(torch.where(torch.isinf(self.clip), 1.0, self.clip / (norms + 1e-6)).clamp(max=1.0))
        self.t += 1
        for (lr, beta2, eps, weight_decay), (params, grads_, exp_avgs, exp_avg_sqs, steps) in self.groups.items():
            torch._fused_adamw_(params, grads_, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=BETAS[0], beta2=beta2,
                                weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)


def _check_variant_stack(configs: list[TrainConfig], recipes: list[Recipe], keep: list) -> None:
    if len(configs) != len(recipes) or len(keep) != len(configs) or not configs:
        raise ValueError(f"configs, recipes and keep must pair up one to one, got {len(configs)}, {len(recipes)} "
                         f"and {len(keep)}")
    if len({c.shape_key() for c in configs}) != 1 or len({c.R for c in configs}) != 1:
        raise ValueError("train_variants stacks runs of one cell: equal TrainConfig.shape_key() and R")
    if configs[0].stop_accuracy is not None:
        raise ValueError(f"train_variants has no accuracy stop: stop_accuracy must be None, got {configs[0].stop_accuracy}")


def train_variants(configs: Sequence[TrainConfig], recipes: Sequence[Recipe], device: str | torch.device = "cpu",
                   dtype: torch.dtype = torch.float32, desc: str = "recipe variants", show_progress: bool = True,
                   keep: Sequence[Keep | None] | None = None) -> list[dict]:
    """`train_variant(config, recipe, stop_rule=False)` of every (config, recipe) pair, all stacked into
    one batched computation (runs of one cell: equal `shape_key()`, no learned positions): every step is
    one pass of geofact.training.step's loss and gradients for all runs, then per run the clipping and
    AdamW of its recipe (`RecipeUpdates`; tests/training/test_variants.py checks every pair against
    `train_variant` in float64). A variant run then costs a fraction of a plain-loop one: the small
    model's step is mostly per-operation costs, paid once for the stack. With no stop rule every run
    takes `max_steps` steps; the stop rule's run is the prefix of its curve up to the first loss below
    the threshold (`stop_at`).

    `keep` (one `Keep` or None per run) keeps a run's states as weights: its record then has `states`
    ({step: weights dict, on the CPU}), `points` ({reading point: step or None}) and `state_losses`
    ({step: batch loss}), the weights read on the host one state at a time (a CPU study's runs)."""
    configs, recipes = list(configs), list(recipes)
    keep = [None] * len(configs) if keep is None else list(keep)
    _check_variant_stack(configs, recipes, keep)
    device = as_device(device)
    M, steps_total = len(configs), configs[0].max_steps
    stack = FlatStack({k: v.to(device) for k, v in stack_params(configs, dtype).items()})
    if not covers(stack.views):
        raise ValueError("train_variants covers models without learned positions (geofact.training.step.covers)")
    update = RecipeUpdates(stack, configs, recipes, dtype, device)
    tables = torch.stack([facts(c.N, c.R, c.bijection_seed) for c in configs]).to(device)  # (M, N R, 3)
    sampler = FactSampler([c.seed for c in configs], [tables.shape[1]] * M, configs[0].batch_size, tables.shape[1], device)
    run = torch.arange(M, device=device)[:, None, None]
    curves: list[list[tuple[int, float]]] = [[] for _ in configs]
    memorised_at: list[int | None] = [None] * M
    kept = {k: KeptStates(keep[k], configs[k].loss_threshold) for k in range(M) if keep[k] is not None}
    bar = progress(range(steps_total), desc=desc, disable=not show_progress)
    for start in range(0, steps_total, BATCH_STEPS):
        block = sampler(range(start, min(start + BATCH_STEPS, steps_total)))  # (M, steps, B)
        batches = tables[run, block]  # (M, steps, B, 3)
        for i in range(block.shape[1]):
            step = start + i
            batch = batches[:, i]  # (M, B, 3)
            losses, grads = loss_and_grads(stack.views, batch[..., 0], batch[..., 1], batch[..., 2])
            for k, loss in enumerate(losses.tolist()):
                curves[k].append((step, loss))
                if memorised_at[k] is None and loss < recipes[k].memorised_below:
                    memorised_at[k] = step
                    update.scale_rate(k, recipes[k].lr_after_memorised)
                if k in kept:
                    kept[k].see(step, loss, stack.flat[k])
            update(grads)
            bar.update(1)
    bar.close()
    for k, states in kept.items():
        states.finish(steps_total, stack.flat[k])
    return _variant_records(stack, configs, recipes, tables, curves, memorised_at, kept)


def _variant_records(stack: FlatStack, configs: list[TrainConfig], recipes: list[Recipe], tables: torch.Tensor,
                     curves: list[list[tuple[int, float]]], memorised_at: list[int | None],
                     kept: dict[int, KeptStates]) -> list[dict]:
    """The records of a stack of variant runs at the end of their budget: accuracy over every fact, the
    curves, and the kept states of the runs that keep them."""
    with torch.no_grad():
        queries = torch.stack([tables[..., 0], configs[0].N + tables[..., 1]], -1)  # (M, N R, 2)
        accuracy = (forward(stack.unflatten(stack.flat), queries).argmax(-1) == tables[..., 2]).float().mean(1).tolist()  # (M,)
    steps_total = configs[0].max_steps
    records = [{"config": c.as_dict(), "recipe": r.as_dict(), "stop_rule": False, "steps": steps_total,
                "stopped_early": False, "final_loss": curve[-1][1], "accuracy": acc, "memorised_at": at, "loss_curve": curve}
               for c, r, curve, acc, at in zip(configs, recipes, curves, accuracy, memorised_at)]
    for k, states in kept.items():
        records[k]["points"] = dict(states.watch.points)
        records[k]["state_losses"] = {str(t): x for t, x in sorted(states.losses.items())}
        records[k]["states"] = {t: run_weights(stack.unflatten(w[None]), 0, configs[k]) for t, w in sorted(states.states.items())}
    return records


def stop_at(record: dict, threshold: float) -> int | None:
    """The step at which the paper's stop rule (batch loss below `threshold`) would have ended the run."""
    return next((step for step, loss in record["loss_curve"] if loss < threshold), None)
