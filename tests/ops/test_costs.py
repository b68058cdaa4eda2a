"""geofact plan's cost model (geofact.ops.calibration, geofact.ops.costs): stacking, the fit of a calibration, the lease order."""

import dataclasses
import json
import math
import re

import numpy as np
import pytest

from geofact import fast_paths
from geofact.ops.calibration import H100_SPEC, Calibration, fit, group_timings
from geofact.ops.costs import LEASE_ORDER, Group, PagePlan, groups_of, lease_schedule, plan_errors, plan_pages
from geofact.training import step as step_module
from geofact.training.config import MultiHopConfig, TrainConfig


def test_runs_stack_by_shape_and_group_size_and_a_stack_takes_its_largest_R():
    configs = [TrainConfig(N=64, R=R, d=d, batch_size=32, seed=s) for d in (8, 16) for R in (2, 4) for s in range(3)]
    groups = groups_of("page", "grid", configs, lambda c: 4)
    assert sorted(g.runs for g in groups) == [2, 2, 4, 4]  # 6 runs per d, in stacks of at most 4
    assert {g.config.d for g in groups} == {8, 16} and all(g.config.R == max(c.R for c in g.configs) for g in groups)
    assert sum(g.runs for g in groups) == len(configs)


def test_a_calibration_is_recovered_from_timings_it_generated():
    truth = Calibration(device="cpu", matmul_flops={"fp32": 2e11}, bandwidth=3e10, op_seconds=6e-6, ops_per_step=100.0,
                        source="test")
    shapes = [(4096, 1024, d, 4) for d in (32, 128, 512)] + [(128, 128, d, 24) for d in (8, 32, 96)] + [(64, 64, 8, 1)]
    configs = [(TrainConfig(N=N, R=8, d=d, batch_size=B), runs) for N, B, d, runs in shapes]
    bench = {"device": "cpu", "threads": 2, "matmul_peak_flops": 3e11, "N": 4096, "R": 8, "batch_size": 1024,
             "rows": [{"d": c.d, "runs": runs, "stacked": runs / truth.step_seconds(c, runs)} for c, runs in configs[:3]]}
    fitted = fit(bench, 100.0, [(c, runs, truth.step_seconds(c, runs)) for c, runs in configs[3:]])
    assert fitted.matmul_flops["fp32"] == pytest.approx(2e11, rel=1e-6)
    assert fitted.bandwidth == pytest.approx(3e10, rel=1e-6) and fitted.op_seconds == pytest.approx(6e-6, rel=1e-6)


def test_trained_groups_are_timed_from_their_records_and_refit_without_the_benchmarks_short_rates():
    truth = Calibration(device="cuda", matmul_flops={"fp32": 3e13, "tf32": 3e13}, bandwidth=1e12, op_seconds=4e-6,
                        ops_per_step=90.0, source="test")
    records = []
    for d, runs, stopped in [(32, 42, 0), (128, 42, 0), (256, 20, 10), (512, 8, 0)]:
        configs = [TrainConfig(N=4096, R=2 + i % 7, d=d, batch_size=1024, max_steps=15000, seed=i, precision="tf32")
                   for i in range(runs)]
        steps = [7500 if i < stopped else 15000 for i in range(runs)]  # some runs left the stack half-way
        mean_runs = sum(steps) / 15000
        seconds = 15000 * truth.step_seconds(max(configs, key=lambda c: c.R), mean_runs)
        records += [{"schema": "geofact.training.run/1", "config": c.as_dict(), "steps": s, "group_seconds": seconds,
                     "group_size": runs, "provenance": {"device": "cuda (NVIDIA H100 80GB HBM3)"}} for c, s in zip(configs, steps)]
    short = TrainConfig(N=32, R=2, d=4, batch_size=32, max_steps=40, precision="tf32")  # a smoke group: mostly its capture
    records.append({"schema": "geofact.training.run/1", "config": short.as_dict(), "steps": 40, "group_seconds": 0.6,
                    "group_size": 1, "provenance": {"device": "cuda (NVIDIA H100 80GB HBM3)"}})
    records.append({**records[0], "provenance": {"device": "cpu (x86_64, 2 threads)"}})  # another device's
    groups = group_timings(records, "cuda")
    assert [(c.d, runs) for c, runs, _ in groups] == [(32, 42), (128, 42), (256, 15), (512, 8)]  # in order of d
    poisoned = {"device": "cuda", "threads": 16, "matmul_peak_flops": 5e13, "N": 4096, "R": 8, "batch_size": 1024,
                "rows": [{"d": 32, "runs": 4, "stacked": 4 / 7e-3}]}  # 7 ms a step: 20 steps with a capture in them
    fitted = fit(poisoned, 90.0, groups, precision="tf32", bench_rows=False)
    for c, runs, seconds in groups:
        assert fitted.step_seconds(c, runs) == pytest.approx(seconds, rel=1e-3)
    assert fit(poisoned, 90.0, groups, precision="tf32").step_seconds(groups[0][0], 42) != pytest.approx(groups[0][2], rel=1e-3)
    assert fitted.matmul_flops["fp32"] == min(fitted.matmul_flops["tf32"], poisoned["matmul_peak_flops"])  # analyses: float32
    assert fit({**poisoned, "matmul_peak_flops": 1e13}, 90.0, groups, precision="tf32", bench_rows=False).matmul_flops["fp32"] == 1e13
    with pytest.raises(ValueError, match="nothing to fit"):
        fit(poisoned, 90.0, [], bench_rows=False)
    # the plan's error per group and per card: none on the card it was fitted to, +50% on one 1.5x as fast
    other = [{**r, "group_seconds": r["group_seconds"] / 1.5, "provenance": {"device": "cuda (NVIDIA H200)"}}
             for r in records if r["provenance"]["device"].startswith("cuda")]
    lines = plan_errors(records + other, fitted, "cuda")
    summary = {line.strip().replace("-0%", "+0%") for line in lines}  # a fit exact to rounding may read -0%
    assert summary >= {"cuda (NVIDIA H100 80GB HBM3): 4 groups, worst error +0%", "cuda (NVIDIA H200): 4 groups, worst error +50%"}
    assert plan_errors(records, fitted, "mps") == ["plan check: no group trained on mps in the run cache"]


def test_precision_prices_the_matmuls_and_multihop_steps_cost_more_ops():
    c = TrainConfig(N=4096, R=8, d=512, batch_size=1024)
    assert H100_SPEC.step_seconds(dataclasses.replace(c, precision="tf32"), 8) < H100_SPEC.step_seconds(c, 8)
    hop = MultiHopConfig(N=64, R=2, k=2, d=8, batch_size=8)
    one = TrainConfig(N=64, R=2, d=8, batch_size=8)
    assert H100_SPEC.step_seconds(hop, 1) > H100_SPEC.step_seconds(one, 1)


def test_pages_are_planned_in_the_lease_order_and_packed_into_leases():
    params = {"exp-multihop": dict(N=32, d=8, k_values=[1, 2], R_values=[2], seeds=[0], lr=1e-2, batch_size=16,
                                   max_steps=100, check_every=10, train_queries=None, eval_queries=32, eval_seen=True,
                                   lr_values=[1e-2], lr_k=2, lr_R=2),
              "exp-capacity": dict(capacity_grid=dict(N=32, R_values=[1, 2], d_values=[4, 8], seeds=[0], lr=0.01,
                                                      batch_size=32, max_steps=40), lr_values=[0.01, 1.0], lr_R=2,
                                   lr_d=8, lr_seeds=[0], attention_R=[2], attention_d=[8], precision="fp32")}
    plans = plan_pages(params, H100_SPEC, lambda c: 64)
    assert [p.page for p in plans] == [p for p in LEASE_ORDER if p in params]
    capacity = plans[0]
    assert sum(g.runs for g in capacity.groups if g.what == "capacity grid") == 2 * 2 * 2  # regimes x R x d
    assert {g.what for g in capacity.groups if g.guess} == {"threshold cells under bf16"}
    hops = plans[1]
    assert sum(g.runs for g in hops.groups if g.what == "(k, R) grid") == 2 * 4 - 2  # k = 1 is CoT either way
    fake = [PagePlan(f"p{i}", [], [], H100_SPEC) for i in range(2)]
    object.__setattr__(fake[0], "groups", [Group("p0", "x", (TrainConfig(N=4096, R=8, d=512, batch_size=1024),) * 64)])
    schedule = lease_schedule(fake, minutes=1.0)
    assert schedule[0][2] == pytest.approx(fake[0].seconds / 60) and schedule[0][3] >= 1


def test_the_spike_study_at_the_second_n_is_priced_with_the_second_grid_and_its_states_read_by_each_page():
    grid = dict(N=32, R_values=[1, 2], d_values=[4, 8], seeds=[0], lr=0.01, batch_size=32, max_steps=40)
    second = dict(N=48, d_ladders=[{"R": 2, "d_values": [4, 8]}], seeds=[0], lr=0.01, batch_size=48, max_steps=40)
    spikes = dict(spike_R=1, spike_d=8, spike_seeds=[0, 1], spike_steps=40, spike_keep_every=10)
    params = {"exp-readout": dict(capacity_grid=grid, trajectory_grid=second, readout_check=None, cv_alphas=[1.0],
                                  cv_folds=2, held_out=0.2, spike_second={"R": 2, "d": 8, "seeds": [0, 1, 2]}, **spikes)}
    readout = plan_pages(params, H100_SPEC, lambda c: 64)[0]
    study = [g for g in readout.groups if g.what == "spike study at N = 48 (its kept recipes)"]
    assert sum(g.runs for g in study) == 3 * 3 and all(g.guess for g in study)  # three recipes x three seeds
    states = {a.what: a.states for a in readout.analyses if "spike study" in a.what}
    per_run = 40 // 10 + 6
    assert states == {"readouts of the spike study's states (N = 32)": 3 * 2 * per_run,
                      "readouts of the spike study's states (N = 48)": 3 * 3 * per_run,
                      # the first mechanism page computes their accuracies, which the others read
                      "accuracies of the spike study's states (N = 32)": 3 * 2 * per_run,
                      "accuracies of the spike study's states (N = 48)": 3 * 3 * per_run}
    params["exp-readout"]["spike_second"] = None
    assert not [g for g in plan_pages(params, H100_SPEC, lambda c: 64)[0].groups if "N = 48" in g.what]
    # the plan adds up every page's analyses (issue 47 bounds them as a whole)
    from geofact.ops.costs import format_plan

    assert f"the analyses of every page: {readout.analysis_seconds / 60:.2f} min (arithmetic" in format_plan([readout], H100_SPEC)


def test_d_min_trials_decided_at_their_crossing_are_priced_below_their_budget_with_their_checks():
    from geofact.ops.costs import DECIDED_PASS_FRACTION, DECIDED_STEP_FRACTION, expected_steps

    scaling = dict(N_values=[128, 256], R=8, widths=[64], budgets=["fixed steps"], epoch_widths=[], seeds=[0],
                   lr=1e-3, batch_size=64, max_steps=15000, d_start=8, rel_tol=0.1, level=0.95)
    whole, decided = (plan_pages({"exp-scaling": {**scaling, "decide_every": every}}, H100_SPEC, lambda c: 64)[0]
                      for every in (None, 500))
    assert 0.6 * whole.seconds < decided.seconds < whole.seconds
    c = TrainConfig(N=256, R=8, d=32, batch_size=64, stop_accuracy=(0.95, 500))
    trained = 15000 * (1 - DECIDED_PASS_FRACTION * (1 - DECIDED_STEP_FRACTION))
    assert expected_steps(c) == pytest.approx(trained + (trained // 500) * 256 * 8 / 64 / 3)
    assert expected_steps(dataclasses.replace(c, stop_accuracy=None)) == 15000
    # a failing trial that may give up is priced at GIVE_UP_STEP_FRACTION of its budget, and the page's parameter says so
    from geofact.ops.costs import GIVE_UP_STEP_FRACTION

    giving_up = dataclasses.replace(c, give_up=2.0)
    trained = 15000 * ((1 - DECIDED_PASS_FRACTION) * GIVE_UP_STEP_FRACTION + DECIDED_PASS_FRACTION * DECIDED_STEP_FRACTION)
    assert GIVE_UP_STEP_FRACTION < 1 and expected_steps(giving_up) == pytest.approx(trained + (trained // 500) * 256 * 8 / 64 / 3)
    ruled = plan_pages({"exp-scaling": {**scaling, "decide_every": 500, "give_up": 2.0}}, H100_SPEC, lambda c: 64)[0]
    assert ruled.seconds < decided.seconds


def _record(config: TrainConfig, accuracy: float) -> dict:
    return {"schema": "geofact.training.run/1", "config": config.as_dict(), "accuracy": accuracy, "loss_curve": [[0, 1.0]]}


def test_threshold_cells_are_measured_where_every_seed_of_every_d_is_recorded_and_guessed_elsewhere():
    from geofact.ops.costs import threshold_cells
    from geofact.training.grid import CapacityGrid

    grid = CapacityGrid(N=64, R_values=(2, 4, 8), d_values=(8, 16, 32), seeds=(0, 1), lr=0.01, batch_size=32, max_steps=40)
    accuracy = {(2, 8): 0.5, (2, 16): 1.0, (2, 32): 1.0,  # R = 2: every cell recorded, threshold 16
                (4, 8): 0.3, (4, 16): 0.9}  # R = 4: d = 32 not recorded, taken as memorised: threshold 32
    recorded = {grid.config(R, d, False, s).key(): _record(grid.config(R, d, False, s), a)
                for (R, d), a in accuracy.items() for s in grid.seeds}
    measured, guessed = threshold_cells(grid, None, recorded)
    cells = lambda configs: sorted({(c.frozen_embeddings, c.R, c.d) for c in configs})  # noqa: E731
    assert cells(measured) == [(False, 2, 8), (False, 2, 16)] and len(measured) == 2 * 2  # both seeds
    # R = 4's estimate; R = 8 and the frozen regime, with nothing recorded: the two largest d
    assert cells(guessed) == [(False, 4, 16), (False, 4, 32), (False, 8, 16), (False, 8, 32),
                              *[(True, R, d) for R in (2, 4, 8) for d in (16, 32)]]
    assert cells(threshold_cells(grid, [2], recorded)[0]) == [(False, 2, 8), (False, 2, 16)]  # precision_R: R = 2 alone
    assert cells(threshold_cells(grid, [2], recorded)[1]) == [(True, 2, 16), (True, 2, 32)]
    never = {k: {**r, "accuracy": 0.1} for k, r in recorded.items()}  # R = 2 never memorises: the page retrains nothing there
    assert not [c for c in threshold_cells(grid, [2], never)[0]]


def test_recorded_runs_come_from_lease_archives_and_the_run_cache_which_wins(tmp_path):
    import io
    import json
    import tarfile

    from geofact.ops.costs import recorded_runs, run_records

    config = TrainConfig(N=64, R=2, d=8, batch_size=32)
    other = dataclasses.replace(config, d=16)
    (tmp_path / "results" / "paper" / "records").mkdir(parents=True)
    with tarfile.open(tmp_path / "results" / "paper" / "records" / "lease.tar.gz", "w:gz") as archive:
        for c, accuracy in ((config, 0.5), (other, 0.7)):
            data = json.dumps(_record(c, accuracy)).encode()
            member = tarfile.TarInfo(f".geofact/runs/{c.key()}.json")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    (tmp_path / ".geofact" / "runs").mkdir(parents=True)
    (tmp_path / ".geofact" / "runs" / f"{config.key()}.json").write_text(json.dumps(_record(config, 0.9)))
    runs = recorded_runs(run_records(tmp_path))
    assert {k: r["accuracy"] for k, r in runs.items()} == {config.key(): 0.9, other.key(): 0.7}


def test_d_min_searches_are_priced_as_chains_one_trial_at_a_time_but_the_first_ns_doubling_stacked():
    from geofact.ops.costs import CHAINED_TRIALS, search_trials

    assert search_trials(75, 8, 0.1, chained=False) == 4 + 1 + 3  # 8, 16, 32, 64, 128, then (64, 128] to 10%
    assert search_trials(8, 8, 0.1, chained=False) == 1 + 3 and search_trials(300, 8, 0.1, chained=True) == CHAINED_TRIALS
    scaling = dict(N_values=[128, 256, 512], R=8, widths=[64], budgets=["fixed steps"], epoch_widths=[], seeds=[0, 1],
                   lr=1e-3, batch_size=64, max_steps=15000, d_start=8, rel_tol=0.1, level=0.95, decide_every=500)
    (plan,) = plan_pages({"exp-scaling": scaling}, H100_SPEC, lambda c: 64)
    guess = {False: round(128 * 7 / 12), True: round(512 * 7 / 12)}  # 75 and 299 at N = 128
    first = {frozen: search_trials(guess[frozen], 8, 0.1, False) for frozen in (False, True)}
    doubling = {frozen: search_trials(guess[frozen], 8, 0.5, False) for frozen in (False, True)}  # 5: 8..128, 7: 8..512
    assert doubling == {False: 5, True: 7}
    # every search asks for d = 8, 16, ... at once while it fails: both seeds and both regimes stack until the learned
    # searches pass (at 128), the frozen ones on alone
    stacked = sorted(((g.config.d, g.runs) for g in plan.groups if "doubling" in g.what))
    assert stacked == [(8 * 2**i, 4) for i in range(5)] + [(256, 2), (512, 2)]
    single = [g for g in plan.groups if "doubling" not in g.what]
    assert all(g.runs == 1 for g in single)  # a search's next d waits for its last
    per_regime = {frozen: 2 * (first[frozen] - doubling[frozen] + 2 * CHAINED_TRIALS) for frozen in (False, True)}
    assert {frozen: sum(1 for g in single if g.config.frozen_embeddings == frozen) for frozen in (False, True)} == per_regime
    # with the seeds searched together, every chained trial is one stack of both seeds, the first N's as before
    (together,) = plan_pages({"exp-scaling": {**scaling, "seeds_together": True}}, H100_SPEC, lambda c: 64)
    chained = [g for g in together.groups if g.config.N > 128]
    assert sorted((g.config.N, g.runs) for g in chained) == [(N, 2) for N in (256, 512) for _ in range(2 * CHAINED_TRIALS)]
    assert [g for g in together.groups if g.config.N == 128] == [g for g in plan.groups if g.config.N == 128]
    assert together.seconds < plan.seconds


def test_counted_rates_are_recovered_from_steps_they_timed_and_price_a_group_by_its_count():
    from geofact.ops.calibration import CountedRates, fit_counted

    truth = CountedRates(matmul_flops={"tf32": 2e14}, bandwidth=2e12, op_seconds=1.5e-6, source="test")
    steps = [{"flops": f, "bytes": b, "ops": o} for f, b, o in [(3.6e10, 9e9, 540), (1.8e11, 1.4e10, 540), (2e8, 4e7, 300),
                                                                 (5e8, 1.2e8, 336), (2.3e12, 5e10, 520), (1e9, 1e9, 260)]]
    points = [(s, truth.seconds(s, "tf32"), f"step {i}") for i, s in enumerate(steps)]
    fitted = fit_counted(points, fp32_peak=67e12, precision="tf32")
    assert fitted.bandwidth == pytest.approx(2e12, rel=1e-6) and fitted.op_seconds == pytest.approx(1.5e-6, rel=1e-6)
    assert fitted.matmul_flops["tf32"] == pytest.approx(2e14, rel=1e-6) and re.search(r"worst error [+-]0%", fitted.source)
    assert fitted.matmul_flops["bf16"] == pytest.approx(4e14, rel=1e-6)  # the data sheet's ratio to tf32's
    assert fitted.kernel_flops is None and fitted.kernel_op_seconds is None  # no timed step ran geofact's kernels
    from geofact.ops.calibration import _capped_nnls

    A = np.array([[1.0, 0.0, 2.0], [3.0, 0.0, 1.0], [1.0, 0.0, 1.0]])  # a column no step has: 0, whatever its cap
    x, errors = _capped_nnls(A, A @ np.array([0.5, 0.0, 0.25]), [None, 1.0, None])
    assert x[1] == 0 and x[[0, 2]] == pytest.approx([0.5, 0.25]) and np.abs(errors).max() < 1e-9
    assert fitted.seconds({"flops": 1e12, "ops": 0, "kernel_flops": 4e11}, "tf32") == pytest.approx(1e12 / 2e14)
    # geofact's kernels' FLOPs at their own rate, told apart from cuBLAS's where the timed steps ran both
    slow = CountedRates(matmul_flops={"tf32": 2e14}, bandwidth=2e12, op_seconds=1.5e-6, source="test", kernel_flops=5e13,
                        kernel_op_seconds=2e-5)
    kernels = [{**s, "kernel_flops": k, "kernel_ops": n} for s, k, n in zip(steps, (1e10, 0, 1e8, 0, 1.2e12, 0), (8, 0, 6, 0, 5, 2))]
    fitted = fit_counted([(s, slow.seconds(s, "tf32"),
                           f"step {i}") for i, s in enumerate(kernels)], fp32_peak=67e12, precision="tf32")
    assert fitted.kernel_flops == pytest.approx(5e13, rel=1e-6) and fitted.matmul_flops["tf32"] == pytest.approx(2e14, rel=1e-6)
    assert fitted.kernel_op_seconds == pytest.approx(2e-5, rel=1e-6) and fitted.op_seconds == pytest.approx(1.5e-6, rel=1e-6)
    assert CountedRates(**{**dataclasses.asdict(fitted)}) == fitted
    with pytest.raises(ValueError, match="at least one"):
        fit_counted([], 67e12, "tf32")
    # stored and read back; a group of single-hop runs priced by its count, a multi-hop one by the formula
    calibration = dataclasses.replace(H100_SPEC, counted=fitted)
    assert Calibration.from_dict(calibration.as_dict()) == calibration
    single = Group("p", "w", tuple(TrainConfig(N=64, R=2, d=8, batch_size=32, max_steps=100, seed=s, precision="tf32")
                                   for s in range(2)))
    asked = []

    def counts(configs):
        asked.append(len(configs))
        return steps[0]

    assert single.seconds(calibration, counts) == pytest.approx(100 * truth.seconds(steps[0], "tf32"), rel=1e-6)
    assert single.seconds(calibration) == pytest.approx(100 * H100_SPEC.step_seconds(single.config, 2))  # no counts given
    hop = Group("p", "w", (MultiHopConfig(N=64, R=2, k=2, d=16, batch_size=32, max_steps=100, precision="tf32"),))
    assert hop.seconds(calibration, counts) == pytest.approx(100 * truth.seconds(steps[0], "tf32"), rel=1e-6)
    assert hop.seconds(calibration) == pytest.approx(100 * H100_SPEC.step_seconds(hop.config, 1))  # the formula's
    assert asked == [2, 1]


def test_a_multi_hop_stacks_count_is_a_step_and_its_share_of_a_check():
    from geofact.training.traffic import hop_step_traffic

    stack = [MultiHopConfig(N=32, R=2, k=2, d=8, batch_size=32, eval_queries=64, cot=True, seed=s) for s in range(2)]
    often, rarely = (hop_step_traffic([dataclasses.replace(c, check_every=every) for c in stack]) for every in (10, 1000))
    assert rarely.ops > 100 and rarely.bytes > 0 and rarely.flops > 0
    assert often.bytes > rarely.bytes and often.ops > rarely.ops  # checks every 10 steps cost more a step than every 1000
    with pytest.raises(ValueError, match="at least one"):
        hop_step_traffic([])


def test_step_counts_are_kept_by_code_version_and_price_a_stack_on_the_line_through_two_counts(tmp_path):
    from geofact.ops.step_counts import StepCounts, code_version
    from geofact.training.traffic import step_traffic

    stack = [TrainConfig(N=64, R=R, d=8, batch_size=32, max_steps=100, seed=s, frozen_embeddings=bool(s % 2))
             for s, R in enumerate([2, 4, 3, 2, 4, 4, 2])]
    counts = StepCounts(tmp_path)
    first = counts(stack)
    whole = step_traffic(stack)  # the line through two small counts against the whole stack's count
    for k in ("flops", "kernel_flops", "bytes", "ops", "kernel_ops"):
        assert first[k] == pytest.approx(getattr(whole, k), rel=0.02), k
    kept = tmp_path / ".geofact" / "traffic" / f"{code_version()}.json"
    assert kept.exists()
    again = StepCounts(tmp_path)  # read back, not counted again: the file's line is what it prices by
    assert again([dataclasses.replace(c, seed=c.seed + 7, max_steps=15000) for c in stack]) == first
    (key,) = again.counts
    again.counts[key]["at"] = {"flops": 1.0, "kernel_flops": 0.5, "bytes": 2.0, "ops": 3.0}
    again.counts[key]["per_run"] = {"flops": 0.0, "kernel_flops": 0.25, "bytes": 1.0, "ops": 0.0}
    runs = again.counts[key]["runs"]
    assert again(stack[:4]) == {"flops": 1.0, "kernel_flops": 0.5 + 0.25 * (4 - runs), "bytes": 2.0 + 4 - runs, "ops": 3.0,
                                "kernel_ops": 0.0}  # a count kept before kernel_ops was counted: none
    assert counts([dataclasses.replace(stack[0], d=16)])["bytes"] != first["bytes"]  # another shape: counted

    # committed: a fresh clone (no .geofact) reads the committed code's counts, and only this code version's
    from geofact.ops.step_counts import COMMITTED, commit_counts

    stale = tmp_path / COMMITTED / "0123456789abcdef.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"made_under": {"torch": "2.13.0+cu130", "switches": {}}, "counts": {}}))
    with pytest.raises(ValueError, match="was counted under .*2.13.0\\+cu130.* pass --replace"):
        commit_counts(tmp_path)  # a CUDA machine's commit must not take a CPU checkout's counts away, nor this one's
    assert stale.exists()
    committed = commit_counts(tmp_path, replace_other=True)
    assert committed == tmp_path / COMMITTED / f"{code_version()}.json" and not stale.exists()
    assert json.loads(committed.read_text())["counts"] == json.loads(kept.read_text())
    kept.unlink()
    (key,) = [k for k in json.loads(committed.read_text())["counts"] if k in again.counts]
    stale.write_text(json.dumps({"made_under": {}, "counts": {key: again.counts[key]}}))  # another version's: not read
    clone = StepCounts(tmp_path)
    assert clone.counts == json.loads(committed.read_text())["counts"] and clone(stack) == first and clone.counted == 0
    committed.unlink()
    fresh = StepCounts(tmp_path)
    assert fresh(stack) == first and fresh.counted == 1  # counted again, and kept
    kept.unlink()
    with pytest.raises(FileNotFoundError, match="run `geofact plan` first"):
        commit_counts(tmp_path)



def test_step_counts_are_kept_apart_by_the_steps_switches(monkeypatch):
    """`geofact plan` under GEOFACT_FUSED_CE=0 prices the step of torch's ops: a count of the step with geofact's
    kernels is not read for it (the counts' key once ignored the setting), nor one with a kind of kernel off."""
    from geofact.ops.step_counts import code_version
    from geofact.training import fused_ce, optim

    if not fused_ce.TRITON:
        pytest.skip("the kernels' switch needs Triton, a test dependency")
    monkeypatch.setenv(fused_ce.ENV, "1")
    on = code_version()
    monkeypatch.setenv(fused_ce.ENV, "0")
    off = code_version()
    monkeypatch.setenv(fused_ce.ENV, "1")
    monkeypatch.setattr(optim, "FUSED_KERNEL_DEVICES", ())
    assert len({on, off, code_version()}) == 3

@pytest.mark.parametrize("least, runs, copies", [(5, 7, 3), (5, 3, 1), (4, 3, 0)])
def test_a_stack_whose_output_layer_steps_by_its_size_is_counted_on_its_own_side_of_the_step(least, runs, copies,
                                                                                              monkeypatch):
    """The fused output layer leaves the softmax unstored only in stacks of enough runs (fused_ce.unstored): the line
    of a stack's count goes through two counts on the stack's side of that switch (or the stack is counted whole)."""
    from geofact.ops.step_counts import StepCounts, _copies
    from geofact.training import fused_ce
    from geofact.training.traffic import step_traffic

    if not fused_ce.TRITON:
        pytest.skip("the fused kernels need Triton, a test dependency")
    monkeypatch.delenv(fused_ce.ENV, raising=False)
    monkeypatch.setattr(step_module, "FUSED_WAY_DEVICES", ("cuda", "meta"))
    monkeypatch.setattr(fused_ce, "UNSTORED_MIN_PROGRAMS", least)  # 32 rows a batch: one row block a run
    stack = [TrainConfig(N=64, R=R, d=8, batch_size=32, max_steps=100, seed=s, frozen_embeddings=bool(s % 2))
             for s, R in enumerate([2, 4, 3, 2, 4, 4, 2][:runs])]
    assert _copies(stack, 2) == copies  # two kinds: frozen or not
    counted, whole = StepCounts()(stack), step_traffic(stack)
    for k in ("flops", "kernel_flops", "bytes", "ops", "kernel_ops"):
        assert counted[k] == pytest.approx(getattr(whole, k), rel=0.02), k


def test_recorded_runs_are_priced_at_their_stops_the_stack_paying_its_runs_steps_and_its_longest_runs_ops():
    """A stack whose runs stop and leave it: its FLOPs and bytes go with the runs still in it, its ops with its
    longest run. Runs read past their stop, or with no loss to meet, train their budget whatever their records say."""
    from geofact.ops.calibration import CountedRates

    rates = CountedRates(matmul_flops={"tf32": 2e14}, bandwidth=2e12, op_seconds=1e-5, source="test")
    calibration = dataclasses.replace(H100_SPEC, counted=rates)
    runs = tuple(TrainConfig(N=64, R=2, d=8, batch_size=32, max_steps=1000, seed=s, precision="tf32") for s in range(4))
    step = {"flops": 2e11, "bytes": 4e9, "ops": 100}
    group = Group("p", "w", runs)
    full, fixed = rates.seconds({"flops": 2e11, "bytes": 4e9, "ops": 100}, "tf32"), 100 * 1e-5
    assert group.seconds(calibration, lambda c: step) == pytest.approx(1000 * full)
    records = {runs[0].key(): {"steps": 200}, runs[1].key(): {"steps": 600}, "other": {"steps": 5}}
    priced = group.with_records(records)
    assert priced.recorded_steps == (200, 600, None, None) and priced.n_recorded == 2
    assert priced.run_steps() == [200.0, 600.0, 1000.0, 1000.0]
    expected = (200 + 600 + 1000 + 1000) / 4 * (full - fixed) + 1000 * fixed
    assert priced.seconds(calibration, lambda c: step) == pytest.approx(expected)
    all_stopped = Group("p", "w", runs[:2]).with_records(records)
    assert all_stopped.seconds(calibration, lambda c: step) == pytest.approx(400 * (full - fixed) + 600 * fixed)
    # geofact's kernels' launches are the stack's too, at their own cost: paid at its longest run's steps
    launches = dataclasses.replace(calibration, counted=dataclasses.replace(rates, kernel_op_seconds=3e-5))
    with_kernels = {**step, "kernel_ops": 10}
    full, fixed = launches.counted.seconds({"flops": 2e11, "bytes": 4e9, "ops": 100, "kernel_ops": 10}, "tf32"), 90 * 1e-5 + 10 * 3e-5
    assert all_stopped.seconds(launches, lambda c: with_kernels) == pytest.approx(400 * (full - fixed) + 600 * fixed)
    # the formula's calibration splits the same way: its ops term is the stack's at no runs
    assert all_stopped.seconds(H100_SPEC) == pytest.approx(
        400 * (H100_SPEC.step_seconds(runs[0], 2) - H100_SPEC.step_seconds(runs[0], 0)) + 600 * H100_SPEC.step_seconds(runs[0], 0))
    past = tuple(dataclasses.replace(c, read_past_stop=True) for c in runs[:2])
    no_loss = tuple(dataclasses.replace(c, loss_threshold=0.0) for c in runs[:2])
    for unstoppable in (past, no_loss):
        records = {c.key(): {"steps": 100} for c in unstoppable}
        assert Group("p", "w", unstoppable).with_records(records).recorded_steps == ()
    # a run that keeps a tail trains as its record without one did
    tailed = tuple(dataclasses.replace(c, keep_tail=(50, 3)) for c in runs[:2])
    assert Group("p", "w", tailed).with_records({runs[0].key(): {"steps": 200}}).recorded_steps == (200, None)
    # nor a spike study's recipes, whose configs are the grid's but which train their whole budget
    records = {c.key(): {"steps": 100} for c in runs}
    assert Group("p", "w", runs, stops=False).with_records(records).recorded_steps == ()
    # a plan prices the recorded runs of its groups so
    params = {"exp-capacity": dict(capacity_grid=dict(N=32, R_values=[1, 2], d_values=[4, 8], seeds=[0], lr=0.01,
                                                      batch_size=32, max_steps=40), lr_values=[0.01], lr_R=2,
                                   lr_d=8, lr_seeds=[0], attention_R=[2], attention_d=[8], precision="fp32")}
    budget = plan_pages(params, H100_SPEC, lambda c: 64)[0]
    grid = [c for g in budget.groups if g.what == "capacity grid" for c in g.configs]
    stopped = plan_pages(params, H100_SPEC, lambda c: 64, recorded={c.key(): {"steps": 10, "accuracy": 1.0} for c in grid})[0]
    assert all(g.n_recorded == g.runs for g in stopped.groups if g.what == "capacity grid")
    assert stopped.training_seconds < budget.training_seconds


def test_what_is_left_skips_the_runs_on_record_but_trains_the_grid_again_for_the_mechanism_pages():
    from geofact.ops.costs import AGAIN, format_plan

    grid = dict(N=32, R_values=[1, 2], d_values=[4, 8], seeds=[0], lr=0.01, batch_size=32, max_steps=40)
    capacity = dict(capacity_grid=grid, lr_values=[0.01], lr_R=2, lr_d=8, lr_seeds=[0], attention_R=[2], attention_d=[8],
                    precision="fp32")
    configs = [c for g in plan_pages({"exp-capacity": capacity}, H100_SPEC, lambda c: 64)[0].groups
               if g.what == "capacity grid" for c in g.configs]
    recorded = {c.key(): {"steps": 10, "accuracy": 1.0} for c in configs[:3]}  # three of the grid's runs
    (alone,) = plan_pages({"exp-capacity": capacity}, H100_SPEC, lambda c: 64, recorded=recorded)
    # on its own the page trains what the records lack: one grid run and the rest of its groups
    assert sorted(c.key() for g in alone.left if g.what == "capacity grid" for c in g.configs) == sorted(c.key() for c in configs[3:])
    assert not [g for g in alone.left if g.what == AGAIN] and alone.left_seconds < alone.seconds
    # with a mechanism page to follow, the recorded grid runs train again for their weights, at their recorded stops
    readout = dict(capacity_grid=grid, trajectory_grid=None, cv_alphas=[1.0], cv_folds=2, held_out=0.2, precision="fp32")
    with_mechanism = plan_pages({"exp-capacity": capacity, "exp-readout": readout}, H100_SPEC, lambda c: 64, recorded=recorded)
    again = [g for g in with_mechanism[0].left if g.what == AGAIN]
    assert sorted(c.key() for g in again for c in g.configs) == sorted(recorded) and all(g.n_recorded == g.runs for g in again)
    assert with_mechanism[1].left is None and with_mechanism[1].left_seconds == with_mechanism[1].seconds
    # a spike study at a recorded grid cell trains its recipes whole, and the grid's run there is trained again for its
    # weights all the same: the recipes' runs are not it
    spiked = {**capacity, "spike_R": configs[0].R, "spike_d": configs[0].d, "spike_seeds": [configs[0].seed],
              "spike_steps": configs[0].max_steps}
    plan = plan_pages({"exp-capacity": spiked, "exp-readout": readout}, H100_SPEC, lambda c: 64, recorded=recorded)[0]
    assert any(c.key() == configs[0].key() for g in plan.left if g.what.startswith("spike study") for c in g.configs)
    assert sorted(c.key() for g in plan.left if g.what == AGAIN for c in g.configs) == sorted(recorded)
    assert "left: " in format_plan(with_mechanism, H100_SPEC)
    # a column at a time (geofact compute --grid-d): each d's runs on record trained again, and its states' analyses
    from geofact.ops.costs import column_lines, column_seconds

    columns = column_seconds(with_mechanism, H100_SPEC)
    assert sorted(columns) == [4, 8]  # every d of the grid
    on_record = {c.d for c in configs[:3]}
    assert all((columns[d][0] > 0) == (d in on_record) for d in columns)
    assert sum(analysed for _, analysed in columns.values()) == pytest.approx(
        sum(a.seconds(H100_SPEC) for a in with_mechanism[1].analyses))  # no second grid: every state is a column's
    assert len(column_lines(with_mechanism, H100_SPEC)) == 2 + 2
    assert column_lines(plan_pages({"exp-capacity": capacity}, H100_SPEC, lambda c: 64, recorded=recorded), H100_SPEC) == []  # no mechanism page


def test_traffic_rows_price_a_counted_step_at_the_cards_counted_rates():
    from geofact.ops.calibration import CountedRates
    from geofact.ops.costs import traffic_rows

    rates = CountedRates(matmul_flops={"tf32": 2e14}, bandwidth=2e12, op_seconds=3e-6, source="test", kernel_op_seconds=3e-5)
    (row,) = traffic_rows(shapes=[(64, 8, 2)], calibration=dataclasses.replace(H100_SPEC, counted=rates))
    assert row["bytes_per_step"] > 0 and row["ops_per_step"] > 20 and row["flops_per_step"] > 0
    counted = {k: row[k] for k in ("flops", "bytes", "ops", "kernel_flops", "kernel_ops")}
    assert row["predicted_ms"] == pytest.approx(1e3 * rates.seconds(counted, "tf32"))
    (formula,) = traffic_rows(shapes=[(64, 8, 2)])  # no counted rates: the formula's milliseconds
    assert formula["predicted_ms"] == pytest.approx(formula["formula_ms"])


def test_the_plan_at_the_cards_data_sheet_peaks_is_its_floor_and_the_kernels_priced_as_any_op_sit_between():
    """`geofact plan` also prices its counted work with geofact's kernels as the card's other ops (what the next
    lease's A/B rows decide) and at the card's data-sheet peaks (the floor the step's count sets)."""
    from geofact.ops.calibration import CountedRates
    from geofact.ops.costs import FLOOR_OP_SECONDS, PagePlan, floor_calibration, format_plan, kernels_as_ops

    fitted = CountedRates(matmul_flops={"tf32": 2e14}, bandwidth=1.4e12, op_seconds=3.3e-6, source="test",
                          kernel_flops=3e13, kernel_op_seconds=3.4e-5)
    h100 = dataclasses.replace(H100_SPEC, device="cuda (NVIDIA H100 80GB HBM3)", counted=fitted)
    floor, as_ops = floor_calibration(h100), kernels_as_ops(h100)
    assert floor.counted.bandwidth == 3.35e12 and floor.bandwidth == 3.35e12 and floor.counted.op_seconds == FLOOR_OP_SECONDS
    assert floor.counted.kernel_op_seconds is None and as_ops.counted.kernel_op_seconds is None and as_ops.counted.bandwidth == 1.4e12
    h200 = dataclasses.replace(h100, device="cuda (NVIDIA H200)")
    assert floor_calibration(h200).counted.bandwidth == 4.8e12
    for other in ("cuda (NVIDIA H100 PCIe)", "cuda (NVIDIA H100 NVL)", "cuda (NVIDIA H200 NVL)", "cuda (NVIDIA GH200 480GB)"):
        assert floor_calibration(dataclasses.replace(h100, device=other)) is None, other  # other cards, other rates
    # no card's data sheet, or steps not priced by their count: no floor; no kernel rates of its own: no such line
    assert floor_calibration(dataclasses.replace(h100, device="cpu (x86_64)")) is None and floor_calibration(H100_SPEC) is None
    assert kernels_as_ops(dataclasses.replace(h100, counted=dataclasses.replace(fitted, kernel_flops=None,
                                                                                kernel_op_seconds=None))) is None
    runs = tuple(TrainConfig(N=64, R=2, d=8, batch_size=32, max_steps=1000, seed=s, precision="tf32") for s in range(4))
    step = {"flops": 2e13, "kernel_flops": 1e12, "bytes": 4e11, "ops": 100, "kernel_ops": 10}
    plan = PagePlan("exp-capacity", [Group("exp-capacity", "w", runs)], [], h100, counts=lambda c: step)
    seconds = [dataclasses.replace(plan, calibration=c).seconds for c in (h100, as_ops, floor)]
    assert seconds[0] > seconds[1] > seconds[2] > 0
    text = format_plan([plan], h100)
    assert "as the card's other ops and matmuls" in text and "at the NVIDIA H100 80GB HBM3's data-sheet rates (3.35 TB/s" in text
    assert f"{seconds[2] / 60:.1f} min" in text.split("data-sheet rates")[1]
    assert "other rates" not in format_plan([dataclasses.replace(plan, calibration=H100_SPEC)], H100_SPEC)


def test_predictions_asked_only_for_their_target_go_through_tf32_with_a_share_again_in_float32():
    """An accuracy and a rank sweep ask of each prediction only whether it is its target (TrainedModel.answered): on a
    card with TF32 it goes through TF32 and the plan adds UNSURE_SHARE_SEEN of the rows' MLP blocks and CANDIDATES
    columns in float32; a ridge fit stays in float32; a card without TF32 computes all of it in float32."""
    from geofact.ops.costs import UNSURE_SHARE_SEEN, Analysis, Work, _answered, _predict_flops

    config = TrainConfig(N=4096, R=16, d=768)
    work = _answered(config, 1000, "facts")
    assert work.flops == 0 and work.fast == _predict_flops(config, 1000)
    assert work.rechecked == 2 * UNSURE_SHARE_SEEN["facts"] * 1000 * (2 * 768 * config.width + 768 * 8)
    both = Analysis("p", "w", 1, work + Work(flops=5e12, ops=10.0))
    tf32 = Calibration(device="cuda", matmul_flops={"fp32": 5e13, "tf32": 4e14}, bandwidth=1e12, op_seconds=1e-5,
                       ops_per_step=100.0, source="test")
    moved = work.bytes / 1e12
    assert math.isclose(both.seconds(tf32), 5e12 / 5e13 + work.fast / 4e14 + work.rechecked / 5e13 + 1e-4 + moved)
    plain = Calibration(device="cpu", matmul_flops={"fp32": 1e11}, bandwidth=1e10, op_seconds=1e-5, ops_per_step=100.0,
                        source="test")
    assert math.isclose(both.seconds(plain), (5e12 + work.fast) / 1e11 + 1e-4 + work.bytes / 1e10)


@pytest.mark.parametrize("N, R, d, fused", [(512, 8, 64, True), (4096, 2, 32, True), (4096, 2, 32, False),
                                           (512, 2, 256, False)])
def test_the_analyses_bytes_are_priced_as_they_are_counted(N, R, d, fused, monkeypatch):
    """The plan prices an analysis's memory traffic by ANALYSIS_VALUES, fitted to counts on fake meta tensors:
    recounted here, the rank sweep within 15%, an accuracy and zero-shot transfer within 20%, the readouts 35%; with
    the decisions' logits written and read, or never written (geofact.analysis.fused_decide, d <= DECIDE_MAX_D)."""
    from geofact.analysis import fused_decide

    monkeypatch.setattr(fast_paths, "DECIDE_DEVICES", fast_paths.DECIDE_DEVICES if fused else ())
    from torch._subclasses.fake_tensor import FakeTensorMode

    from geofact.analysis import rechecked
    from geofact.analysis.interventions import rank_grid, selectivity_sweep
    from geofact.analysis.readout import model_readouts, split_subjects
    from geofact.analysis.trained import TrainedModel
    from geofact.analysis.transfer import fresh_bijections, zero_shot
    from geofact.host import host_reads
    from geofact.ops.costs import _answered_bytes, _ridge_bytes
    from geofact.training import dispatch_count
    from geofact.training.dispatch_count import OneKernel, TrafficCounter
    from geofact.training.model import init_params
    from tests.analysis.test_fake_device import Reads

    c = TrainConfig(N=N, R=R, d=d)
    weights, new = init_params(c), fresh_bijections(N, R, c.bijection_seed + 1)
    ks, n = rank_grid(d, 32), int((~split_subjects(N, 0.2, 0)).sum())
    logits = not fused
    priced = {"sweep": (_answered_bytes(c, len(ks) * R * R * n, logits=logits) + _ridge_bytes(c), 0.15),
              # C from one other relation drawn per edit: the edited relation's query and one more scored
              "sampled sweep": (_answered_bytes(c, len(ks) * R * min(2, R) * n, logits=logits) + _ridge_bytes(c), 0.15),
              "accuracy": (_answered_bytes(c, N * R, hidden=True, logits=logits), 0.2),  # the kernel's partials unpriced
              "zero-shot": (_ridge_bytes(c) + _answered_bytes(c, 2 * N * R, hidden=True, logits=logits), 0.2),
              "readouts": (4 * _ridge_bytes(c), 0.35)}
    monkeypatch.setattr(fast_paths, "FAST_DEVICES", ("meta",))  # CUDA's path
    monkeypatch.setattr(dispatch_count, "ONE_KERNEL", {"rms_norm"})  # as CUDA runs torch's RMSNorm: one kernel
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = TrainedModel(c, {k: v.to("meta") for k, v in weights.items()})
        for name, run in [("sweep", lambda: selectivity_sweep(model, ks)),
                          ("sampled sweep", lambda: selectivity_sweep(model, ks, others_per_edit=1)),
                          ("accuracy", model.correct_fraction),
                          ("zero-shot", lambda: zero_shot(model, new)), ("readouts", lambda: model_readouts(model))]:
            with host_reads(Reads()), TrafficCounter() as counted, OneKernel(counted):
                run()
            price, within = priced[name]
            assert abs(price / counted.bytes - 1) <= within, (name, price, counted.bytes)


def test_decisions_the_fused_kernel_makes_are_priced_at_its_rate_on_cuda_and_as_whole_logits_elsewhere(monkeypatch):
    """Below DECIDE_MAX_D a decision's unembedding goes through geofact.analysis.fused_decide on CUDA (geofact's
    kernels switched on, Triton or not where the plan is made): its FLOPs at the card's measured rate for geofact's
    kernels, no logits moved; elsewhere, with GEOFACT_FUSED_CE=0 or no rate measured, at TF32's rate with the logits
    written and read."""
    from geofact.ops.calibration import CountedRates
    from geofact.ops.costs import UNSURE_SHARE_SEEN, Analysis, Work, _answered, _predict_flops

    small, large = TrainConfig(N=4096, R=16, d=32), TrainConfig(N=4096, R=16, d=768)
    assert _answered(large, 1000, "edits").kernel == 0 and _answered(large, 1000, "edits").logit_bytes == 0
    work, share = _answered(small, 1000, "edits"), UNSURE_SHARE_SEEN["edits"]
    assert work.kernel == 2 * 1000 * 32 * 4096 and work.logit_bytes == 4 * 1000 * 3 * 4096
    assert math.isclose(work.fast + work.kernel, _predict_flops(small, 1000)) and work.bytes == 4 * 1000 * 33 * 32
    # through the kernel the rows rechecked have their TF32 logits made again, whole: their FLOPs and bytes
    assert math.isclose(work.remade, share * _predict_flops(small, 1000)) and work.remade_bytes == share * work.logit_bytes
    # the analyses' counted bytes and kernels at the counted steps' rates, not the formula's (0.5e12 B/s, 1e-5 s)
    counted = CountedRates(matmul_flops={"tf32": 4e14}, bandwidth=1e12, op_seconds=1e-6, source="test", kernel_flops=3e13)
    cuda = Calibration(device="cuda (test)", matmul_flops={"fp32": 5e13, "tf32": 4e14}, bandwidth=0.5e12, op_seconds=1e-5,
                       ops_per_step=100.0, source="test", counted=counted)
    # launches at the larger of the two fitted rates (both fitted to graph-replayed steps; an analysis runs eagerly)
    for calibration in (cuda, dataclasses.replace(cuda, counted=None)):
        assert math.isclose(Analysis("p", "w", 1, Work(ops=7.0)).seconds(calibration), 7e-5)
    assert math.isclose(Analysis("p", "w", 1, Work(bytes=1e12)).seconds(dataclasses.replace(cuda, counted=None)), 2.0)
    # a policy the formula lacks is not taken from the counted fit (a card without TF32 does its matmuls in float32)
    plain = Calibration(device="cpu", matmul_flops={"fp32": 1e11}, bandwidth=1e10, op_seconds=1e-5, ops_per_step=100.0,
                        source="test", counted=dataclasses.replace(counted, matmul_flops={"fp32": 2e11, "tf32": 4e14}))
    assert math.isclose(Analysis("p", "w", 1, Work(fast=4e11)).seconds(plain), 2.0)
    rest = work.fast / 4e14 + work.rechecked / 5e13 + work.bytes / 1e12
    monkeypatch.setenv("GEOFACT_FUSED_CE", "1")
    remade = work.remade / 4e14 + work.remade_bytes / 1e12
    assert math.isclose(Analysis("p", "w", 1, work).seconds(cuda), rest + work.kernel / 3e13 + remade)
    parts = Analysis("p", "w", 1, work).parts(cuda)  # what the plan prints beside each analysis
    assert math.isclose(parts["memory"], (work.bytes + work.remade_bytes) / 1e12) and parts["launches"] == 0
    assert math.isclose(parts["arithmetic"], work.fast / 4e14 + work.rechecked / 5e13 + work.kernel / 3e13 + work.remade / 4e14)
    monkeypatch.setenv("GEOFACT_FUSED_CE", "0")
    assert math.isclose(Analysis("p", "w", 1, work).seconds(cuda), rest + work.kernel / 4e14 + work.logit_bytes / 1e12)
    monkeypatch.setenv("GEOFACT_FUSED_CE", "1")  # no rate measured for geofact's kernels on the card: whole logits
    unmeasured = dataclasses.replace(cuda, counted=dataclasses.replace(counted, kernel_flops=None))
    assert math.isclose(Analysis("p", "w", 1, work).seconds(unmeasured), rest + work.kernel / 4e14 + work.logit_bytes / 1e12)
    # the plan's hypothetical of geofact's kernels as the card's other matmuls (`kernels_as_ops`): no logits written
    as_ops = dataclasses.replace(cuda, counted=dataclasses.replace(counted, kernel_flops=None, kernels_as_ops=True))
    assert math.isclose(Analysis("p", "w", 1, work).seconds(as_ops), rest + work.kernel / 4e14 + remade)


def test_rank_sweeps_that_score_some_other_relations_per_edit_are_priced_for_the_queries_they_predict(monkeypatch):
    """With `others_per_edit` p a rank's edits predict R (1 + p) n queries, not R R n (geofact.analysis.interventions):
    the decisions' FLOPs and bytes scale so, the readout fits do not."""
    from geofact.analysis import interventions
    from geofact.analysis.interventions import rank_grid
    from geofact.ops.costs import _answered

    grid = dict(N=64, R_values=[8], d_values=[16], seeds=[0], lr=0.01, batch_size=64, max_steps=40)
    params = dict(capacity_grid=grid, trajectory_grid=None, held_out=0.25, alpha=1e-3, rank_points=4, split_seed=0,
                  erosion_control=None, spike_R=8, spike_d=16, spike_seeds=[0], spike_steps=40, spike_keep_every=None,
                  spike_second=None, precision="fp32")

    def sweep(others):
        plan = plan_pages({"exp-interventions": {**params, "others_per_edit": others}}, H100_SPEC, lambda c: 64)[0]
        return next(a for a in plan.analyses if a.what == "rank sweeps")

    every, two, many = sweep(None), sweep(1), sweep(20)
    c = TrainConfig(N=64, R=8, d=16, batch_size=64)
    sweeps = 2 * every.states  # each run's one state, its final, swept for both targets
    queries = len(rank_grid(16, 4)) * 8 * 16 * (8 - 2)  # ranks x edits (R n) x the queries an edit no longer asks
    assert every.states == two.states == 2 and many.work == every.work  # p >= R - 1: every other relation
    fewer = _answered(c, queries, "edits") * sweeps
    for field in ("bytes", "fast", "kernel", "logit_bytes"):
        assert getattr(fewer, field) > 0
        assert getattr(every.work, field) - getattr(two.work, field) == pytest.approx(getattr(fewer, field))
    assert two.work.flops == every.work.flops > 0  # the readout fits
    # the calls: as many ranks a call as fit the device's rows, a rank's edits predicting R (1 + p) n queries
    monkeypatch.setitem(interventions.PREDICT_LOGITS, "other", 3 * 8 * 16 * 64)  # 3 of R n = 128 edits a call
    every, two = sweep(None), sweep(1)
    ranks = len(rank_grid(16, 4))
    calls = {None: ranks * math.ceil(8 * 16 * 8 / (3 * 8 * 16)), 1: math.ceil(ranks / 1) * math.ceil(8 * 16 * 2 / (3 * 8 * 16))}
    assert every.work.ops - two.work.ops == pytest.approx(sweeps * 104.0 * (calls[None] - calls[1]))
    with pytest.raises(ValueError, match="others_per_edit must be None"):
        sweep(0)


def _analysed(config: TrainConfig, name: str, params: dict, step, seconds, device="cuda (NVIDIA H100 80GB HBM3)") -> dict:
    return {"schema": "geofact.analysis.state/1", "config": config.as_dict(), "analysis": name, "params": params,
            "code": "c0de", "step": step, "accuracy": 1.0, "values": {}, "seconds": seconds, "provenance": {"device": device}}


def test_an_analysed_states_recorded_seconds_are_set_against_the_plans_price_of_it(tmp_path):
    """`geofact plan --check` on the analyses: the plan prices a state of each analysis a mechanism page records as
    its planner prices that page's states (STATE_WORK from the record's own parameters), per card apart."""
    import io
    import json
    import tarfile

    from geofact.ops.costs import STATE_WORK, Analysis, _accuracy, _loaded, analysis_errors, analysis_records
    from geofact.training.grid import CapacityGrid

    grid = dict(N=64, R_values=[2, 8], d_values=[16], seeds=[0], lr=0.01, batch_size=64, max_steps=40, checkpoints=[])
    params = dict(capacity_grid=grid, trajectory_grid=None, held_out=0.25, alpha=1e-3, rank_points=4, split_seed=0,
                  erosion_control=None, others_per_edit=1, cv_alphas=[1e-3, 1e-1], cv_folds=3, readout_check=None,
                  retrain_steps=10, new_task_offset=1000, precision="fp32")
    recorded = {"rank sweeps": ("interventions", {"held_out": 0.25, "alpha": 1e-3, "rank_points": 4, "split_seed": 0,
                                                  "others_per_edit": 1}),
                "readouts (4 per target and state)": ("readouts", {"held_out": 0.25, "alpha": 1e-3, "split_seed": 0}),
                "cross-validated readouts": ("readouts-cv", {"held_out": 0.25, "alphas": [1e-3, 1e-1], "folds": 3,
                                                             "split_seed": 0}),
                "zero-shot transfer": ("zero-shot-transfer", {"new_task_offset": 1000, "alpha": 1e-3})}
    configs = list(CapacityGrid.from_parameter(grid).configs().values())  # learned and frozen, R = 2 and 8
    pages = {p: params for p in ("exp-readout", "exp-interventions", "exp-freeze-transfer")}
    analyses = {a.what: a for plan in plan_pages(pages, H100_SPEC, lambda c: 64) for a in plan.analyses}
    for what, (name, record_params) in recorded.items():  # a grid of final states alone: the plan's work, state by state
        work, times = STATE_WORK[name]  # and each state's loading
        assert analyses[what].work == sum((work(c, record_params) * times + _loaded(c) for c in configs[1:]),
                                          work(configs[0], record_params) * times + _loaded(configs[0]))
    # seconds recorded as the plan prices them: no error on that card; twice as long on another, -50%
    name, record_params = recorded["rank sweeps"]
    work, times = STATE_WORK[name]
    price = {step: Analysis("", name, 1, work(configs[-1], record_params) * (times if step is None else 1.0)).seconds(H100_SPEC)
             for step in (None, 0)}
    accuracy = Analysis("", "accuracy", 1, _accuracy(configs[-1])).seconds(H100_SPEC)
    records = [_analysed(configs[-1], name, record_params, step, {"load": 0.1, "accuracy": None if step is None else accuracy,
                                                                 "analysis": price[step], "warm": True}) for step in (None, 0)]
    slower = [{**r, "seconds": {**r["seconds"], "analysis": 2 * r["seconds"]["analysis"]},
               "provenance": {"device": "cuda (NVIDIA H200)"}} for r in records]
    untimed = {**records[0], "seconds": None}  # made before 2026-11-30
    on_cpu = {**records[0], "provenance": {"device": "cpu (x86_64, 2 threads)"}}
    cold = {**records[0], "seconds": {**records[0]["seconds"], "analysis": 50.0, "warm": False}}  # the process's first
    drifted = {**records[0], "params": {}}  # parameters the plan does not know: counted, not read
    # a checkpoint's accuracy as its own record (since 2026-11-30), timed as the plan prices it, loading nothing
    shared = _analysed(configs[-1], "accuracy", {}, 0, {"load": 0.0, "accuracy": None, "analysis": accuracy, "warm": True})
    lines = [line.strip().replace("-0%", "+0%") for line in
             analysis_errors(records + slower + [untimed, on_cpu, cold, drifted, shared], H100_SPEC, "cuda")]
    load_price = 2 * Analysis("", "", 1, _loaded(configs[-1])).seconds(H100_SPEC)
    assert any(line.startswith("cuda (NVIDIA H100 80GB HBM3): interventions N=64 R=8 d=16, 2 states:")
               and "(+0%)" in line and "1 accuracies" in line
               and f"loading the weights 0.20 s, {load_price:.2f} predicted" in line for line in lines)
    assert any(line.startswith("cuda (NVIDIA H100 80GB HBM3): accuracy N=64 R=8 d=16, 1 states:") and "(+0%)" in line
               and "loading" not in line for line in lines)
    assert set(lines) >= {"cuda (NVIDIA H100 80GB HBM3): 2 groups of states, worst error +0%",
                          "cuda (NVIDIA H200): 1 groups of states, worst error -50%", "left out: 1 states, a warm-up",
                          "left out: 1 states, unreadable (KeyError: 'rank_points')"}
    assert analysis_errors([untimed, on_cpu], H100_SPEC, "cuda")[0].startswith("analysis check: no analysis timed on cuda")
    # read from a lease's archive and from the run cache, each record once
    (tmp_path / "results" / "paper" / "records").mkdir(parents=True)
    with tarfile.open(tmp_path / "results" / "paper" / "records" / "lease.tar.gz", "w:gz") as archive:
        for i, record in enumerate(records + slower):
            data = json.dumps(record).encode()
            member = tarfile.TarInfo(f".geofact/runs/analyses/{name}/state{i}.json")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    (tmp_path / ".geofact" / "runs" / "analyses" / name).mkdir(parents=True)
    (tmp_path / ".geofact" / "runs" / "analyses" / name / "state0.json").write_text(json.dumps(records[0]))
    # a spike study's states, in its variant's folder
    spike = {**records[1], "seconds": {**records[1]["seconds"], "load": 0.3}}
    (tmp_path / ".geofact" / "runs" / "variants" / "v" / "analyses" / name).mkdir(parents=True)
    (tmp_path / ".geofact" / "runs" / "variants" / "v" / "analyses" / name / "s.json").write_text(json.dumps(spike))
    assert sorted(map(json.dumps, analysis_records(tmp_path))) == sorted(map(json.dumps, records + slower + [spike]))
    # a lease archive in parts is read whole, once
    from geofact.ops.costs import record_sources
    from geofact.ops.pack import part_path

    archive = tmp_path / "results" / "paper" / "records" / "lease.tar.gz"
    data = archive.read_bytes()
    for i, chunk in enumerate((data[: len(data) // 2], data[len(data) // 2 :]), 1):
        part_path(archive.with_name("later.tar.gz"), i, 2).write_bytes(chunk)
    assert [p.name for p in record_sources(tmp_path)] == ["later.tar.gz.part1of2", "lease.tar.gz", "runs"]
    assert len(analysis_records(tmp_path)) == len(records + slower + [spike])


def test_each_mechanism_page_loads_every_state_and_the_first_computes_the_checkpoints_accuracies():
    """A checkpoint's accuracy is computed once, by the first mechanism page of a lease (exp-readout), and read by the
    others (geofact.analysis.trajectory's "accuracy" record); each page loads every state it analyses."""
    from geofact.ops import costs
    from geofact.ops.costs import _accuracy, _loaded, readouts_work, sweep_work
    from geofact.training.grid import CapacityGrid

    grid = dict(N=64, R_values=[2, 8], d_values=[16], seeds=[0], lr=0.01, batch_size=64, max_steps=40, checkpoints=[0, 20])
    params = dict(capacity_grid=grid, trajectory_grid=None, held_out=0.25, alpha=1e-3, rank_points=4, split_seed=0,
                  erosion_control=None, others_per_edit=1, cv_alphas=[1e-3, 1e-1], cv_folds=3, readout_check=None,
                  retrain_steps=10, new_task_offset=1000, precision="fp32")
    configs = list(CapacityGrid.from_parameter(grid).configs().values())
    pages = {p: params for p in ("exp-readout", "exp-interventions", "exp-freeze-transfer")}
    analyses = {a.what: a for plan in plan_pages(pages, H100_SPEC, lambda c: 64) for a in plan.analyses}
    checkpoints = sum((_accuracy(c) * 2 for c in configs[1:]), _accuracy(configs[0]) * 2)  # 2 a run, its stop given
    loads = sum((_loaded(c) * 3 for c in configs[1:]), _loaded(configs[0]) * 3)
    for what in ("readouts (4 per target and state)", "rank sweeps", "zero-shot transfer"):
        work = analyses[what].work
        assert work.loads == loads.loads == 3 * len(configs) and work.loaded == loads.loaded > 0
    readouts, sweeps = analyses["readouts (4 per target and state)"].work, analyses["rank sweeps"].work
    assert checkpoints.fast > 0 and checkpoints.ops > 0
    without = sum((readouts_work(c, 0.25) * 3 for c in configs[1:]), readouts_work(configs[0], 0.25) * 3) + loads
    def same(a, b) -> bool:  # field by field, up to the sums' order
        return all(math.isclose(x, y) for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b)))

    assert same(readouts, without)  # the readouts' own work and the loads
    accuracies = analyses["checkpoints' accuracies (the pages after read them)"]
    assert accuracies.page == "exp-readout" and accuracies.name == "accuracy" and accuracies.states == 2 * len(configs)
    assert same(accuracies.work, checkpoints)  # on exp-readout's plan alone
    sweep = sum((sweep_work(c, 4, 0.25, 1) * 4 for c in configs[1:]), sweep_work(configs[0], 4, 0.25, 1) * 4) + loads
    assert same(sweeps, sweep)  # no accuracy: read from exp-readout's records
    alone = plan_pages({"exp-interventions": params}, H100_SPEC, lambda c: 64)[0].analyses
    assert [a.states for a in alone if a.name == "accuracy"] == [2 * len(configs)]  # without exp-readout, its own
    # the per-d columns (`geofact compute --grid-d`) add up to the analyses, each at its refitted factor
    plans = plan_pages(pages, H100_SPEC, lambda c: 64)
    refitted = dataclasses.replace(H100_SPEC, analysis_factors={"interventions": 10.0, "load": 3.0})
    columns = costs.column_seconds(plans, refitted)
    assert math.isclose(sum(a for _, a in columns.values()), sum(a.seconds(refitted) for p in plans for a in p.analyses))
    seconds = analyses["rank sweeps"].parts(H100_SPEC)["loading"]
    assert math.isclose(seconds, loads.loads * costs.LOAD_SECONDS + loads.loaded / costs.LOAD_BYTES_PER_SECOND)


def test_an_analysis_is_scaled_by_the_factor_refitted_to_the_states_its_card_timed():
    """`fit_analysis_factors`: per analysis, measured over priced seconds of one card's timed states (and "load" for
    their loading), at the calibration without factors; the plan then scales that analysis alone."""
    from geofact.ops.costs import (MIN_TIMED_STATES, STATE_WORK, Analysis, Work, _loaded, fit_analysis_factors,
                                   timed_states)

    config = TrainConfig(N=64, R=8, d=16, batch_size=64, max_steps=40)
    params = {"held_out": 0.25, "alpha": 1e-3, "rank_points": 4, "split_seed": 0, "others_per_edit": 1}
    sweep = Analysis("", "interventions", 1, STATE_WORK["interventions"][0](config, params), name="interventions")
    load = Analysis("", "", 1, _loaded(config)).seconds(H100_SPEC)
    base = {"config": config.as_dict(), "params": params, "step": 10, "provenance": {"device": "cuda (NVIDIA H100 80GB HBM3)"}}
    timed = [{**base, "analysis": "interventions",
              "seconds": {"analysis": 3 * sweep.seconds(H100_SPEC), "load": 0.5 * load, "warm": True}}] * MIN_TIMED_STATES
    accuracies = [{**base, "analysis": "accuracy", "params": {}, "seconds": {"analysis": 1.0, "load": 0.0, "warm": True}}] * 2
    states, skipped = timed_states(timed + accuracies, H100_SPEC, "cuda")
    assert not skipped and len(states) == MIN_TIMED_STATES + 2
    factors = fit_analysis_factors(states)
    # too few accuracies timed to refit them; an accuracy's state was loaded by the analysis that asked
    assert set(factors) == {"interventions", "load"}
    assert math.isclose(factors["interventions"][0], 3.0) and factors["interventions"][1] == MIN_TIMED_STATES
    assert math.isclose(factors["load"][0], 0.5)
    refitted = dataclasses.replace(H100_SPEC, analysis_factors={k: f for k, (f, _) in factors.items()})
    assert math.isclose(sweep.seconds(refitted), 3 * sweep.seconds(H100_SPEC))
    readout = Analysis("", "readouts", 1, Work(bytes=1e9, loads=1.0, loaded=4e6), name="readouts")
    parts, plain = readout.parts(refitted), readout.parts(H100_SPEC)
    assert math.isclose(parts["memory"], plain["memory"]) and math.isclose(parts["loading"], 0.5 * plain["loading"])
    # states priced at a calibration carrying the factors already look priced right (1.0): a refit that stored that
    # would lose the factor, which is why bench/calibrate_analyses.py prices them without (its test refits twice)
    assert math.isclose(fit_analysis_factors(timed_states(timed, refitted, "cuda")[0])["interventions"][0], 1.0)


def test_a_state_read_ahead_is_checked_by_its_whole_loading_and_says_how_much_was_hidden():
    """Since the reads ahead (geofact.analysis.trajectory.Prefetch) a record times its read and its copy apart: its
    whole loading is their sum, whatever the analysing thread waited ("load")."""
    from geofact.ops.costs import analysis_errors, timed_states

    config = TrainConfig(N=64, R=8, d=16, batch_size=64, max_steps=40)
    params = {"held_out": 0.25, "alpha": 1e-3, "split_seed": 0}
    base = {"config": config.as_dict(), "params": params, "step": 10, "analysis": "readouts",
            "provenance": {"device": "cuda (NVIDIA H100 80GB HBM3)"}}
    ahead = {**base, "seconds": {"load": 0.001, "read": 0.04, "copy": 0.001, "ahead": True, "analysis": 0.1, "warm": True}}
    asked = {**base, "step": 20, "seconds": {"load": 0.05, "read": 0.045, "copy": 0.004, "ahead": False, "analysis": 0.1,
                                              "warm": True}}
    old = {**base, "step": 30, "seconds": {"load": 0.05, "accuracy": None, "analysis": 0.1, "warm": True}}  # before
    states, _ = timed_states([ahead, asked, old], H100_SPEC, "cuda")
    assert [round(st.loaded, 3) for st in states] == [0.041, 0.049, 0.05]
    assert [round(st.hidden, 3) for st in states] == [0.04, 0.0, 0.0]
    lines = analysis_errors([ahead, asked, old], H100_SPEC, "cuda")
    assert any("loading the weights 0.14 s (0.04 of it read ahead, out of the analysis's way)" in line for line in lines)
