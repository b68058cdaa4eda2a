"""Configurations of training runs, validated on construction: single-hop (Section 5, Appendix B)
and multi-hop with or without chain-of-thought (Appendix C).

Both say what the stacked trainer needs from a run: `key()` (its cache name), `shape_key()` (which
runs can be stacked), `seq_len` (positions, for the positional embedding), `step_logits` (logit
entries per step, to size stacks) and `schema` (the name of its cached record).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from typing import ClassVar, Literal, Sequence

from geofact.store import record_key
from geofact.precision import PRECISIONS

Attention = Literal["uniform", "learned"]
MAX_FACTS = 2**20  # the batch sampler keys facts with 20 index bits (geofact.training.data)
# `TrainConfig.gives_up` calls a run hopeless only if its projection falls short of its level by more than this many
# sqrt(n) of its n facts: four times the largest standard deviation (sqrt(n) / 2) of a count of n coin flips
GIVE_UP_MARGIN = 2.0
# The version of `TrainConfig.gives_up`: bump it with any change to which runs the rule stops, so that a run under
# another rule is another run (its cache key changes). While developing the rule, records made under an earlier
# version kept being served under the same key; version 1's runs keep the key they were cached under
GIVE_UP_RULE = 1


def _integer(x: object) -> bool:
    """An int and not a bool (which Python counts as one: `d=True` would train at d = 1)."""
    return isinstance(x, int) and not isinstance(x, bool)


def _need(config: object, ok: bool, name: str, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {getattr(config, name)!r}")


def facts_for(level: float, n: int) -> int:
    """The fewest of n facts answered that make an accuracy (count / n, as the record computes it) of at
    least `level`: the accuracy stop compares integer counts on the device, so no rounding of a device
    division can stop a run the record would show below its level."""
    c = min(n, max(0, math.ceil(level * n) - 1))
    while c / n < level:
        c += 1
    return c


class _Run:
    """What every run configuration shares: its JSON form, its cache key, its derived sizes."""

    mlp_width: int | None
    d: int
    seed: int
    task_seed: int | None
    precision: str

    # The fields that may differ within a stack: the relation tables are padded to the largest R, and
    # seeds, bijections, frozen or not and the learning rate are per run. Every other field, and the
    # resolved MLP width, must agree (`shape_key`), so a field added later is unstackable by default.
    STACKABLE: ClassVar[tuple[str, ...]] = ("R", "seed", "task_seed", "frozen_embeddings", "lr")

    @property
    def width(self) -> int:
        return self.mlp_width if self.mlp_width is not None else 4 * self.d

    def shape_key(self) -> tuple:
        """Runs with equal keys can be stacked into one batched computation."""
        fixed = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                 if f.name not in self.STACKABLE and f.name != "mlp_width"]
        return (*fixed, ("width", self.width))

    @property
    def bijection_seed(self) -> int:
        return self.seed if self.task_seed is None else self.task_seed

    def as_dict(self) -> dict:
        """The config as JSON. An fp32 run leaves `precision` out: every record made before the precision
        policy (geofact.precision) was fp32, and keeps the key it was cached under; so does a run
        that is not read past its stop (`TrainConfig.read_past_stop`), keeps no tail (`keep_tail`), has no
        accuracy stop (`stop_accuracy`) or does not give up (`give_up`); one that does names the rule's version
        (`give_up_rule`) from version 2 on."""
        out = dataclasses.asdict(self)
        if out["precision"] == "fp32":
            del out["precision"]
        if out.get("read_past_stop") is False:
            del out["read_past_stop"]
        if out.get("give_up", 0) is None:
            del out["give_up"]
        if "give_up_rule" in out and ("give_up" not in out or out["give_up_rule"] == 1):
            del out["give_up_rule"]
        for pair in ("keep_tail", "stop_accuracy"):
            if pair in out:
                if out[pair] is None:
                    del out[pair]
                else:
                    out[pair] = list(out[pair])
        return out

    def key(self) -> str:
        """Stable id of the run: sha256 of its JSON (the cache file name)."""
        return record_key(self.as_dict())

    def _check_model_and_optimiser(self) -> None:
        """The fields both kinds of run have: entities, relations, model and optimiser."""
        need = partial(_need, self)
        need(_integer(self.N) and self.N >= 2, "N", "an integer >= 2")
        need(_integer(self.R) and 1 <= self.R <= self.N, "R", f"an integer in [1, N={self.N}]")
        need(_integer(self.d) and self.d >= 1, "d", "an integer >= 1")
        need(self.mlp_width is None or (_integer(self.mlp_width) and self.mlp_width >= 1), "mlp_width", "None or an integer >= 1")
        need(self.attention in ("uniform", "learned"), "attention", "'uniform' or 'learned'")
        need(self.lr > 0, "lr", "> 0")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(self.grad_clip > 0, "grad_clip", "> 0")
        need(_integer(self.max_steps) and self.max_steps >= 1, "max_steps", "an integer >= 1")
        need(self.loss_threshold >= 0, "loss_threshold", ">= 0")
        need(self.precision in PRECISIONS, "precision", f"one of {sorted(PRECISIONS)}")


@dataclass(frozen=True)
class TrainConfig(_Run):
    """One run: the task (N, R, task seed), the model (d, MLP width, options) and the optimiser.

    Defaults are Appendix B's single-hop recipe except `lr`: the paper's 1.0 is a config away
    (`lr=1.0`), and the exp-capacity page shows what it does here.
    """

    N: int = 4096  # entities (subjects = attributes)
    R: int = 8  # relations, one random bijection of [N] each
    d: int = 128  # embedding dimension
    mlp_width: int | None = None  # hidden width of the GELU MLP; None means 4 d
    frozen_embeddings: bool = False  # keep the input entity embeddings at their random init (Appendix D)
    attention: Attention = "uniform"  # "uniform": fixed average over the causal prefix; "learned": W_Q, W_K
    learned_positions: bool = False  # add a learned positional embedding
    lr: float = 1e-2
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    batch_size: int = 1024  # facts per step, drawn without replacement from all N R
    max_steps: int = 15_000
    loss_threshold: float = 1e-4  # early stop once the training loss is below this
    seed: int = 0  # initialisation and batch order
    task_seed: int | None = None  # the bijections; None means `seed`
    precision: str = "fp32"  # how the step's matmuls are computed (geofact.precision.PRECISIONS)
    # Train on to max_steps after the stop rule, to read the run at three points (issue 46, item 4): its
    # record and weights stay those at the stop, and it keeps the best state before any loss spike and
    # the state at max_steps besides (geofact.training.trainer, `RunResult.past_stop`)
    read_past_stop: bool = False
    # (every, count): keep the states at the last `count` multiples of `every` steps before the run's stop
    # besides `checkpoints` (issue 46, item 1), so that the mechanism is read at the end of training, where a
    # loss spike shows (`tail_steps`); the loss curve then has a point every 10 steps. None keeps none
    keep_tail: tuple[int, int] | None = None
    # (level, every): stop, too, at the first multiple of `every` steps where the run answers at least a
    # fraction `level` of its facts by argmax (its weights and record those before that step's update). A
    # d_min trial is decided once it crosses its level (Section 5.1: "the smallest embedding dimension at
    # which trained accuracy crosses 0.95"; issue 47, item 4). None: the loss rule alone
    stop_accuracy: tuple[float, int] | None = None
    # With stop_accuracy: stop, too, at a check where the run is hopeless (`gives_up`), which fails it there (issue
    # 47, item 4: "one stopped as hopeless only by a rule that cannot change which d passes"). The value is the
    # rule's safety factor f >= 1; None: a run that never crosses trains on to its loss rule or its budget
    give_up: float | None = None
    give_up_rule: int = GIVE_UP_RULE  # the version of the rule (GIVE_UP_RULE): a run under another is another run

    schema: ClassVar[str] = "geofact.training.run/1"
    seq_len: ClassVar[int] = 2  # (s, r); the answer is predicted at r

    def __post_init__(self) -> None:
        self._check_model_and_optimiser()
        need = partial(_need, self)
        need(self.N * self.R <= MAX_FACTS, "R", f"such that N R <= {MAX_FACTS}")
        need(_integer(self.batch_size) and 1 <= self.batch_size <= self.N * self.R, "batch_size",
             f"an integer in [1, N R = {self.N * self.R}] (batches are drawn without replacement)")
        need(isinstance(self.read_past_stop, bool), "read_past_stop", "True or False")
        if self.keep_tail is not None:  # a record's JSON holds a list
            need(isinstance(self.keep_tail, (tuple, list)) and len(self.keep_tail) == 2
                 and all(_integer(x) and x >= 1 for x in self.keep_tail), "keep_tail", "None or (every, count), integers >= 1")
            object.__setattr__(self, "keep_tail", tuple(self.keep_tail))
        if self.stop_accuracy is not None:
            need(isinstance(self.stop_accuracy, (tuple, list)) and len(self.stop_accuracy) == 2
                 and isinstance(self.stop_accuracy[0], (int, float)) and not isinstance(self.stop_accuracy[0], bool)
                 and 0 < self.stop_accuracy[0] <= 1 and _integer(self.stop_accuracy[1]) and self.stop_accuracy[1] >= 1,
                 "stop_accuracy", "None or (level, every): a level in (0, 1] and an integer every >= 1")
            need(not self.read_past_stop, "stop_accuracy", "None for a run read past its stop (read_past_stop)")
            object.__setattr__(self, "stop_accuracy", (float(self.stop_accuracy[0]), self.stop_accuracy[1]))
        if self.give_up is not None:
            need(isinstance(self.give_up, (int, float)) and not isinstance(self.give_up, bool) and 1 <= self.give_up < math.inf,
                 "give_up", "None or a safety factor f >= 1 (finite)")
            need(self.stop_accuracy is not None, "give_up", "None for a run without an accuracy stop (stop_accuracy)")
            object.__setattr__(self, "give_up", float(self.give_up))
        need(self.give_up_rule == GIVE_UP_RULE, "give_up_rule", f"{GIVE_UP_RULE}, the rule this code implements (gives_up)")

    def gives_up(self, tops: Sequence[int], margin: float = GIVE_UP_MARGIN, start: int | None = None) -> bool:
        """The hopeless rule of `give_up` at an accuracy check, for a run whose best counts of facts answered so
        far, at its checks 1, 2, ..., j (the running maximum, so a dip is no evidence), are `tops`: from the middle
        of its budget on (check `give_up_from`), the best has grown more slowly over the second half of the checks
        so far (from check h = j // 2 to j) than over the first (from check 1 to h), and gaining f times that recent
        rate at every check left, it would still answer fewer facts than its level by `max_steps`, by more than
        `margin` sqrt(n) of its n facts (GIVE_UP_MARGIN). `start` (at least 4) replaces the first check the rule
        reads (`give_up_from`): bench/bench_give_up.py replays other factors, margins and starts.

        A run whose best grows ever more slowly gains no more than that with f = 1, so such a run cannot be one
        that would have crossed; f > 1 is the margin for a curve that is not quite so (none for a run whose best
        has not moved since check h: the projection is then its best, whatever f), and sqrt(n) the margin for
        counts that move in jumps (a few facts' answers flipping together: at the smoke profile's 16 facts, runs
        that had sat still for three checks crossed later). A run that has not slowed down (one still at its first
        check's count included, which may yet take off) is never called hopeless. Nor is a run in the first half
        of its budget: at the laptop profile, trials at N = 512 with learned embeddings learned a tenth of their
        facts by the first check, slowed down over the next three, then sped up and crossed at 3,750 of 4,000 steps
        (a curve in two phases, not concave), and a rule read from the fourth check on failed four such trials at
        f = 2 (five without the margin; `bench/bench_give_up.py --starts 4 0`). The device applies the same rule to
        a stack (geofact.training.trainer.StopRuleStep.stop_on_accuracy)."""
        j = len(tops)
        if self.give_up is None or j < max(4, self.give_up_from if start is None else start):
            return False
        level = self.stop_accuracy[0]
        n, h = self.N * self.R, j // 2
        recent, early = tops[-1] - tops[h - 1], tops[h - 1] - tops[0]  # gains over j - h and h - 1 checks
        reach = tops[-1] + self.give_up_scale(j) * recent + margin * math.sqrt(n)
        return recent * (h - 1) < early * (j - h) and reach < facts_for(level, n)

    @property
    def give_up_from(self) -> int:
        """The first check at which `gives_up` may call a run hopeless: the middle of its budget, and the fourth at
        the earliest (two halves of at least two checks' gains)."""
        return max(4, math.ceil(self.max_steps // self.stop_accuracy[1] / 2))

    def give_up_scale(self, j: int) -> float:
        """At check j, what multiplies the best's recent gain (over checks j // 2 to j) in the projection of
        `gives_up`: f times the checks left over the checks it was gained in (one float, host and device alike)."""
        every = self.stop_accuracy[1]
        return self.give_up * ((self.max_steps - j * every) / every) / (j - j // 2)

    def tail_steps(self, steps: int) -> tuple[int, ...]:
        """The steps whose states `keep_tail` keeps for a run that took `steps` steps (its stop, or
        max_steps): the last `count` multiples of `every` below it, increasing (none without keep_tail). The
        state at the stop itself is the run's final one, so the tail stops short of it."""
        if self.keep_tail is None or steps < 1:
            return ()
        every, count = self.keep_tail
        last = (min(steps, self.max_steps) - 1) // every * every
        return tuple(t for t in range(last - (count - 1) * every, last + 1, every) if t >= 0)

    @property
    def step_logits(self) -> int:
        return self.batch_size * self.N


MAX_QUERY_SPACE = 2**62  # query ids s_0 R^k + word must fit in int64
MAX_POOL = 2**22  # training queries held in memory as a fixed pool


@dataclass(frozen=True)
class MultiHopConfig(_Run):
    """One multi-hop run (Appendix C, `app::exp-multihop`): k-hop queries, with or without chain-of-thought.

    The model is the single-hop one with a learned attention head and learned positional embeddings;
    defaults are the appendix's recipe. How queries are drawn is not in the paper; here it is two
    choices (geofact.training.hop_queries):

    * `train_queries=None`: every batch is drawn fresh, uniformly from all N R^k queries; an integer:
      a fixed pool of that many distinct queries (at most N R^k), batches drawn from the pool.
    * `eval_seen=True`: eval queries come from the training distribution (the pool, or the whole
      space when there is no pool, where each has some chance of having been a training query);
      False: eval queries are never trained on (drawn outside the pool, or removed from the fresh
      batches). At k = 1 a held-out query is a fact never seen, so it can only be guessed.

    Eval uses `min(eval_queries, available)` queries; the record states how many.
    """

    N: int = 2048  # entities
    R: int = 4  # relations
    k: int = 2  # hops
    d: int = 256
    cot: bool = True  # train on the whole path s_1..s_k (teacher-forced) and generate it at eval
    frozen_embeddings: bool = False  # keep the input entity embeddings at their random init
    mlp_width: int | None = None  # None means 4 d
    attention: Attention = "learned"
    learned_positions: bool = True
    lr: float = 1e-2
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    batch_size: int = 1024  # queries per step
    max_steps: int = 15_000
    loss_threshold: float = 1e-4  # stop when the training loss is below this at `patience` checks in a row
    target_accuracy: float = 0.999  # stop when the eval accuracy reaches this at a check
    check_every: int = 100  # steps between checks (eval accuracy and training loss)
    patience: int = 3
    train_queries: int | None = None  # None: fresh queries every step; else a fixed pool of this many
    eval_queries: int = 4096
    eval_seen: bool = True
    seed: int = 0  # initialisation, query draws
    task_seed: int | None = None  # the bijections; None means `seed`
    precision: str = "fp32"  # how the step's matmuls are computed (geofact.precision.PRECISIONS)

    schema: ClassVar[str] = "geofact.training.multihop/1"  # the records' name from before the modules were renamed

    def __post_init__(self) -> None:
        self._check_model_and_optimiser()
        need = partial(_need, self)
        need(_integer(self.k) and self.k >= 1, "k", "an integer >= 1")
        need(self.n_queries <= MAX_QUERY_SPACE, "k", "such that N R^k <= 2^62 (query ids are int64)")
        need(isinstance(self.cot, bool), "cot", "True or False")
        need(_integer(self.batch_size) and self.batch_size >= 1, "batch_size", "an integer >= 1")
        need(0 < self.target_accuracy <= 1, "target_accuracy", "in (0, 1]")
        need(_integer(self.check_every) and self.check_every >= 1, "check_every", "an integer >= 1")
        need(_integer(self.patience) and self.patience >= 1, "patience", "an integer >= 1")
        need(self.train_queries is None or (_integer(self.train_queries) and 1 <= self.train_queries <= MAX_POOL),
             "train_queries", f"None (fresh queries every step) or an integer in [1, {MAX_POOL}] (a pool is held in memory)")
        need(_integer(self.eval_queries) and self.eval_queries >= 1, "eval_queries", "an integer >= 1")
        if not self.eval_seen:
            need(self.train_queries is None or self.train_queries < self.n_queries, "train_queries",
                 f"below N R^k = {self.n_queries} when eval_seen=False (a pool of every query leaves none held out)")

    @property
    def n_queries(self) -> int:
        return self.N * self.R**self.k

    @property
    def seq_len(self) -> int:
        """s_0 r_1 .. r_k, then with CoT the emitted s_1 .. s_{k-1} read back."""
        return 2 * self.k if self.cot else self.k + 1

    @property
    def n_targets(self) -> int:
        """Positions with a loss: the k hops with CoT, the answer alone without."""
        return self.k if self.cot else 1

    @property
    def step_logits(self) -> int:
        return self.batch_size * self.n_targets * self.N

