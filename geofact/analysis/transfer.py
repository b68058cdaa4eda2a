"""MLP-freeze transfer (Section 5.1, Appendix B.3 "MLP freeze experiment", Appendix D).

After training, freeze every parameter except the subject embeddings, draw fresh bijections g'_r, and
ask whether the trained MLP can serve them. The smart initialisation writes subject embeddings that
linearly encode the new attributes under the readout maps W_r of the trained model (fitted from s_x
on all subjects, geofact.analysis.readout):

    s_x = (target_x - b_stack) W_stack^+,   W_stack = [W_1 | ... | W_R],   target_x = concat_r a_{g'_r(x)}

the minimum-norm s with s W_r + b_r = a_{g'_r(x)} for every r (the paper's maps are linear; ours are
affine, so the intercepts are subtracted first). If the MLP is a generic relation-conditioned
selector, the model answers g' with these embeddings and no retraining.

Four conditions, accuracy against steps of retraining the subject embeddings alone:
    control  random re-init, retrain on the original g   (how fast embeddings alone re-learn a table)
    random   random re-init, retrain on g'
    smart    smart init, retrain on g'                   (step 0 of this curve is the zero-shot accuracy)
and, without training, `smart_on_g`: the smart init written for the original g (do the maps read the
trained table back?). control and random start from the same random embeddings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from geofact.analysis.readout import linear_readout
from geofact.analysis.trained import TARGETS, Target, TrainedModel, task_answers
from geofact.host import as_device, on_host, to_host
from geofact.settings import past_deadline
from geofact.store import read_record, record_key, write_json
from geofact.training.config import TrainConfig
from geofact.training.model import INIT_STD
from geofact.training.resume import BudgetSpent
from geofact.training.sweep import (
    default_group_size,
    provenance,
    run_sweep,
    stack_chunks,
)
from geofact.training.trainer import train_group

SCHEMA = "geofact.analysis.transfer/2"
CONDITIONS = ("control", "random", "smart")


def smart_init(maps: list[tuple[torch.Tensor, torch.Tensor]], vectors: torch.Tensor, new_answers: torch.Tensor) -> torch.Tensor:
    """Subject embeddings (N, d) encoding new_answers (R, N) under readout maps [(W_r (d, k), b_r (k,))]."""
    if len(maps) != new_answers.shape[0]:
        raise ValueError(f"need one readout map per relation: {new_answers.shape[0]} relations, {len(maps)} maps")
    W_stack = torch.cat([W for W, _ in maps], dim=1)  # (d, R k)
    b_stack = torch.cat([b for _, b in maps])  # (R k,)
    target = torch.cat([vectors[new_answers[r]] for r in range(len(maps))], dim=1)  # (N, R k)
    return (target - b_stack) @ torch.linalg.pinv(W_stack)


@dataclass(frozen=True)
class TransferConfig:
    """One transfer experiment on one trained run (`base`)."""

    base: TrainConfig  # the trained model (from the run cache; trained if missing)
    new_task_seed: int  # draws g'; must differ from the base's task seed
    steps: int = 1000  # retraining steps of the subject embeddings
    eval_every: int = 100  # accuracy over all N R facts every this many steps (and at 0 and the end)
    lr: float | None = None  # retraining learning rate; None means the base run's
    alpha: float = 1e-3  # ridge penalty of the readout maps behind the smart init
    target: str = "unembedding"  # which vector a_y is (geofact.analysis.trained.TARGETS)

    def __post_init__(self) -> None:
        if self.new_task_seed == self.base.bijection_seed:
            raise ValueError(f"new_task_seed must differ from the base run's task seed {self.base.bijection_seed}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {self.eval_every}")
        if self.lr is not None and self.lr <= 0:
            raise ValueError(f"lr must be > 0 (or None), got {self.lr}")
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {sorted(TARGETS)}, got {self.target!r}")

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "base": self.base.as_dict()}

    def key(self) -> str:
        return record_key(self.as_dict())

    def retrain_config(self, condition: str) -> TrainConfig:
        """The run that retrains the subject embeddings under `condition` (no early stop: full curves)."""
        if condition not in CONDITIONS:
            raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
        task_seed = self.base.bijection_seed if condition == "control" else self.new_task_seed
        return dataclasses.replace(self.base, task_seed=task_seed, frozen_embeddings=False, max_steps=self.steps,
                                   lr=self.lr or self.base.lr, loss_threshold=0.0)


def new_answers(config: TransferConfig) -> torch.Tensor:
    """(R, N): the fresh bijections g'."""
    b = config.base
    return fresh_bijections(b.N, b.R, config.new_task_seed)


def fresh_bijections(N: int, R: int, seed: int) -> torch.Tensor:
    """(R, N): bijections g' drawn as the task draws them, from another seed (on the host; drawn once per seed,
    `task_answers`, and copied)."""
    with on_host():
        return task_answers(N, R, seed).clone()


def smart_inits(model: TrainedModel, new: torch.Tensor, alpha: float = 1e-3,
                target: Target = "unembedding") -> tuple[torch.Tensor, torch.Tensor]:
    """Smart initialisations (N, d) from the model's s_x readout maps (fitted on all subjects): for the
    bijections `new` (R, N), and for the model's own g; on the model's device."""
    c = model.config
    vectors = model.attribute_vectors(target)
    with on_host():
        everyone = torch.ones(c.N, dtype=torch.bool)
    maps = linear_readout(model.subject_embeddings.expand(c.R, -1, -1), model.answers, vectors, everyone, alpha).maps
    return smart_init(maps, vectors, new.to(model.device)), smart_init(maps, vectors, model.answers)


def zero_shot(model: TrainedModel, new: torch.Tensor, alpha: float = 1e-3, target: Target = "unembedding") -> dict[str, float]:
    """The transfer that needs no training, on any model (a checkpoint as well as a final one):
    accuracy on g' of the smart init written for `new` (R, N), and on g of the one written for g (one host read)."""
    on_new, on_g = smart_inits(model, new, alpha, target)
    zero, own = to_host(model.correct_fraction(on_new, new), model.correct_fraction(on_g))
    return {"zero_shot": float(zero), "smart_on_g": float(own)}


def starting_embeddings(config: TransferConfig, model: TrainedModel) -> tuple[dict[str, torch.Tensor], float]:
    """Initial subject embeddings (N, d) per condition, and the zero-shot accuracy of the smart init written for g."""
    b = config.base
    g = torch.Generator().manual_seed(config.new_task_seed)
    fresh = torch.randn(b.N, b.d, generator=g, dtype=torch.float64).float() * INIT_STD  # as the model's own init
    smart, on_g = smart_inits(model, new_answers(config), config.alpha, config.target)
    return {"control": fresh, "random": fresh, "smart": smart}, model.accuracy(on_g)


def transfer_path(cache_dir: Path, config: TransferConfig) -> Path:
    return Path(cache_dir) / "transfer" / f"{config.key()}.json"


def load_transfer(cache_dir: Path, config: TransferConfig) -> dict | None:
    return read_record(transfer_path(cache_dir, config), SCHEMA, config.as_dict())


def run_transfers(configs: list[TransferConfig], cache_dir: Path, device: str | torch.device = "cpu",
                  progress: bool = True) -> list[dict]:
    """Transfer records of every config, in order: base runs and transfers not in `cache_dir` are trained.

    The three retraining runs of a transfer train in one stacked group, with other transfers of the
    same shape; each transfer is written as soon as its group finishes (an interrupted call resumes).
    """
    cache_dir = Path(cache_dir)
    device = as_device(device)
    run_sweep([c.base for c in configs], cache_dir, device=device, progress=progress)
    missing = list({c.key(): c for c in configs if load_transfer(cache_dir, c) is None}.values())
    chunks = stack_chunks(missing, lambda c: (c.retrain_config("control").shape_key(), c.eval_every),
                          lambda c: max(1, default_group_size(c.retrain_config("control"), device) // len(CONDITIONS)))
    bar = None
    if progress and chunks:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(len(CONDITIONS) * c.steps for c in missing),
                   desc=f"retraining {len(missing)} transfers ({len(configs) - len(missing)} cached)", unit="run-step")
    origin = provenance(device)
    (cache_dir / "transfer").mkdir(parents=True, exist_ok=True)
    for done, chunk in enumerate(chunks):
        if past_deadline():  # the transfers written so far stay cached; the same call again goes on
            raise BudgetSpent(f"time budget spent with {len(chunks) - done} of {len(chunks)} groups of transfers "
                              f"not started")
        runs, inits, on_g = [], [], []
        for c in chunk:
            model = TrainedModel.load(cache_dir, c.base)
            starts, on_g_accuracy = starting_embeddings(c, model)
            runs += [c.retrain_config(cond) for cond in CONDITIONS]
            inits += [{**model.weights, "E_ent": starts[cond]} for cond in CONDITIONS]
            on_g.append(on_g_accuracy)
        results = train_group(runs, device=device, progress=bar, init=inits, train_only=("E_ent",),
                              eval_every=chunk[0].eval_every)
        for i, c in enumerate(chunk):
            mine = results[len(CONDITIONS) * i : len(CONDITIONS) * (i + 1)]
            write_json(transfer_path(cache_dir, c), {
                "schema": SCHEMA,
                "config": c.as_dict(),
                "curves": {cond: [list(point) for point in r.accuracy_curve] for cond, r in zip(CONDITIONS, mine)},
                "smart_on_g": on_g[i],
                "group_seconds": mine[0].seconds,
                "group_size": len(runs),
                "provenance": origin,
            })
    if bar is not None:
        bar.close()
    return [load_transfer(cache_dir, c) for c in configs]
