# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Causal interventions: is the MLP a relation-specific selector?
#
# > "Across all configurations with sufficient capacity, selectivity is high: the MLP correctly follows
# > counterfactual changes to the queried relation while leaving other relations unaffected [...] the
# > rank truncation matters: using the full pseudoinverse introduces noise from small singular values,
# > while truncating to $k \approx d_{\min}$ yields the cleanest interventions." (Section 5.2,
# > `fig:selectivity`)
#
# In Theorem 4.1's construction the MLP gates the subject's superposition by relation, so changing one
# attribute inside the superposition changes the answer to that relation only. This page edits the
# trained models of {doc}`exp-capacity` in the same way and counts what follows.
#
# **Method** (`geofact.analysis.interventions`, Appendix B.3). For relation $r$ the readout map $W_r$
# is fitted from the hidden state $h(x, r)$ to the attribute vector (the output unembedding, as on
# {doc}`exp-readout`) on 80% of the subjects. Each held-out subject $x$ gets, for each relation $r$, a
# random new attribute $y' \neq g_r(x)$ and the minimum-norm edit
#
# $$\delta = (a_{y'} - a_{g_r(x)})\, W_r^{+(k)}$$
#
# with $W_r^{+(k)}$ the pseudoinverse from the top $k$ singular values. The edit stands for a change of
# the subject, so it is added to the hidden state of *every* relation's query about $x$, and the
# model's MLP and unembedding run on the edited states:
# $A$ = fraction of edits after which relation $r$ answers $y'$ (the model follows),
# $C$ = fraction of (edit, $r' \neq r$) after which relation $r'$ still answers $g_{r'}(x)$ (the others
# stay), selectivity $= \sqrt{A C}$, best over $k$.
#
# **Reference levels.** An edit that does nothing has $A = 0$ and selectivity 0; one that scrambles
# every answer has $A \approx C \approx 1/N$. Keeping the others and hitting $y'$ by luck gives
# $\sqrt{1/N}$, drawn on the figure. Models with frozen embeddings are the comparison the paper uses.
#
# **Models.** The capacity grid of {doc}`exp-capacity` (one definition per profile), from the run cache
# with its training checkpoints. The interventions run at every checkpoint and at the stop rule; the
# verdicts are taken at the stop rule. $a_y$ is the output unembedding (as on {doc}`exp-readout`); the
# input embedding of $y$ is run beside it.

# %% tags=["parameters"]
capacity_grid = None  # the grid shared with exp-capacity (geofact.training.grid.CapacityGrid fields); None: the paper's
held_out = 0.2  # fraction of subjects whose edits are scored
alpha = 1e-3  # ridge penalty of the readout maps
rank_points = 32  # ranks k swept per model: about this many, from 1 to d
others_per_edit = None  # C scored on this many other relations drawn per edit (None: all R - 1); the same at every rank
high = 0.8  # selectivity the verdict calls high
high_cutoffs = [0.5, 0.7, 0.8, 0.9]  # the table of how the verdict moves with the cutoff
meaningful = 0.5  # the best rank is judged only in cells whose best selectivity is at least this
min_headroom = 3.0  # sufficient capacity: every learned seed memorises and d is at least this times the learned threshold
# (from about 3x its threshold a run meets the paper's stop rule within 15,000 steps: exp-capacity's table)
headroom_cutoffs = [1.0, 2.0, 3.0, 6.0]
split_seed = 0  # held-out subjects and the swaps
trajectory_grid = None  # the second grid, at a larger N (geofact.training.grid.ladder_grids); None: none
erosion_tolerance = 0.05  # a mean drop from the peak to the stop beyond this is called erosion
erosion_tolerances = [0.02, 0.05, 0.1]  # the table of how that call moves with the tolerance
erosion_control = None  # {"R": R, "d": d, "weight_decay": w}: one cell of the grid retrained with another weight decay; None: none
spike_R = 10  # exp-capacity's spike study (its cell of the grid, seeds and steps: one definition per profile) ...
spike_d = 256
spike_seeds = [0, 1, 2, 3, 4, 5]
spike_steps = 15000
spike_keep_every = 1000  # ... whose kept states this page reads around a spike: one every this many steps (None: none)
spike_second = None  # {"R": R, "d": d, "seeds": [...]}: the spike study at a cell of the second grid (its three recipes); None: none
cache_dir = None  # the run cache; None means .geofact/runs in this checkout
device = "cpu"
precision = "fp32"  # matmul policy of training (geofact.precision); `geofact run --precision`, default tf32 on cuda

# %%

import math
from dataclasses import replace

import numpy as np
from matplotlib import pyplot as plt

from geofact.analysis.interventions import Selectivity, checked_others_per_edit, others_scored, rank_grid, selectivity_sweep
from geofact.analysis.judging import cutoff_table, format_table, grid_state
from geofact.evidence import Contrast, Estimate, Range, t_interval, universal
from geofact.analysis.trajectory import (READINGS, analyse_grid, analyse_readings, analyse_state, final_values,
                                         reading_values, train_grid, train_grids)
from geofact.pages.along_training import courses_by_n, drop_figure, erosion_summary
from geofact.pages.curves import headroom_curves, r_colors, trajectory_figure
from geofact.pages.display import Markdown, display
from geofact.pages.heatmap import heatmap_panels
from geofact.pages.legends import legend
from geofact.pages.page import Page
from geofact.pages.plotting import COLORS, subplots
from geofact.pages.readings import read_at_points
from geofact.pages.spike_mechanism import effect_words, second_spike_section, spike_section, study_panels
from geofact.pages.spike_section import spike_tables
from geofact.training.grid import REGIMES, CapacityGrid, ladder_grids, restriction
from geofact.training.sweep import run_sweep
from geofact.regime import judge_in_regime

page = Page("exp-interventions", cache_dir)
report = page.report
cache = page.cache()
grid = CapacityGrid.from_parameter(capacity_grid, precision)
report.scale(grid.scale() + (f"; along training also a second grid at N = {trajectory_grid['N']}" if trajectory_grid else ""))
for name, value in [("high", high), ("held_out", held_out), ("meaningful", meaningful)]:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
if rank_points < 1:
    raise ValueError(f"rank_points must be >= 1, got {rank_points}")
checked_others_per_edit(others_per_edit)
if min_headroom not in headroom_cutoffs or high not in high_cutoffs:
    raise ValueError("headroom_cutoffs and high_cutoffs must include min_headroom and high")

records = train_grid(grid, cache, device)

def best_edit(model, target: str = "unembedding") -> dict[str, float]:
    sweep = selectivity_sweep(model, rank_grid(model.config.d, rank_points), held_out, alpha, split_seed, target,
                              others_per_edit)
    best = max(sweep, key=lambda s: s.score)
    return {"selectivity": best.score, "k": best.k, "follows": best.follows, "stays": best.stays, "sweep": sweep}


def analyse(model) -> dict:
    out = best_edit(model)
    out["sweep"] = [[s.k, s.follows, s.stays] for s in out["sweep"]]  # the whole rank sweep (the rank plot, the full-rank claim)
    if model.step is None:  # at the stop: the edit of the embeddings too
        emb = best_edit(model, "embedding")
        out.update({"selectivity_emb": emb["selectivity"], "k_emb": emb["k"]})
    return out


analysis_params = {"held_out": held_out, "alpha": alpha, "rank_points": rank_points, "split_seed": split_seed,
                   "others_per_edit": others_per_edit}
points = analyse_grid(grid, records, cache, analyse, "interventions", analysis_params, desc="interventions",
                      device=device)
sweeps = {key: [Selectivity(*row) for row in pts[-1].values["sweep"]] for key, pts in points.items()}  # key -> rank sweep
selectivity, k_best = final_values(grid, points, "selectivity"), final_values(grid, points, "k")
state = grid_state(grid, records, headroom_cutoffs)
acc, met, d_min, headroom, population = state.accuracy, state.converged, state.d_min, state.headroom, state.population
judged = population[min_headroom]
lucky = (1 / grid.N) ** 0.5
report.number("perfect", grid.perfect)
report.number("lucky", lucky)
report.number("min_headroom", min_headroom)
report.number("n_judged", int(judged.sum()))

# %%
# C's count: every other relation after each edit, or `others_per_edit` of them drawn per edit (each other relation
# equally likely, the same pairs at every rank); its binomial error (pairs taken as independent) beside the seeds' spread
edited_n = max(1, round(held_out * grid.N))
pairs = {R: R * edited_n * others_scored(R, others_per_edit) for R in grid.R_values}
sampled = any(pairs[R] < R * (R - 1) * edited_n for R in grid.R_values)
stays_final = final_values(grid, points, "stays")["learned"]  # (R, d, seed), at the best rank
c_error = [float(np.sqrt(c * (1 - c) / pairs[grid.R_values[i]])) for i, j in zip(*np.nonzero(judged)) if pairs[grid.R_values[i]]
           for c in stays_final[i, j]]
seed_spread = [float(selectivity["learned"][i, j].std(ddof=1)) for i, j in zip(*np.nonzero(judged)) if len(grid.seeds) > 1]
report.number("c_pairs_sampled", sampled, glue=False)
report.number("c_error_max", max(c_error) if c_error else None, glue=False)
display(Markdown(
    (f"**How C is counted.** After each edit, {others_per_edit} other relation{'s' if others_per_edit != 1 else ''} "
     "drawn at random (each equally likely, "
     f"the same at every rank) have their answers checked, not all R - 1: R min({others_per_edit}, R - 1) n pairs a "
     f"state (n = {edited_n} edited subjects a relation), so C is estimated without bias (its best over the ranks sits a "
     "little above the full count's: CHANGELOG, 2026-11-30)" if sampled else
     "**How C is counted.** After each edit every other relation's answer is checked: "
     f"R (R - 1) n pairs a state (n = {edited_n} edited subjects a relation)")
    + (f". Its binomial standard error at the judged cells' best rank is at most {max(c_error):.4f} (pairs taken as "
       "independent)" + (f"; the seeds' standard deviation of the best selectivity there has median {np.median(seed_spread):.4f}"
                         if seed_spread else "") if c_error else "")
    + "."))

# %% [markdown]
# ## Best selectivity against headroom, at the stop rule (`fig:selectivity`)
#
# Best-$k$ selectivity, mean ± std over seeds, one colour per $R$; learned solid, frozen dashed.
#
# Shown in {numref}`fig-interventions-selectivity` and {numref}`fig-interventions-heatmaps`.

# %% mystnb={"figure": {"caption": "Best selectivity $\\sqrt{AC}$ of a rank-$k$ edit of $h$ against headroom, one colour per $R$, learned solid and frozen dashed, mean ± std over seeds; the dotted line is what luck gives (`fig:selectivity`).", "name": "fig-interventions-selectivity"}}
fig, axes = subplots(1, 1, width=5.6, height=4.0)
ax = axes[0][0]
headroom_curves(ax, grid, headroom, selectivity, "best selectivity sqrt(A C)", high, min_headroom)
ax.axhline(lucky, color=COLORS["baseline"], linestyle=":", label="sqrt(1/N): others kept, y' by luck")
ax.set(ylim=(-0.03, 1.03), title=f"interventions on h, N={grid.N}")
plt.show()

# %% mystnb={"figure": {"caption": "Best selectivity for every $(R, d)$ cell, learned and frozen embeddings, mean ± std over seeds.", "name": "fig-interventions-heatmaps"}}
fig, axes = subplots(2, 1, width=5.6, height=4.2)
heatmap_panels(axes[0], fig, {f"{name} embeddings: best selectivity": selectivity[name] for name in REGIMES},
               grid.d_values, grid.R_values, "best selectivity, mean over seeds")
plt.show()

# %% [markdown]
# ## Along training
#
# Best selectivity at the training checkpoints, against step and training loss, at the largest $d$ of
# each $R$ (mean over seeds).
#
# Shown in {numref}`fig-interventions-trajectory`.

# %% mystnb={"figure": {"caption": "Best selectivity at the training checkpoints against training step (left) and training loss (right), at the largest $d$ of each $R$.", "name": "fig-interventions-trajectory"}}
trajectory_figure(grid, points, "selectivity", "best selectivity")

# %%
first_high = []
for R in grid.R_values:
    for s in grid.seeds:
        pts = points["learned", R, grid.d_values[-1], s]
        first_high.append(next((p.step for p in pts if p.values["selectivity"] >= high), None))
reached = [t for t in first_high if t is not None]
display(Markdown(
    f"**What the trajectory shows.** At the largest $d$, {len(reached)} of {len(first_high)} learned runs reach selectivity "
    f"{high} at some checkpoint or at their stop" + (f" (first at step {min(reached)}, median {int(np.median(reached))})" if reached else "")
    + ". The verdicts below are taken at the stop rule."))

# %% [markdown]
# ## Selectivity along training, at two $N$
#
# Is the edit's selectivity a property of the converged model, or of a moment in training? For every
# run of the capacity grid and of a second grid at a larger $N$ (`trajectory_grid`: one $d$ ladder per
# $R$, from below the learned threshold to several times it, two seeds, both regimes, the same recipe
# with the batch in proportion to $N$, so that a step is as many epochs at both $N$), the best
# selectivity at every checkpoint and at the stop rule gives three numbers per run: its **peak** (the
# largest over the kept states), its value at the **stop**, and the **drop** between them. The cells
# judged are those with sufficient capacity (every learned seed memorises, $d \geq$
# {glue:text}`min_headroom:g` $d_{\min}$), as for the verdicts; the test pools their runs. The peak is
# the largest of six or so noisy measurements, so it sits above the run's best by about the
# measurement noise and the drop is never negative: a mean drop is called erosion only beyond
# `erosion_tolerance` = {glue:text}`erosion_tolerance:g`, and the table shows the call at other
# tolerances.

# %%
second_grids = ladder_grids(trajectory_grid, precision)
cells_by_n = courses_by_n(grid, points, "selectivity", headroom, judged, second_grids, cache, analyse, "interventions",
                          analysis_params, min_headroom, device, "interventions")
report.number("erosion_tolerance", erosion_tolerance)
if len(cells_by_n) > 1:
    display(Markdown("Shown in {numref}`fig-interventions-drop`."))

# %% mystnb={"figure": {"caption": "Drop of the best selectivity between its peak along training and the stop rule, per cell (mean over seeds, bar: smallest to largest), against headroom, one colour per $R$ and one marker per $N$; filled markers are the judged cells, the dotted line the erosion tolerance.", "name": "fig-interventions-drop"}}
if len(cells_by_n) > 1:
    drop_figure(cells_by_n, "best selectivity", erosion_tolerance)

# %%
erosion_text, erosion = erosion_summary(cells_by_n, "selectivity", erosion_tolerance, erosion_tolerances, high, "high")
report.number("erosion", erosion, glue=False)
display(Markdown(erosion_text))

# %% [markdown]
# **What drives an erosion** (weight decay, the loss spikes, or both) is measured further down, around a
# spike: at one cell of each grid, whose runs are trained under the paper's recipe, without weight decay
# and without the spikes.

# %% [markdown]
# ### One controlled comparison: weight decay
#
# AdamW's decoupled weight decay (0.1, Appendix B) keeps shrinking every weight after the training loss
# is nearly zero, and the stop rule (loss below $10^{-4}$) lets that go on for thousands of steps
# after the model has memorised: a candidate cause of an erosion. `erosion_control` retrains one cell
# of the capacity grid, every seed and both regimes, with another weight decay and nothing else
# changed (the same batches, initialisation and checkpoints), and compares each seed's drop with its
# own run at the grid's weight decay.

# %%
def selectivity_course(config, record: dict) -> tuple[list[int], list[float]]:
    """(steps, best selectivity) of one run at the grid's checkpoints before its end, then at its end."""
    steps = [cp["step"] for cp in record.get("checkpoints", []) if cp["step"] in grid.checkpoints and cp["step"] < record["steps"]]
    values = [analyse_state(cache, config, step, analyse, "interventions", analysis_params, record["accuracy"],
                            device)["values"]["selectivity"] for step in steps + [None]]
    return steps + [record["steps"]], values


if erosion_control is not None and restriction() is not None and not (
        erosion_control.get("R") in grid.R_values and erosion_control.get("d") in grid.d_values):
    erosion_control = None  # a lease computing other cells of the grid (`geofact compute --grid-R/--grid-d`)
if erosion_control is not None:
    if set(erosion_control) != {"R", "d", "weight_decay"} or erosion_control["R"] not in grid.R_values \
            or erosion_control["d"] not in grid.d_values or erosion_control["weight_decay"] < 0:
        raise ValueError(f"erosion_control must be None or {{'R': one of {list(grid.R_values)}, 'd': one of "
                         f"{list(grid.d_values)}, 'weight_decay': >= 0}}, got {erosion_control}")
    R_x, d_x, wd_x = erosion_control["R"], erosion_control["d"], erosion_control["weight_decay"]
    wd_grid = grid.config(R_x, d_x, False, 0).weight_decay
    # three arms per seed: the grid's run, the control (another weight decay, the stop rule) and the control
    # continued without the stop rule for as many steps as the grid's run took
    arm_configs = {}
    for name, frozen in REGIMES.items():
        for s in grid.seeds:
            arm_configs["grid", name, s] = grid.config(R_x, d_x, frozen, s)
            arm_configs["control", name, s] = grid.config(R_x, d_x, frozen, s, weight_decay=wd_x)
            arm_configs["continued", name, s] = grid.config(R_x, d_x, frozen, s, weight_decay=wd_x, loss_threshold=0.0,
                                                            max_steps=records[name, R_x, d_x, s]["steps"])
    arm_records = dict(zip(arm_configs, run_sweep(list(arm_configs.values()), cache, device=device, checkpoints=grid.checkpoints)))
    arms = {key: selectivity_course(arm_configs[key], arm_records[key]) for key in arm_configs}
    control_lines, step_ratio, separated = [], [], {}
    for name in REGIMES:
        peak_and_stop = {arm: [(max(arms[arm, name, s][1]), arms[arm, name, s][1][-1]) for s in grid.seeds]
                         for arm in ("grid", "control", "continued")}
        grid_steps = [arm_records["grid", name, s]["steps"] for s in grid.seeds]
        control_steps = [arm_records["control", name, s]["steps"] for s in grid.seeds]
        diff = t_interval([(g[0] - g[1]) - (c[0] - c[1]) for g, c in zip(peak_and_stop["grid"], peak_and_stop["control"])],
                          f"drop at weight decay {wd_grid:g} minus drop at {wd_x:g}", unit="seeds")
        time_effect = t_interval([c[1] - x[1] for c, x in zip(peak_and_stop["control"], peak_and_stop["continued"])],
                                 f"weight decay {wd_x:g}: selectivity at its own stop minus after the grid run's steps",
                                 unit="seeds")
        decay_effect = t_interval([x[1] - g[1] for x, g in zip(peak_and_stop["continued"], peak_and_stop["grid"])],
                                  f"at the grid run's steps: weight decay {wd_x:g} minus {wd_grid:g}", unit="seeds")
        peak_effect = t_interval([c[0] - g[0] for c, g in zip(peak_and_stop["control"], peak_and_stop["grid"])],
                                 f"peak at weight decay {wd_x:g} minus at {wd_grid:g}", unit="seeds")
        separated[name] = (time_effect, decay_effect, peak_effect)
        control_lines.append(
            f"- {name}: at weight decay {wd_grid:g} peak {np.mean([g[0] for g in peak_and_stop['grid']]):.3f}, "
            f"stop {np.mean([g[1] for g in peak_and_stop['grid']]):.3f} (steps {grid_steps}); "
            f"at {wd_x:g} peak {np.mean([c[0] for c in peak_and_stop['control']]):.3f}, "
            f"stop {np.mean([c[1] for c in peak_and_stop['control']]):.3f} (steps {control_steps}), "
            f"continued to the grid run's steps {np.mean([x[1] for x in peak_and_stop['continued']]):.3f}; {diff.text()}.")
        report.number(f"control_{name}", diff.as_dict(), glue=False)
        report.number(f"control_time_{name}", time_effect.as_dict(), glue=False)
        report.number(f"control_decay_{name}", decay_effect.as_dict(), glue=False)
        step_ratio.append(np.mean(grid_steps) / np.mean(control_steps))
    display(Markdown(
        f"**Weight decay at R = {R_x}, d = {d_x}** (paired by seed):\n\n" + "\n".join(control_lines) + "\n\n"
        "Its peak minus the grid's: " + "; ".join(f"{name} {effect_words(e[2])}" for name, e in separated.items()) + ". "
        f"Its runs also reach the stop rule {min(step_ratio):.1f} to {max(step_ratio):.1f} times sooner: the third arm, "
        "below, separates the two."))

# %% [markdown]
# ### Weight decay, or the steps it adds?
#
# The runs at the control's weight decay reach the stop rule sooner, so the comparison above mixes
# weight decay's pull on the weights with the extra steps it causes. The third arm separates them:
# each control run trained again without the stop rule (`loss_threshold` 0) for exactly as many steps
# as its own seed's run at the grid's weight decay took. Up to its own stop it is the control run
# itself (the same initialisation and batches). Paired by seed, two differences of selectivity:
#
# - **training on**: the control run at its own stop minus the same run after the grid run's steps
#   (what the extra steps cost, at the control's weight decay);
# - **weight decay at equal steps**: the continued run minus the grid's run at its stop (what weight
#   decay costs, at the same step).
#
# An interval that excludes 0 is an effect; one that includes 0 is none this scale can see.
#
# Shown in {numref}`fig-interventions-control`.

# %% mystnb={"figure": {"caption": "Best selectivity along training at the control cell, per seed, for the grid's run (its weight decay, the stop rule), the control (another weight decay, the stop rule) and the control continued without the stop rule to the grid run's number of steps; the last point of each line is the run's end.", "name": "fig-interventions-control"}}
if erosion_control is not None:
    fig, axes = subplots(2, 1, width=4.8, height=3.6, sharey=True)
    arm_style = {"grid": (COLORS["measured"], f"weight decay {wd_grid:g}, stop rule"),
                 "control": (COLORS["alt"], f"weight decay {wd_x:g}, stop rule"),
                 "continued": (COLORS["theory"], f"weight decay {wd_x:g}, to the grid run's steps")}
    for ax, name in zip(axes[0], REGIMES):
        for arm, (color, label) in arm_style.items():
            for i, s in enumerate(grid.seeds):
                steps, values = arms[arm, name, s]
                ax.plot(steps, values, "o-", color=color, alpha=0.8, markersize=3, label=label if i == 0 else None)
        ax.set(xlabel="training step", ylabel="best selectivity", title=f"{name}: R={R_x}, d={d_x}")
    legend(axes[0][0])
    plt.show()

# %%
if erosion_control is not None:
    display(Markdown("**What separates them** (95% Student-t intervals over seeds):\n\n" + "\n".join(
        f"- {name}: training on {effect_words(time_effect)}; weight decay at equal steps {effect_words(decay_effect)}."
        for name, (time_effect, decay_effect, _) in separated.items())))
    if (R_x, d_x) == (spike_R, spike_d):
        display(Markdown(
            "This cell is also the spike study's, where runs at the grid's weight decay spike before they meet "
            "the stop rule (exp-capacity): the weight decay's effect above may come through the spikes. The section on "
            "selectivity around a spike, below, separates them on the states the study keeps."))

# %% [markdown]
# ## Loss spikes along these runs
#
# The runs this page reads (both grids) by the loss-spike rule of {doc}`exp-capacity` (running minimum
# below {glue:text}`spike_rule_floor:g`, then the loss above {glue:text}`spike_rule_factor:g` times it;
# headroom against the learned threshold): a state kept just after a spike may read a model other than
# the one that memorised. The curves are on {doc}`exp-readout`, the cause on {doc}`exp-capacity`.

# %%
spike_records, spike_runs = spike_tables(report, [grid, *second_grids], [records, *train_grids(second_grids, cache, device)],
                                         min_headroom)

# %% [markdown]
# Of the {glue:text}`spike_memorised` runs that memorised by this rule, {glue:text}`spike_spiking` spiked
# ({glue:text}`spike_above_1000` more than 1000-fold), and {glue:text}`spike_met_stop_rule` of those met
# the stop rule afterwards.

# %% [markdown]
# ## Selectivity around a spike: before, at the peak, after, and what erodes it
#
# The runs above keep their weights only at a few checkpoints and at the stop rule, so a spike between
# two of them is not seen in the mechanism. {doc}`exp-capacity`'s spike study (here
# {glue:text}`spike_mech_cell`, learned embeddings, no stop rule) keeps, for three of its recipes, a state
# every `spike_keep_every` steps and at six reading points of each run (`geofact.spikes.READING_POINTS`):
# the best state before any spike, the step just before the first spike, the spike's peak, the first
# step back under the floor, the stop rule's state (what the sections above read) and the end of the
# budget. The recipes: the paper's; without weight decay ("wd 0", whose runs still spike, later); and the
# learning rate cut tenfold once the loss is under the floor ("lr/10 after", which removes the spikes at
# this cell, but also cuts AdamW's decay per step tenfold, the decay being lr x weight decay).
#
# **Rule.** Around the spike, a seed-paired difference whose 95% interval excludes 0 is an effect. A
# recipe *erodes* when its drop (the highest value kept up to a point minus the value there) has an
# interval wholly above the erosion tolerance {glue:text}`erosion_tolerance:g`, *does not* when wholly
# below, and cannot tell otherwise. The erosion is *spike-driven* when it stays without weight decay (whose
# runs still spike) and goes with the spikes; *weight-decay-driven* when it goes without weight decay and
# stays without the spikes.

# %%
spike_study = spike_section(report, grid, spike_R, spike_d, spike_seeds, spike_steps, spike_keep_every, cache,
                            analyse, "interventions", analysis_params, "selectivity", "best selectivity", erosion_tolerance, device)

# %% [markdown]
# Erosion to the end of the budget: **{glue:text}`spike_erosion_cause_last`** ({glue:text}`spike_erosion_why_last`).
# To the stop rule: **{glue:text}`spike_erosion_cause_stop`** ({glue:text}`spike_erosion_why_stop`). Shown in
# {numref}`fig-interventions-spike-study`.

# %% mystnb={"figure": {"caption": "The spike study's kept runs, one column per recipe: the batch loss of each seed (top, the largest in each window of 100 steps, log scale; dotted: the stop rule and the spike floor) and the best selectivity at the states kept every `spike_keep_every` steps (bottom), the reading points marked.", "name": "fig-interventions-spike-study"}}
if spike_study is not None:
    study_panels(spike_study[0], "best selectivity", grid.loss_threshold)
    plt.show()

# %% [markdown]
# ### The same at the second grid's $N$

# %%
second_spike = second_spike_section(report, second_grids, spike_second, spike_steps, spike_keep_every, cache, analyse,
                                    "interventions", analysis_params, "selectivity", "best selectivity", erosion_tolerance, device,
                                    what="the selectivity")
if second_spike is not None:  # the figure exists only where the profile gives the cell
    display(Markdown("Shown in {numref}`fig-interventions-spike-study-second`."))

# %% mystnb={"figure": {"caption": "The spike study at the second grid's N, one column per recipe: the batch loss of each seed (top, the largest in each window of 100 steps, log scale; dotted: the stop rule and the spike floor) and the best selectivity at the states kept every `spike_keep_every` steps (bottom), the reading points marked.", "name": "fig-interventions-spike-study-second"}}
if second_spike is not None:
    study_panels(second_spike[0], "best selectivity", grid.loss_threshold)
    plt.show()

# %% [markdown]
# ## The rank $k$: follows, stays and selectivity
#
# For one cell at the stop rule (in Jupyter the control picks any cell). The vertical line is
# $d_{\min}(R)$, the smallest grid $d$ at which the learned model memorises.
#
# Shown in {numref}`fig-interventions-rank`.

# %% mystnb={"figure": {"caption": "One cell at the stop rule: the fraction of queries that follow the swap (A), of other relations that stay (C), and the selectivity $\\sqrt{AC}$, against the rank $k$ of the pseudoinverse; the vertical line is $d_{\\min}(R)$.", "name": "fig-interventions-rank"}}
def rank_plot(R: int, d: int, seed: int) -> None:
    """A, C and selectivity against k for one grid cell, learned and frozen."""
    fig, axes = subplots(2, 1, width=4.8, height=3.6, sharey=True)
    threshold = d_min[grid.R_values.index(R)]
    for ax, name in zip(axes[0], REGIMES):
        sweep = sweeps[name, R, d, seed]
        ks = [s.k for s in sweep]
        ax.plot(ks, [s.follows for s in sweep], color=COLORS["measured"], label="A: follows the swap")
        ax.plot(ks, [s.stays for s in sweep], color=COLORS["alt"], label="C: other relations stay")
        ax.plot(ks, [s.score for s in sweep], color="black", label="selectivity sqrt(A C)")
        if threshold is not None:
            ax.axvline(threshold, color=COLORS["theory"], linestyle=":", label=f"d_min(R={R}) = {threshold}")
        ax.set(xlabel="rank k of the pseudoinverse", ylabel="fraction", title=f"{name}: R={R}, d={d}, seed {seed}")
    legend(axes[0][0])
    plt.show()


example_R = max(R for R in grid.R_values if R <= 8) if min(grid.R_values) <= 8 else grid.R_values[0]
page.interactive(rank_plot, defaults=dict(R=example_R, d=grid.d_values[-1], seed=grid.seeds[0]),
            R=list(grid.R_values), d=list(grid.d_values), seed=list(grid.seeds))

# %% [markdown]
# ## The best $k$ against $d_{\min}$
#
# Shown in {numref}`fig-interventions-best-k`.

# %% mystnb={"figure": {"caption": "The rank $k$ of the best selectivity against $d$ for learned embeddings, one colour per $R$, beside $d_{\\min}(R)$ (dotted) and the full pseudoinverse $k = d$ (dashed).", "name": "fig-interventions-best-k"}}
fig, axes = subplots(1, 1, width=5.6, height=4.0)
ax = axes[0][0]
colors = r_colors(grid)
for i, R in enumerate(grid.R_values):
    ax.errorbar(grid.d_values, k_best["learned"][i].mean(-1), yerr=k_best["learned"][i].std(-1), fmt="o-", color=colors[R],
                capsize=2, label=f"R={R}: best k")
    if d_min[i] is not None:
        ax.axhline(d_min[i], color=colors[R], linestyle=":", label=f"R={R}: d_min = {d_min[i]}")
ax.plot(grid.d_values, grid.d_values, color=COLORS["baseline"], linestyle="--", label="k = d (full pseudoinverse)")
ax.set(xscale="log", yscale="log", xlabel="embedding dimension d", ylabel="k of the best selectivity", title=f"learned embeddings, N={grid.N}")
ax.set_xticks(grid.d_values, [str(d) for d in grid.d_values])
ax.minorticks_off()
legend(ax, ncol=2)
plt.show()

sel_emb = final_values(grid, points, "selectivity_emb")
print(f"{'R':>3} {'d':>4} {'d/d_min':>7} {'acc':>6} {'met':>4} {'sel':>6} {'k*':>6} {'sel(emb)':>8} | frozen {'sel':>6} {'sel(emb)':>8}")
for i, R in enumerate(grid.R_values):
    for j, d in enumerate(grid.d_values):
        print(f"{R:>3} {d:>4} {headroom[i, j]:>7.1f} {acc['learned'][i, j].mean():>6.3f} {met['learned'][i, j].mean():>4.1f} "
              f"{selectivity['learned'][i, j].mean():>6.3f} {k_best['learned'][i, j].mean():>6.1f} {sel_emb['learned'][i, j].mean():>8.3f} | "
              f"       {selectivity['frozen'][i, j].mean():>6.3f} {sel_emb['frozen'][i, j].mean():>8.3f}")

# %% [markdown]
# Columns: headroom, the learned model's accuracy and fraction of seeds meeting the stop rule, best
# selectivity and its $k$ with $a_y$ = output unembedding, best selectivity with $a_y$ = input embedding;
# the same two selectivities for frozen models.
#
# ## Verdicts
#
# **Population**: cells where every seed of the learned model memorises, with
# $d \geq$ {glue:text}`min_headroom:g` $d_{\min}(R)$ ({glue:text}`n_judged:d` cells). Each verdict is a
# test against an alternative (geofact.evidence). *High selectivity* is universal ("across all
# configurations"): every cell's mean over its seeds, with its Student-$t$ interval, must lie at or
# above `high`. The claim on the rank is split in two: *the full pseudoinverse introduces noise* (the
# best selectivity minus the full pseudoinverse's, run by run, against 0), and *the best rank is near
# $d_{\min}$* (the mean $|\log_2(k / d_{\min})|$ against a factor 2), judged only in cells whose best
# selectivity is at least `meaningful`: where no rank gives a clean edit, the best $k$ is noise.

# %%
sel_learned = selectivity["learned"].mean(-1)
rows = cutoff_table(sel_learned, population, high_cutoffs)
display(Markdown("**Best selectivity, learned embeddings** (cells passing / cells judged):\n\n" + format_table(rows, "selectivity")))
report.number("table_selectivity", rows, glue=False)
learned_regime = state.judged_regime(grid, judged)
report.number("converged_fraction", learned_regime.converged_fraction)  # the runs behind the verdicts
report.number("grid_converged_fraction", state.grid_regime(grid).converged_fraction)
report.number("headroom_max", learned_regime.headroom_max)


def judge_interventions(report, values: dict) -> None:
    """The three verdicts of this page from `values` ({"selectivity", "k", "selectivity_emb": {regime: (R, d,
    seed)}, "sweeps": {run: rank sweep}}) on `report`: called on the edits at the stop rule for the page's
    report, and again at the other reading points (below)."""
    selectivity, k_best, sel_emb, sweeps = values["selectivity"], values["k"], values["selectivity_emb"], values["sweeps"]
    sel_learned = selectivity["learned"].mean(-1)
    sel_judged = sel_learned[judged]
    report.number("selectivity_judged_min", float(sel_judged.min()) if judged.any() else None, glue=bool(judged.any()))
    report.number("selectivity_frozen_max", float(selectivity["frozen"].mean(-1).max()))
    # a selectivity lies in [0, 1]: a cell's interval is cut there (three seeds far apart reach past it)
    selectivity_tests = [replace(t, estimate=t.estimate.within(0.0, 1.0)) for t in universal(
        {f"R={grid.R_values[i]}, d={grid.d_values[j]}": selectivity["learned"][i, j] for i, j in zip(*np.nonzero(judged))},
        "best selectivity at {}", Range(high, 1.0, "high"), Range(0.0, high, "below high"))]
    judge_in_regime(report, "exp-selectivity-high", selectivity_tests or [Contrast(
            Estimate.missing("best selectivity", "no cell has sufficient capacity"),
            Range(high, 1.0, "high"), Range(0.0, high, "below high"))],
        measured=(f"best selectivity in the {int(judged.sum())} cells with sufficient capacity: "
                  + (f"{sel_judged.min():.2f}-{sel_judged.max():.2f}" if judged.any() else "n/a")
                  + f"; frozen models at most {selectivity['frozen'].mean(-1).max():.2f} (N={grid.N}, R in {list(grid.R_values)}, "
                  f"d in {list(grid.d_values)}, {len(grid.seeds)} seeds; a_y = output unembedding; with a_y = input embedding "
                  f"{sel_emb['learned'].mean(-1)[judged].min() if judged.any() else float('nan'):.2f} at least)"),
        population={"embeddings": "learned", "memorised": "every seed", "min_headroom": min_headroom, "unit": "cell, each tested (its seeds)"},
        note=f"high taken as >= {high}, by the whole interval of every cell", regime=learned_regime)

    # the rank: what truncation gains over the full pseudoinverse, run by run
    judged_runs = [(name, R, d, s) for name in ("learned",) for i, R in enumerate(grid.R_values) for j, d in enumerate(grid.d_values)
                   if judged[i, j] for s in grid.seeds]
    full_rank = [key for key in judged_runs if max(sweeps[key], key=lambda s: s.score).k == key[2]]
    gain = np.array([max(s.score for s in sweeps[key]) - next(s.score for s in sweeps[key] if s.k == key[2]) for key in judged_runs])
    no_cell = Estimate.missing("selectivity gain", "no cell has sufficient capacity")
    judge_in_regime(report, "exp-selectivity-full-rank",
        Contrast(t_interval(gain, "best selectivity minus the full pseudoinverse's, over runs", 0.95, unit="runs") if gain.size else no_cell,
                 Range(0.0, 1.0, "truncation helps"), Range(-1.0, 0.0, "the full pseudoinverse is as good")),
        measured=f"the full rank k = d is the best rank for {len(full_rank)} of {len(judged_runs)} learned runs with sufficient capacity",
        population={"embeddings": "learned", "memorised": "every seed", "min_headroom": min_headroom, "unit": "run"},
        regime=learned_regime)
    meaningful_cells = judged & (sel_learned >= meaningful)
    ratio = np.array([k_best["learned"][i, j].mean() / d_min[i] for i, j in zip(*np.nonzero(meaningful_cells))])
    near = int(((ratio >= 0.5) & (ratio <= 2)).sum())
    report.number("k_ratio_median", float(np.median(ratio)) if ratio.size else None, glue=bool(ratio.size))
    report.number("n_meaningful", int(meaningful_cells.sum()))
    judge_in_regime(report, "exp-selectivity-rank-dmin",
        Contrast(t_interval(np.abs(np.log2(ratio)), "mean |log2(best k / d_min)| over cells", 0.95, unit="cells").within(0.0) if ratio.size
                 else Estimate.missing("|log2(best k / d_min)|", "no meaningful cell"),
                 Range(0.0, 1.0, "within a factor 2 of d_min"), Range(1.0, math.inf, "farther")),
        measured=((f"best k / d_min(R) in the {ratio.size} cells with sufficient capacity and selectivity >= {meaningful}: median "
                   f"{np.median(ratio):.2f}, range {ratio.min():.2f}-{ratio.max():.2f}, within a factor 2 in {near}") if ratio.size
                  else f"no cell with sufficient capacity reaches selectivity {meaningful}") + f"; d_min = {d_min} for R = {list(grid.R_values)}",
        population={"embeddings": "learned", "memorised": "every seed", "min_headroom": min_headroom,
                    "min_selectivity": meaningful, "unit": "cell (mean over seeds)"},
        note=f"near taken as within a factor 2 (|log2 ratio| <= 1) on average over the cells; meaningful selectivity >= {meaningful}",
        regime=state.judged_regime(grid, meaningful_cells))


stop_values = {"selectivity": selectivity, "k": k_best, "selectivity_emb": sel_emb, "sweeps": sweeps}
judge_interventions(report, stop_values)

# %% [markdown]
# ## The verdicts at three reading points
#
# Runs spike long after they memorise (the spike study above), so the weights a verdict reads depend on
# where training is read. Every run of the capacity grid is trained on to the end of its step budget
# after the stop rule, keeping its state at the stop (what the verdicts above read), its best state
# before any loss spike (the lowest batch loss before the loss first rises {glue:text}`spike_rule_factor:g`
# times above its running minimum, once that minimum is below {glue:text}`spike_rule_floor:g`), and its
# state at the end of the budget. The three verdicts are taken again at the other two points on the same
# runs and the same populations (chosen at the stop rule), the rank sweeps recomputed on those weights
# (the edit of the input embeddings, in the measured text only, is computed at the stop alone).

# %%
reading_keys = state.verdict_keys(grid, judged)
read = analyse_readings(grid, records, cache, analyse, "interventions", analysis_params, reading_keys, device=device)


def values_at(read_values: dict) -> dict:
    """The judge's values from one reading's analyses."""
    return {"selectivity": reading_values(grid, read_values, "selectivity"), "k": reading_values(grid, read_values, "k"),
            "selectivity_emb": reading_values(grid, read_values, "selectivity_emb") if all(
                "selectivity_emb" in v for v in read_values.values()) else grid.by_cell({k: np.nan for k in grid.keys()}),
            "sweeps": {key: [Selectivity(*row) for row in v["sweep"]] for key, v in read_values.items()}}


report.number("n_reading_runs", len(reading_keys))
display(Markdown(read_at_points(report, judge_interventions, {r: values_at(read[r]) if read[r] else None for r in READINGS})))
report.save()
