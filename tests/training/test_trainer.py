import pytest
import torch

from geofact.training.config import TrainConfig
from geofact.training.model import forward, head, hidden, init_params
from geofact.training.plain_loop import SingleRunModel, train_single
from geofact.training.trainer import copy_rows_, train_group

BASE = dict(N=48, d=12, batch_size=64, max_steps=40)


def mixed_runs(**over):
    """Seeds, R (padded when stacked), frozen/trainable and learning rates in one group."""
    kw = {**BASE, **over}
    return [
        TrainConfig(R=2, seed=0, lr=3e-2, **kw),
        TrainConfig(R=3, seed=1, lr=3e-2, frozen_embeddings=True, **kw),
        TrainConfig(R=2, seed=2, lr=1e-2, task_seed=7, **kw),
    ]


@pytest.mark.parametrize("attention,positions", [("uniform", False), ("learned", True)])
def test_stacked_training_equals_training_each_run_alone(attention, positions):
    configs = mixed_runs(attention=attention, learned_positions=positions)
    stacked = train_group(configs, dtype=torch.float64)
    for config, result in zip(configs, stacked):
        model, steps, loss = train_single(config, dtype=torch.float64)
        assert result.steps == steps and result.final_loss == pytest.approx(loss, rel=1e-10)
        for name, value in result.params.items():
            # float64 rounding of two output layers (torch's softmax kernel, autograd's log-softmax), grown
            # by 40 AdamW steps at lr 3e-2 to a few 1e-9 of a weight; a wrong gradient is off by percents
            torch.testing.assert_close(value, getattr(model, name).detach(), rtol=1e-8, atol=1e-10)


def test_frozen_embeddings_stay_at_their_initialisation_and_others_move():
    frozen, free = train_group([TrainConfig(R=2, seed=0, frozen_embeddings=True, lr=1e-2, **BASE),
                                TrainConfig(R=2, seed=0, lr=1e-2, **BASE)])
    assert not torch.equal(frozen.params["E_ent"], free.params["E_ent"])
    from geofact.training.model import init_params

    assert torch.equal(frozen.params["E_ent"], init_params(frozen.config)["E_ent"])
    assert not torch.equal(frozen.params["E_out"], init_params(frozen.config)["E_out"])


def test_early_stopping_is_per_run_and_matches_the_plain_loop():
    easy = TrainConfig(N=16, R=1, d=16, batch_size=16, max_steps=400, lr=5e-2, loss_threshold=0.05, seed=0)
    hard = TrainConfig(N=16, R=1, d=16, batch_size=16, max_steps=400, lr=1e-4, loss_threshold=0.05, seed=1)
    r_easy, r_hard = train_group([easy, hard], dtype=torch.float64)
    assert r_easy.stopped_early and not r_hard.stopped_early and r_hard.steps == 400
    assert r_easy.steps == train_single(easy, dtype=torch.float64)[1]
    assert r_easy.accuracy == 1.0
    # the stopped run left the stack; the one that trained on is still the plain loop's run
    model, steps, loss = train_single(hard, dtype=torch.float64)
    assert r_hard.final_loss == pytest.approx(loss, rel=1e-10)
    for name, value in r_hard.params.items():
        torch.testing.assert_close(value, getattr(model, name).detach(), rtol=1e-9, atol=1e-11)


def test_groups_must_share_shapes():
    with pytest.raises(ValueError, match="shape_key"):
        train_group([TrainConfig(d=8, **{k: v for k, v in BASE.items() if k != "d"}), TrainConfig(**BASE)])


def test_hidden_then_head_is_the_forward_and_matches_the_reference_module():
    for attention in ("uniform", "learned"):
        c = TrainConfig(N=16, R=3, d=8, batch_size=8, attention=attention, learned_positions=attention == "learned")
        p = {k: v[None] for k, v in init_params(c, dtype=torch.float64).items()}
        tokens = torch.stack([torch.arange(16), 16 + torch.arange(16) % 3], 1)  # (16, 2)
        h = hidden(p, tokens[None])
        assert h.shape == (1, 16, 8)
        torch.testing.assert_close(head(p, h), forward(p, tokens[None]))
        torch.testing.assert_close(forward(p, tokens[None])[0], SingleRunModel(c, dtype=torch.float64)(tokens))


def test_init_and_train_only_retrain_just_the_named_tensors():
    c = TrainConfig(N=32, R=2, d=8, batch_size=16, max_steps=30, loss_threshold=0.0)
    trained = train_group([c])[0].params
    retrain = TrainConfig(N=32, R=2, d=8, batch_size=16, max_steps=30, loss_threshold=0.0, task_seed=7)
    new_embeddings = torch.randn(32, 8) * 0.02
    out = train_group([retrain], init=[{**trained, "E_ent": new_embeddings}], train_only=("E_ent",))[0].params
    for k, v in trained.items():
        if k == "E_ent":
            assert not torch.equal(out[k], new_embeddings)
        else:
            assert torch.equal(out[k], v), k
    with pytest.raises(ValueError, match="train_only must name"):
        train_group([retrain], train_only=("nope",))
    with pytest.raises(ValueError, match=r"init\['E_ent'\] must have shape"):
        train_group([retrain], init=[{"E_ent": torch.zeros(3, 3)}])


def test_accuracy_curve_starts_before_training_and_ends_at_the_final_accuracy():
    early = TrainConfig(N=16, R=1, d=16, batch_size=16, max_steps=400, lr=3e-2, loss_threshold=0.5)
    full = TrainConfig(N=16, R=1, d=16, batch_size=16, max_steps=25, lr=3e-2, loss_threshold=0.0, seed=1)
    for c, result in zip([early, full], [train_group([early], eval_every=10)[0], train_group([full], eval_every=10)[0]]):
        steps = [s for s, _ in result.accuracy_curve]
        assert steps[0] == 0 and steps == sorted(set(steps)), steps
        assert steps[-1] == result.steps and result.accuracy_curve[-1][1] == result.accuracy
        assert all(s % 10 == 0 for s in steps[:-1])
    assert result.steps == 25 and steps == [0, 10, 20, 25]
    assert train_group([early], eval_every=10)[0].stopped_early  # the early stop still fires
    assert train_group([full])[0].accuracy_curve == []
    with pytest.raises(ValueError, match="eval_every must be an integer >= 1"):
        train_group([full], eval_every=0)


def test_a_checkpoint_is_the_state_of_the_same_run_at_that_step():
    """Weights kept at step t of a long run equal the final weights of the same run trained for t steps."""
    long = TrainConfig(R=2, seed=3, lr=3e-2, **{**BASE, "max_steps": 30})
    (result,) = train_group([long], dtype=torch.float64, checkpoints=(0, 10, 20))
    assert sorted(result.checkpoints) == [0, 10, 20] and sorted(result.checkpoint_losses) == [0, 10, 20]
    for t in (10, 20):
        (short,) = train_group([TrainConfig(R=2, seed=3, lr=3e-2, **{**BASE, "max_steps": t})], dtype=torch.float64)
        for name, value in short.params.items():
            torch.testing.assert_close(result.checkpoints[t][name], value, rtol=1e-12, atol=1e-14)
    assert torch.equal(result.checkpoints[0]["E_ent"], init_params(long, dtype=torch.float64)["E_ent"])
    assert result.checkpoint_losses[0] == result.loss_curve[0][1]  # both are the loss of step 0's batch


def test_checkpoints_stop_with_the_run_and_reject_steps_outside_it():
    easy = TrainConfig(N=16, R=1, d=16, batch_size=16, max_steps=400, lr=5e-2, loss_threshold=0.05, seed=0)
    (r,) = train_group([easy], dtype=torch.float64, checkpoints=(0, 399))
    assert r.stopped_early and sorted(r.checkpoints) == [0]  # stopped before step 399: its last state is the final one
    with pytest.raises(ValueError, match=r"checkpoints must be integer steps in \[0, max_steps=400\)"):
        train_group([easy], checkpoints=(400,))


def test_the_block_length_changes_when_the_host_reads_not_the_results():
    """Runs stop inside blocks (masked until the block ends), checkpoints and accuracy checks fall
    inside and on block edges: every block length gives the results of stopping each run at once. In
    float64, since a stack that keeps a stopped run to the block's end is another batch size for the
    BLAS, which may round differently (within 1e-9 here, far from moving a stop at loss 0.05)."""
    configs = [TrainConfig(N=16, R=1, d=16, batch_size=16, max_steps=120, lr=lr, loss_threshold=0.05, seed=s)
               for s, lr in enumerate([5e-2, 1e-4, 3e-2])]
    runs = {k: train_group(configs, block_steps=k, eval_every=9, checkpoints=(0, 7, 40, 64), dtype=torch.float64)
            for k in (1, 7, 64)}
    assert runs[1][0].stopped_early and not runs[1][1].stopped_early  # the case the test is about
    for k in (7, 64):
        for a, b in zip(runs[1], runs[k]):
            assert (a.steps, a.accuracy, a.accuracy_curve) == (b.steps, b.accuracy, b.accuracy_curve)
            assert a.final_loss == pytest.approx(b.final_loss, rel=1e-9)
            assert [t for t, _ in a.loss_curve] == [t for t, _ in b.loss_curve]
            assert [x for _, x in a.loss_curve] == pytest.approx([x for _, x in b.loss_curve], rel=1e-9)
            assert a.checkpoint_losses.keys() == b.checkpoint_losses.keys()
            assert list(a.checkpoint_losses.values()) == pytest.approx(list(b.checkpoint_losses.values()), rel=1e-9)
            for name in a.params:
                torch.testing.assert_close(a.params[name], b.params[name], rtol=1e-9, atol=1e-11)
            assert a.checkpoints.keys() == b.checkpoints.keys()
            for t in a.checkpoints:
                for name in a.params:
                    torch.testing.assert_close(a.checkpoints[t][name], b.checkpoints[t][name], rtol=1e-9, atol=1e-11)
    with pytest.raises(ValueError, match="block_steps must be an integer >= 1"):
        train_group(configs, block_steps=0)


# Runs that stop at different steps (on this project's CPU one after a spike, its best state before the
# spike long before its stop) and runs that never stop (geofact.training.trainer, issue 46 item 4)
PAST = [TrainConfig(N=16, R=2, d=32, lr=1e-2, batch_size=32, max_steps=3000, seed=s, frozen_embeddings=f)
        for s in (0, 1) for f in (False, True)]


def test_a_run_read_past_its_stop_keeps_the_stop_results_and_finds_the_best_state_before_any_spike():
    from dataclasses import replace

    from geofact.spikes import FirstSpikeWatch, SpikeRule

    plain = train_group(PAST, log_every=1, checkpoints=(0, 100))
    past = train_group([replace(c, read_past_stop=True) for c in PAST], log_every=1, checkpoints=(0, 100))
    assert any(r.stopped_early for r in plain)  # (the others run to the budget; which ones is the CPU's rounding)
    for a, b in zip(plain, past):
        # the record and weights at the stop are those of a run that stopped there
        assert (a.steps, a.loss_curve, a.accuracy, a.final_loss) == (b.steps, b.loss_curve, b.accuracy, b.final_loss)
        assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)
        assert a.past_stop is None and set(b.record()["past_stop"]) >= {"points", "best_loss", "accuracy", "loss_curve"}
        points = b.past_stop["points"]
        assert points["stop"] == (b.steps if b.stopped_early else None) and points["last"] == 3000
        # the device-side watch finds the points the host-side one finds on the every-step curve
        watch = FirstSpikeWatch(SpikeRule(), PAST[0].loss_threshold)
        for step, loss in b.loss_curve + b.past_stop["loss_curve"]:
            watch.see(step, loss)
        assert points["best"] == watch.points["best"] and b.past_stop["best_loss"] == pytest.approx(watch.best_loss, rel=1e-6)
        assert [t for t, _ in b.past_stop["loss_curve"]] == list(range(b.steps + 1, 3000)) if b.stopped_early else True
        if not b.stopped_early:  # a run that never stopped ends where its last state is
            assert all(torch.equal(b.params[k], b.past_weights["last"][k]) for k in b.params)


def test_the_best_state_read_past_the_stop_is_the_state_of_the_same_run_at_that_step():
    from dataclasses import replace

    (run,) = train_group([replace(PAST[3], read_past_stop=True)], log_every=1)
    best = run.past_stop["points"]["best"]
    (again,) = train_group([replace(PAST[3], read_past_stop=True)], checkpoints=(best,))
    assert all(torch.equal(again.checkpoints[best][k], run.past_weights["best"][k]) for k in run.past_weights["best"])


def test_a_run_read_past_its_stop_logs_its_loss_ten_times_as_often():
    from dataclasses import replace

    (plain,) = train_group([replace(PAST[0], max_steps=250)])
    (past,) = train_group([replace(PAST[0], max_steps=250, read_past_stop=True)])
    assert [t for t, _ in plain.loss_curve] == [0, 100, 200]
    assert [t for t, _ in past.loss_curve] == list(range(0, 250, 10))


def test_a_run_keeping_a_tail_holds_the_states_of_the_same_run_at_its_last_steps_before_its_stop():
    from dataclasses import replace

    runs = [replace(c, keep_tail=(30, 3)) for c in PAST]
    tailed = train_group(runs, checkpoints=(0, 100))
    plain = train_group(PAST, checkpoints=(0, 100))
    assert any(r.stopped_early for r in tailed) and any(r.steps > 120 for r in tailed)
    for a, b in zip(plain, tailed):
        assert (a.steps, a.accuracy) == (b.steps, b.accuracy)  # keeping states changes nothing of the run
        tail = b.config.tail_steps(b.steps)
        assert len(tail) == min(3, (b.steps - 1) // 30 + 1) and all(t % 30 == 0 and t < b.steps for t in tail)
        assert tail[-1] + 30 >= b.steps  # the last multiple of 30 below the stop
        assert set(b.checkpoints) == {t for t in (0, 100) if t <= b.steps} | set(tail)
        assert [t for t, _ in b.loss_curve] == list(range(0, min(b.steps, 2999) + 1, 10))  # a curve every 10 steps
        again = train_group([replace(PAST[PAST.index(a.config)], max_steps=3000)], checkpoints=tail)[0]
        for t in tail:  # the very states of the run that goes on to its stop
            assert all(torch.equal(again.checkpoints[t][k], b.checkpoints[t][k]) for k in b.checkpoints[t])
            assert again.checkpoint_losses[t] == b.checkpoint_losses[t]


def test_a_run_with_an_accuracy_stop_stops_at_its_first_check_at_the_level_as_the_same_run_read_there():
    """`stop_accuracy=(level, every)` ends a run at the first multiple of `every` (after step 0) where it
    answers `level` of its facts: the same weights, loss curve and accuracy as the run without that stop
    read at that step; a run that never gets there goes on to its loss rule or budget, unchanged."""
    from dataclasses import replace

    from geofact.training.config import facts_for

    plain = [TrainConfig(N=16, R=2, d=16, lr=lr, batch_size=16, max_steps=300, seed=s) for lr, s in ((1e-2, 0), (1e-2, 1), (1e-4, 2))]
    runs = {r.config.seed: r for r in train_group(plain, eval_every=20, dtype=torch.float64)}
    decided = train_group([replace(c, stop_accuracy=(0.9, 20)) for c in plain], dtype=torch.float64)
    crossed = 0
    for r in decided:
        full = runs[r.config.seed]
        first = next((t for t, a in full.accuracy_curve if 0 < t < full.steps and a >= 0.9), None)
        if first is None:  # never reached the level at a check: the run is the plain one
            assert (r.steps, r.accuracy, r.final_loss) == (full.steps, full.accuracy, full.final_loss)
            continue
        crossed += 1
        model, steps, loss = train_single(r.config, dtype=torch.float64)  # the reference loop stops there too
        assert steps == first and r.final_loss == pytest.approx(loss, rel=1e-10)
        assert r.steps == first and r.stopped_early and r.accuracy == dict(full.accuracy_curve)[first] >= 0.9
        assert r.loss_curve == [(t, x) for t, x in full.loss_curve if t <= first]
        (read,) = train_group([replace(full.config, max_steps=first)], dtype=torch.float64)  # the state before that step's update
        assert all(torch.equal(r.params[k], read.params[k]) for k in r.params)
    assert 0 < crossed < len(decided)  # both cases of the test
    assert [facts_for(0.95, n) for n in (20, 21, 4096)] == [19, 20, 3892] and facts_for(1.0, 7) == 7
    with pytest.raises(ValueError, match="stop_accuracy must be None or"):
        replace(plain[0], stop_accuracy=(1.5, 20))
    with pytest.raises(ValueError, match="stop_accuracy must be None for a run read past its stop"):
        replace(plain[0], stop_accuracy=(0.9, 20), read_past_stop=True)


def test_a_run_that_gives_up_stops_at_the_first_check_where_its_rule_calls_it_hopeless():
    """`give_up=f` (with `stop_accuracy`) also ends a run at the first check where `TrainConfig.gives_up`, read
    on the same run's best counts so far, calls it hopeless: there, as the run without the rule read at that
    step, and failing; a run that crosses first is decided as before, and one the rule never fires on is the
    run without it. The device's rule is checked against the host's (`gives_up`) on each run's own curve."""
    from dataclasses import replace

    from geofact.training.config import facts_for

    # 256 facts each, at level 0.4 (103 facts): lr 3e-2 crosses at a check (260); 1e-2 speeds up and crosses only at its
    # end (400); 3e-3 slows down and gives up; 1e-5 never moves from its first count
    plain = [TrainConfig(N=64, R=4, d=8, lr=lr, batch_size=64, max_steps=400, seed=s)
             for lr, s in ((3e-2, 0), (1e-2, 1), (3e-3, 2), (1e-5, 3))]
    runs = {r.config.seed: r for r in train_group(plain, eval_every=20, dtype=torch.float64)}
    ruled = train_group([replace(c, stop_accuracy=(0.4, 20), give_up=2.0) for c in plain], dtype=torch.float64)
    outcomes = []
    for r in ruled:
        full, n = runs[r.config.seed], 256
        checks = [(t, round(a * n)) for t, a in full.accuracy_curve if 0 < t < full.steps]
        tops = [max(c for _, c in checks[: j + 1]) for j in range(len(checks))]
        crossed = next((t for t, c in checks if c >= facts_for(0.4, n)), None)
        hopeless = next((t for j, (t, _) in enumerate(checks) if r.config.gives_up(tops[: j + 1])), None)
        assert r.record()["accuracy_curve"] == [(t, c / n) for t, c in checks if t <= r.steps]
        if hopeless is not None and (crossed is None or hopeless < crossed):
            outcomes.append("gave up")
            assert r.steps == hopeless and r.gave_up and r.record()["gave_up"] and r.stopped_early
            assert r.accuracy == dict(full.accuracy_curve)[hopeless] < 0.4
            (read,) = train_group([replace(full.config, max_steps=hopeless)], dtype=torch.float64)
            assert all(torch.equal(r.params[k], read.params[k]) for k in r.params)
            assert train_single(r.config, dtype=torch.float64)[1] == hopeless  # the reference loop's rule too
        else:
            outcomes.append("crossed" if crossed is not None else "unchanged")
            assert not r.gave_up and r.steps == (crossed if crossed is not None else full.steps)
    assert outcomes == ["crossed", "unchanged", "gave up", "unchanged"], outcomes  # every case of the test
    # with a huge factor none of these runs (each still gaining when checked) gives up: the runs of the accuracy stop alone
    lenient = train_group([replace(c, stop_accuracy=(0.4, 20), give_up=1e9) for c in plain], dtype=torch.float64)
    alone = train_group([replace(c, stop_accuracy=(0.4, 20)) for c in plain], dtype=torch.float64)
    assert [(r.steps, r.accuracy) for r in lenient] == [(r.steps, r.accuracy) for r in alone]
    assert not any(r.gave_up for r in lenient) and "gave_up" not in alone[0].record()


def test_the_device_rule_of_give_up_is_the_hosts_on_random_count_curves():
    """`StopRuleStep.stop_on_accuracy` against `TrainConfig.gives_up` (as the plain loop applies it) on made-up counts:
    stacks of runs with different R (so different n), budgets that are or are not a multiple of `every`, several f
    and levels, runs leaving the stack between blocks of random length. Every run stops at the same check, for the
    same reason."""
    import random

    from geofact.training.trainer import FactGroup

    def host(config: TrainConfig, counts: list[int]) -> tuple[int | None, bool]:
        tops = []
        for j, c in enumerate(counts, 1):
            tops.append(max(tops[-1], c) if tops else c)
            if c / (config.N * config.R) >= config.stop_accuracy[0]:
                return j, False
            if config.gives_up(tops):
                return j, True
        return None, False

    def curve(n: int, checks: int) -> list[int]:  # stalling, slowing down, or noisy
        kind, x, out = rng.random(), rng.randint(0, n // 3), []
        for j in range(checks):
            x += (rng.choice([0, 0, 0, 1, 2, 5]) if kind < 0.3 else max(0, int(rng.gauss(n / (checks * (j + 1)), 2)))
                  if kind < 0.6 else rng.randint(-3, 6))
            out.append(max(0, min(n, x)))
        return out

    rng, outcomes = random.Random(0), []
    for _ in range(150):
        every = rng.randint(1, 7)
        max_steps = every * rng.randint(5, 30) + rng.choice([0, 0, rng.randint(1, every)])
        level, f, N = rng.choice([0.4, 0.5, 0.9, 0.95]), rng.choice([1.0, 1.5, 2.0, 3.0]), rng.choice([8, 16])
        configs = [TrainConfig(N=N, R=rng.randint(1, N), d=4, batch_size=8, max_steps=max_steps, seed=s,
                               stop_accuracy=(level, every), give_up=f) for s in range(rng.randint(1, 6))]
        group = FactGroup(configs, torch.device("cpu"), torch.float64, None, None)
        counts = [curve(c.N * c.R, (max_steps - 1) // every) for c in configs]
        got, block = [(None, False)] * len(configs), rng.randint(1, 3 * every)
        for start in range(0, max_steps, block):
            step_once = group.step
            step_once.start_block()
            for step in range(start, min(start + block, max_steps)):
                if step > 0 and step % every == 0:
                    step_once.stop_on_accuracy(step, torch.tensor([counts[m][step // every - 1] for m in group.alive]))
            stop_at, gave_up = step_once.stop_at.tolist(), step_once.gave_up.tolist()
            stopped = [i for i, t in enumerate(stop_at) if t < max_steps]
            for i in stopped:
                got[group.alive[i]] = (stop_at[i] // every, gave_up[i])
            if len(stopped) == len(group.alive):
                break
            if stopped:
                group.keep([i for i in range(len(group.alive)) if i not in stopped])
        want = [host(c, cs) for c, cs in zip(configs, counts)]
        assert got == want, (configs[0].stop_accuracy, f, max_steps, counts, got, want)
        outcomes += want
    assert 100 < sum(gave for _, gave in outcomes) < len(outcomes) - 100  # many runs give up, many do not


@pytest.mark.parametrize("picked", [[], [0], [1, 3], [0, 1, 2, 3]])
def test_copy_rows_is_torch_where_bit_for_bit(picked):
    """The CPU's row copy of the stop rule keeps exactly what `torch.where` keeps, NaN and inf rows included."""
    generator = torch.Generator().manual_seed(0)
    source = torch.randn(4, 7, generator=generator)
    source[1, 2], source[3, 0] = float("nan"), float("inf")
    into = torch.randn(4, 7, generator=generator)
    rows = torch.zeros(4, dtype=torch.bool)
    rows[picked] = True
    expected = torch.where(rows[:, None], source, into)
    copy_rows_(rows, source, into)
    assert torch.equal(into.view(torch.int32), expected.view(torch.int32))
    assert (into[~rows] != source[~rows]).any() or not (~rows).any()


def test_a_stack_stepping_each_run_apart_freezes_a_run_at_its_stop_as_the_copy_of_its_weights_does(monkeypatch):
    from geofact.training import optim

    # unclipped (the GPU's way reads the clipping's divisor in float32): the two ways then step bit for bit alike
    configs = [TrainConfig(N=16, R=2, d=16, batch_size=16, max_steps=300, lr=lr, loss_threshold=0.05, seed=s,
                           frozen_embeddings=s == 1, grad_clip=1e9) for s, lr in enumerate((5e-2, 3e-2, 1e-4))]
    together = train_group(configs, dtype=torch.float64, block_steps=64)
    monkeypatch.setattr(optim, "PER_RUN_DEVICES", ("cpu",))  # the GPU's way, on the CPU
    monkeypatch.setattr(optim, "PER_RUN_MIN_PARAMS", 0)
    apart = train_group(configs, dtype=torch.float64, block_steps=64)
    assert [r.steps for r in apart] == [r.steps for r in together] and together[0].stopped_early
    assert 0 < together[0].steps < 300 and not together[2].stopped_early  # a run that stops, one that trains on
    for a, t in zip(apart, together):
        assert all(torch.equal(a.params[name], t.params[name]) for name in t.params)


def test_a_runs_record_names_the_step_that_trained_it():
    """The written-out steps and autograd round differently (bf16's by 3.15236 against 3.15300 after 2,000 steps of
    exp-capacity's check cell), so each run record says which trained it."""
    named = {}
    for precision in ("fp32", "bf16"):
        for attention in ("uniform", "learned"):
            config = TrainConfig(N=16, R=2, d=8, batch_size=16, max_steps=3, precision=precision, attention=attention)
            (result,) = train_group([config])
            named[precision, attention] = result.record()["step"]
    assert named == {("fp32", "uniform"): "geofact.training.step", ("fp32", "learned"): "geofact.training.step",
                     ("bf16", "uniform"): "geofact.training.step_bf16", ("bf16", "learned"): "autograd"}
