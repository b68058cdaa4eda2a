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
# # MLP-freeze transfer: does the trained MLP serve new facts?
#
# > "After replacing all bijections $g_r$ with fresh random bijections $g'_r$ and initializing subject
# > embeddings to encode the new superposition via the smart initialization, the frozen MLP achieves
# > substantial accuracy *without any retraining*." (Section 5.2, `fig:freeze-zeroshot`)
# >
# > "The smart-initialization zero-shot column collapses [for the frozen-embedding model] [...]
# > Retraining the subject embeddings does recover high accuracy in some settings." (Appendix D,
# > `fig:frozen-freeze-panel`)
#
# If the MLP is a generic relation-conditioned selector (Theorem 4.1's gate), then new facts need only
# new subject embeddings; if it memorised the table, the embeddings alone cannot serve a new one.
#
# **Method** (`geofact.analysis.transfer`, Appendix B.3). Take a trained model of {doc}`exp-capacity`,
# freeze everything except the subject (input entity) embeddings and draw fresh bijections $g'_r$. Fit
# the readout maps $W_r$ from $s_x$ to the attribute vectors (output unembeddings, as on
# {doc}`exp-readout`) on all subjects, and set
# $s_x = (\text{target}_x - b_{\text{stack}})\,W_{\text{stack}}^{+}$ with
# $\text{target}_x = \text{concat}_r\, a_{g'_r(x)}$: the minimum-norm embedding that the maps read as the
# new attributes. Then retrain the subject embeddings alone (AdamW, the model's learning rate, no early
# stop) under four conditions, with accuracy over all $N R$ facts along the way:
#
# | condition | start | trained toward |
# |---|---|---|
# | control | random embeddings (std 0.02, the model's init) | the original $g$ |
# | random init | the same random embeddings | $g'$ |
# | smart init, zero-shot | the smart initialisation | nothing (step 0) |
# | smart init, retrained | the smart initialisation | $g'$ |
#
# The control asks how fast embeddings alone re-learn a table the rest of the model already knows;
# random init asks the same for a table it does not. One more number needs no training: the smart
# initialisation written for the *original* $g$ ("smart on $g$"), which checks that the readout maps
# read the trained table back. Chance is $1/N$.
#
# The paper does not give the retraining budget or learning rate; they are parameters here.
#
# **Models.** The capacity grid of {doc}`exp-capacity` (one definition per profile), from the run cache
# with its training checkpoints. The zero-shot transfer (no retraining) runs at every checkpoint and at
# the stop rule; the retraining conditions run on the final models. $a_y$ is the output unembedding
# (as on {doc}`exp-readout`); the zero-shot transfer with the input embedding of $y$ is run beside it.

# %% tags=["parameters"]
capacity_grid = None  # the grid shared with exp-capacity (geofact.training.grid.CapacityGrid fields); None: the paper's
retrain_steps = 1000  # steps of retraining the subject embeddings
eval_every = 100  # accuracy over all N R facts every this many retraining steps
retrain_lr = None  # None: each model's own learning rate
new_task_offset = 1000  # the new bijections use the model's task seed plus this
alpha = 1e-3  # ridge penalty of the readout maps behind the smart init
substantial = 0.5  # zero-shot accuracy the verdict calls substantial
substantial_cutoffs = [0.25, 0.5, 0.75, 0.9]  # the table of how the verdict moves with the cutoff
min_headroom = 3.0  # sufficient capacity: every learned seed memorises and d is at least this times the learned threshold
# (from about 3x its threshold a run meets the paper's stop rule within 15,000 steps: exp-capacity's table)
headroom_cutoffs = [1.0, 2.0, 3.0, 6.0]
chance_factor = 5.0  # the verdict calls an accuracy near chance below this many times 1/N
high_accuracy = 0.9  # retrained accuracy the verdict calls high (Appendix D: retraining "recovers high accuracy")
trajectory_grid = None  # the second grid, at a larger N (geofact.training.grid.ladder_grids); None: none
erosion_tolerance = 0.05  # a mean drop from the peak to the stop beyond this is called erosion
erosion_tolerances = [0.02, 0.05, 0.1]  # the table of how that call moves with the tolerance
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

import numpy as np
from matplotlib import pyplot as plt

from geofact.analysis.judging import cutoff_table, format_table, grid_state
from geofact.evidence import Contrast, Estimate, Range, fraction_interval, sensitivity_table, t_interval
from geofact.analysis.trajectory import (READINGS, analyse_grid, analyse_readings, final_values, reading_values,
                                         train_grid, train_grids)
from geofact.analysis.transfer import TransferConfig, fresh_bijections, run_transfers, zero_shot
from geofact.pages.along_training import courses_by_n, drop_figure, erosion_summary
from geofact.pages.curves import headroom_curves, trajectory_figure
from geofact.pages.display import Markdown, display
from geofact.pages.heatmap import heatmap_panels
from geofact.pages.legends import legend
from geofact.pages.page import Page
from geofact.pages.plotting import COLORS, subplots
from geofact.pages.readings import read_at_points
from geofact.pages.spike_mechanism import second_spike_section, spike_section, study_panels
from geofact.pages.spike_section import spike_tables
from geofact.training.grid import REGIMES, CapacityGrid, ladder_grids
from geofact.regime import claim_in_regime, judge_in_regime

page = Page("exp-freeze-transfer", cache_dir)
report = page.report
cache = page.cache()
grid = CapacityGrid.from_parameter(capacity_grid, precision)
report.scale(grid.scale() + (f"; along training also a second grid at N = {trajectory_grid['N']}" if trajectory_grid else ""))
if not 0 < substantial <= 1:
    raise ValueError(f"substantial must be in (0, 1], got {substantial}")
if chance_factor < 1:
    raise ValueError(f"chance_factor must be >= 1, got {chance_factor}")
if not 0 < high_accuracy <= 1:
    raise ValueError(f"high_accuracy must be in (0, 1], got {high_accuracy}")
if new_task_offset == 0:
    raise ValueError("new_task_offset must be non-zero: g' must differ from g")
if min_headroom not in headroom_cutoffs or substantial not in substantial_cutoffs:
    raise ValueError("headroom_cutoffs and substantial_cutoffs must include min_headroom and substantial")

records = train_grid(grid, cache, device)


def transfer_at(model) -> dict[str, float]:
    new = fresh_bijections(model.config.N, model.config.R, model.config.bijection_seed + new_task_offset)
    out = zero_shot(model, new, alpha)
    out["zero_shot_emb"] = zero_shot(model, new, alpha, "embedding")["zero_shot"]
    return out


points = analyse_grid(grid, records, cache, transfer_at, "zero-shot-transfer", {"new_task_offset": new_task_offset, "alpha": alpha},
                      desc="zero-shot transfer", device=device)
configs = grid.configs()
transfers = {key: TransferConfig(c, new_task_seed=c.bijection_seed + new_task_offset, steps=retrain_steps,
                                 eval_every=eval_every, lr=retrain_lr, alpha=alpha) for key, c in configs.items()}
results = dict(zip(transfers, run_transfers(list(transfers.values()), cache, device=device)))
state = grid_state(grid, records, headroom_cutoffs)
acc, d_min, headroom, population = state.accuracy, state.d_min, state.headroom, state.population
judged = population[min_headroom]
PANELS = {  # panel -> (title, value read from a transfer record)
    "control": ("control (g, retrained)", lambda r: r["curves"]["control"][-1][1]),
    "random": ("random init (g', retrained)", lambda r: r["curves"]["random"][-1][1]),
    "zero_shot": ("smart init (g', zero-shot)", lambda r: r["curves"]["smart"][0][1]),
    "smart": ("smart init (g', retrained)", lambda r: r["curves"]["smart"][-1][1]),
}
panel = {key: grid.by_cell({k: read(r) for k, r in results.items()}) for key, (_, read) in PANELS.items()}
zero = final_values(grid, points, "zero_shot")
zero_emb = final_values(grid, points, "zero_shot_emb")
on_g = final_values(grid, points, "smart_on_g")
chance = 1 / grid.N
report.number("retrain_steps", retrain_steps)
report.number("chance", chance)
report.number("perfect", grid.perfect)
report.number("min_headroom", min_headroom)
report.number("n_judged", int(judged.sum()))

# %% [markdown]
# ## Zero-shot accuracy against headroom, at the stop rule (`fig:freeze-zeroshot`)
#
# Accuracy on all $N R$ facts of $g'$ with the smart initialisation and no retraining, one colour per
# $R$, learned solid and frozen dashed, mean ± std over seeds.
#
# Shown in {numref}`fig-transfer-zeroshot`.

# %% mystnb={"figure": {"caption": "Zero-shot accuracy on the new bijections $g'$ with the smart initialisation, against headroom $d/d_{\\min}(R)$: one colour per $R$, learned solid and frozen dashed, mean ± std over seeds (`fig:freeze-zeroshot`).", "name": "fig-transfer-zeroshot"}}
fig, axes = subplots(1, 1, width=5.6, height=4.0)
ax = axes[0][0]
headroom_curves(ax, grid, headroom, zero, "zero-shot accuracy on g'", substantial, min_headroom)
ax.set(ylim=(-0.03, 1.03), title=f"smart-init transfer, N={grid.N}")
plt.show()

# %% [markdown]
# ## Along training
#
# The zero-shot accuracy on $g'$ of the smart initialisation written from each checkpoint's own readout
# maps, against step and training loss, at the largest $d$ of each $R$ (mean over seeds).
#
# Shown in {numref}`fig-transfer-trajectory`.

# %% mystnb={"figure": {"caption": "Zero-shot accuracy of the smart initialisation written from each training checkpoint, against training step (left) and training loss (right), at the largest $d$ of each $R$.", "name": "fig-transfer-trajectory"}}
trajectory_figure(grid, points, "zero_shot", "zero-shot accuracy on g'")
peaks = []
for R in grid.R_values:
    for s in grid.seeds:
        pts = points["learned", R, grid.d_values[-1], s]
        peaks.append((max(p.values["zero_shot"] for p in pts), pts[-1].values["zero_shot"]))
peak, final = np.mean(peaks, 0)
report.number("trajectory_peak_zero_shot", float(peak))
report.number("trajectory_final_zero_shot", float(final))

# %% [markdown]
# **What the trajectory shows.** At the largest $d$ the learned models' zero-shot accuracy peaks at
# {glue:text}`trajectory_peak_zero_shot:.3f` (mean over runs of each run's best state) against
# {glue:text}`trajectory_final_zero_shot:.3f` at the stop rule, where the verdict is taken.
#
# ## Zero-shot transfer along training, at two $N$
#
# Is the transfer a property of the converged model, or of a moment in training? For every run of the
# capacity grid and of a second grid at a larger $N$ (`trajectory_grid`: one $d$ ladder per $R$, from
# below the learned threshold to several times it, two seeds, both regimes, the same recipe with the
# batch in proportion to $N$, so that a step is as many epochs at both $N$), the zero-shot accuracy on
# $g'$ at every checkpoint and at the stop rule gives three numbers per run: its **peak** (the largest
# over the kept states), its value at the **stop**, and the **drop** between them. The cells judged
# are those with sufficient capacity (every learned seed memorises, $d \geq$
# {glue:text}`min_headroom:g` $d_{\min}$), as for the verdicts; the test pools their runs. The peak is
# the largest of six or so noisy measurements, so it sits above the run's best by about the
# measurement noise and the drop is never negative: a mean drop is called erosion only beyond
# `erosion_tolerance` = {glue:text}`erosion_tolerance:g`, and the table shows the call at other
# tolerances. (The retraining conditions below run on the capacity grid's final models only.)

# %%
second_grids = ladder_grids(trajectory_grid, precision)
cells_by_n = courses_by_n(grid, points, "zero_shot", headroom, judged, second_grids, cache, transfer_at, "zero-shot-transfer",
                          {"new_task_offset": new_task_offset, "alpha": alpha}, min_headroom, device, "zero-shot transfer")
report.number("erosion_tolerance", erosion_tolerance)
if len(cells_by_n) > 1:
    display(Markdown("Shown in {numref}`fig-transfer-drop`."))

# %% mystnb={"figure": {"caption": "Drop of the zero-shot accuracy on $g'$ between its peak along training and the stop rule, per cell (mean over seeds, bar: smallest to largest), against headroom, one colour per $R$ and one marker per $N$; filled markers are the judged cells, the dotted line the erosion tolerance.", "name": "fig-transfer-drop"}}
if len(cells_by_n) > 1:
    drop_figure(cells_by_n, "zero-shot accuracy on g'", erosion_tolerance)

# %%
erosion_text, erosion = erosion_summary(cells_by_n, "zero-shot transfer", erosion_tolerance, erosion_tolerances,
                                        substantial, "substantial")
report.number("erosion", erosion, glue=False)
display(Markdown(erosion_text))

# %% [markdown]
# **What drives an erosion** (weight decay, the loss spikes, or both) is measured further down, around a
# spike: at one cell of each grid, whose runs are trained under the paper's recipe, without weight decay
# and without the spikes.

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
# ## Zero-shot transfer around a spike: before, at the peak, after, and what erodes it
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
                            transfer_at, "zero-shot-transfer", {"new_task_offset": new_task_offset, "alpha": alpha}, "zero_shot", "zero-shot accuracy on g'", erosion_tolerance, device)

# %% [markdown]
# Erosion to the end of the budget: **{glue:text}`spike_erosion_cause_last`** ({glue:text}`spike_erosion_why_last`).
# To the stop rule: **{glue:text}`spike_erosion_cause_stop`** ({glue:text}`spike_erosion_why_stop`). Shown in
# {numref}`fig-transfer-spike-study`.

# %% mystnb={"figure": {"caption": "The spike study's kept runs, one panel per recipe (their losses are on exp-interventions): the zero-shot accuracy on g' at the states kept every `spike_keep_every` steps, the reading points marked.", "name": "fig-transfer-spike-study"}}
if spike_study is not None:
    study_panels(spike_study[0], losses=False, loss_threshold=grid.loss_threshold, label="zero-shot accuracy on g'")
    plt.show()

# %% [markdown]
# ### The same at the second grid's $N$

# %%
second_spike = second_spike_section(report, second_grids, spike_second, spike_steps, spike_keep_every, cache, transfer_at,
                                    "zero-shot-transfer", {"new_task_offset": new_task_offset, "alpha": alpha}, "zero_shot",
                                    "zero-shot accuracy on g'", erosion_tolerance, device,
                                    what="the zero-shot transfer", losses_on="exp-interventions")

# %% [markdown]
# ## The four conditions (`fig:frozen-freeze-panel`, and the same for learned embeddings)
#
# Final accuracy after {glue:text}`retrain_steps:d` steps of retraining the subject embeddings
# (zero-shot: before any), mean ± std over seeds.
#
# Shown in {numref}`fig-transfer-conditions-frozen` and {numref}`fig-transfer-conditions-learned`.

# %% mystnb={"figure": {"caption": "Frozen embeddings: accuracy in the four conditions (zero-shot and after retraining the subject embeddings, random and smart initialisation) for each $(R, d)$ cell, mean ± std over seeds (`fig:frozen-freeze-panel`).", "name": "fig-transfer-conditions-frozen"}}
def condition_panels(name: str) -> None:
    fig, axes = subplots(2, 2, width=4.6, height=3.8)
    heatmap_panels(axes.flatten(), fig, {f"{name}: {title}": panel[key][name] for key, (title, _) in PANELS.items()},
                   grid.d_values, grid.R_values, "accuracy")
    plt.show()


condition_panels("frozen")

# %% mystnb={"figure": {"caption": "Learned embeddings: the same four conditions as the frozen panel, for each $(R, d)$ cell, mean ± std over seeds.", "name": "fig-transfer-conditions-learned"}}
condition_panels("learned")

# %% [markdown]
# ## Accuracy against retraining steps
#
# At the largest $R$ of the grid at or below 8, for its learned threshold and for the largest $d$; mean over seeds.
#
# Shown in {numref}`fig-transfer-retraining`.

# %% mystnb={"figure": {"caption": "Accuracy against retraining steps of the subject embeddings alone, for the control ($g$), random and smart initialisation ($g'$), at the learned threshold and the largest $d$; the dotted line is the smart initialisation on $g$.", "name": "fig-transfer-retraining"}}
R_show = max([R for R in grid.R_values if R <= 8] or grid.R_values[:1])
i_show = grid.R_values.index(R_show)
example_ds = sorted({d for d in (d_min[i_show], grid.d_values[-1]) if d is not None})
CURVES = {"control": ("control (g)", COLORS["baseline"]), "random": ("random init (g')", COLORS["alt"]),
          "smart": ("smart init (g')", COLORS["measured"])}
fig, axes = subplots(2, len(example_ds), width=4.6, height=3.4, sharey=True)
for row, d in zip(axes, example_ds):
    for ax, name in zip(row, REGIMES):
        for condition, (label, color) in CURVES.items():
            curves = np.array([results[name, R_show, d, s]["curves"][condition] for s in grid.seeds])  # (seed, point, 2)
            ax.plot(curves[0, :, 0], curves[:, :, 1].mean(0), "o-", color=color, markersize=3, label=label)
        ax.axhline(on_g[name][i_show, grid.d_values.index(d)].mean(), color="black", linestyle=":", label="smart on g (no training)")
        ax.set(xlabel="retraining steps (subject embeddings only)", ylabel="accuracy", ylim=(-0.03, 1.03),
               title=f"{name}: R={R_show}, d={d}")
legend(axes[0][0])
plt.show()

# %%
print(f"{'R':>3} {'d':>4} {'d/d_min':>7} " + " ".join(f"{name:>8} {'on g':>6} {'zero':>6} {'z(emb)':>6} {'smart':>6} {'random':>6} {'ctrl':>6}" for name in REGIMES))
for i, R in enumerate(grid.R_values):
    for j, d in enumerate(grid.d_values):
        print(f"{R:>3} {d:>4} {headroom[i, j]:>7.1f} " + " ".join(
            f"{acc[name][i, j].mean():>8.3f} {on_g[name][i, j].mean():>6.3f} {zero[name][i, j].mean():>6.3f} "
            f"{zero_emb[name][i, j].mean():>6.3f} {panel['smart'][name][i, j].mean():>6.3f} {panel['random'][name][i, j].mean():>6.3f} "
            f"{panel['control'][name][i, j].mean():>6.3f}" for name in REGIMES))

# %% [markdown]
# Columns per regime: the model's accuracy on $g$, the smart initialisation on $g$ (no training),
# zero-shot on $g'$ with $a_y$ = output unembedding and with $a_y$ = input embedding, then after
# retraining: smart init on $g'$, random init on $g'$, control on $g$.
#
# ## Verdicts
#
# **Population** for the learned claim: cells where every seed of the learned model memorises,
# with $d \geq$ {glue:text}`min_headroom:g` $d_{\min}(R)$ ({glue:text}`n_judged:d` cells), each cell
# the mean over its seeds. **The test** (geofact.evidence): the paper's alternative (Appendix D: "if
# the MLP itself stores the subject–attribute mapping ... zero-shot accuracy on the new bijections
# should remain at chance") against its claim of substantial accuracy. The mean zero-shot accuracy over
# the population, with an interval over its cells inside $[0, 1]$ (a Student-$t$ interval cut to
# $[0, 1]$, hulled with the exact interval of the facts it counts: geofact.evidence.fraction_interval), is
# set against the claim's range ($\geq$ `substantial`) and chance's ($\leq$ `chance_factor`$/N$): the
# claim holds where the whole interval lies in the claim's range. The table shows the verdict at other
# confidence levels and cutoffs, and the one below it the per-cell reading (every cell at the cutoff),
# which is stricter than the paper's sentence. The frozen claim is about every cell of the grid.

# %%
def judge_transfer(report, values: dict) -> None:
    """The four verdicts of this page from `values` ({"zero_shot", "zero_shot_emb": {regime: (R, d, seed)}}) on
    `report`: called on the zero-shot transfer at the stop rule for the page's report, and again at the other
    reading points (below); the retraining arm is the stop's in every call."""
    zero, zero_emb = values["zero_shot"], values["zero_shot_emb"]
    zs_learned, zs_frozen = zero["learned"].mean(-1), zero["frozen"].mean(-1)
    # an accuracy on g' counts a run's N x R facts, a cell's mean over seeds that many times its seeds: the
    # trials behind each unit of the intervals below (geofact.evidence.fraction_interval keeps them in [0, 1])
    run_trials = np.broadcast_to(np.array(grid.R_values)[:, None], (len(grid.R_values), len(grid.d_values))) * grid.N  # (R, d)
    cell_trials = run_trials * len(grid.seeds)
    rows = cutoff_table(zs_learned, population, substantial_cutoffs)
    display(Markdown("**Zero-shot accuracy, learned embeddings, every cell at the cutoff** (cells passing / cells judged):\n\n"
                     + format_table(rows, "zero-shot")))
    report.number("table_zero_shot", rows, glue=False)
    learned_regime = state.judged_regime(grid, judged)
    report.number("converged_fraction", learned_regime.converged_fraction)  # the runs behind the verdicts
    report.number("grid_converged_fraction", state.grid_regime(grid).converged_fraction)
    report.number("headroom_max", learned_regime.headroom_max)
    mean_judged = float(zs_learned[judged].mean()) if judged.any() else float("nan")
    report.number("zero_shot_learned_judged_mean", mean_judged, glue=bool(judged.any()))


    def zero_shot_at(level: float) -> Estimate:
        """The mean zero-shot accuracy over the judged cells, with its interval over cells inside [0, 1]."""
        if not judged.any():
            return Estimate.missing("mean zero-shot accuracy", "no cell judged", level)
        return fraction_interval(zs_learned[judged], "mean zero-shot accuracy on g' over cells", int(cell_trials[judged].min()),
                                 level, unit="cells")


    def transfer_ranges(cutoff: float) -> tuple[Range, Range]:
        return Range(cutoff, 1.0, "substantial"), Range(0.0, chance_factor * chance, "chance")


    transfer_estimate = zero_shot_at(0.95)
    display(Markdown("**The test against chance**, at other confidence levels and cutoffs for *substantial*:\n\n"
                     + sensitivity_table(zero_shot_at, transfer_ranges, settings=substantial_cutoffs, setting_name="substantial >=")))
    judge_in_regime(report, "exp-transfer-learned", Contrast(transfer_estimate, *transfer_ranges(substantial)),
        measured=((f"zero-shot accuracy on g' over the {int(judged.sum())} cells with sufficient capacity: range "
                   f"{zs_learned[judged].min():.3f}-{zs_learned[judged].max():.3f}, >= {substantial} in "
                   f"{int((zs_learned[judged] >= substantial).sum())} of them; with a_y = input embedding mean "
                   f"{zero_emb['learned'].mean(-1)[judged].mean():.3f}") if judged.any() else "no cell has sufficient capacity")
                 + f" (chance {chance:.5f}; N={grid.N}, R in {list(grid.R_values)}, d in {list(grid.d_values)}, {len(grid.seeds)} seeds)",
        population={"embeddings": "learned", "memorised": "every seed", "min_headroom": min_headroom, "unit": "cell (mean over seeds)"},
        note=f"substantial taken as >= {substantial}, chance as <= {chance_factor:g}/N",
        regime=learned_regime)
    i_f, j_f = np.unravel_index(zs_frozen.argmax(), zs_frozen.shape)
    frozen_memorise = acc["frozen"] >= grid.perfect  # (R, d, seed)
    frozen_runs = zero["frozen"][frozen_memorise]  # the zero-shot accuracy of every frozen run that memorises
    # the unit is the cell (the mean over its memorising seeds): runs of one cell share R and d, and cells differ
    frozen_cells = list(zip(*np.nonzero(frozen_memorise.any(-1))))
    frozen_cell_means = np.array([zero["frozen"][i, j][frozen_memorise[i, j]].mean() for i, j in frozen_cells])
    frozen_cell_trials = min((int(run_trials[i, j]) * int(frozen_memorise[i, j].sum()) for i, j in frozen_cells), default=1)
    frozen_estimate = (fraction_interval(frozen_cell_means, "mean frozen zero-shot accuracy on g' over cells of memorising runs",
                                         frozen_cell_trials, 0.95, unit="cells") if frozen_runs.size
                       else Estimate.missing("mean frozen zero-shot accuracy", "no frozen run memorises"))
    judge_in_regime(report, "exp-transfer-frozen",
        Contrast(frozen_estimate, Range(0.0, chance_factor * chance, "at chance"), Range(chance_factor * chance, 1.0, "above chance")),
        measured=(f"frozen-embedding zero-shot accuracy on g' over the {frozen_runs.size} frozen runs that memorise: range "
                  f"{frozen_runs.min() if frozen_runs.size else float('nan'):.3f}-{frozen_runs.max() if frozen_runs.size else float('nan'):.3f}; "
                  f"per-cell means up to {zs_frozen.max():.3f} (R={grid.R_values[i_f]}, d={grid.d_values[j_f]}; a_y = output unembedding); "
                  f"with a_y = input embedding up to {zero_emb['frozen'].mean(-1).max():.3f}; chance {chance:.5f}; "
                  f"after {retrain_steps} retraining steps smart init reaches {panel['smart']['frozen'].mean(-1).max():.3f} at best"),
        population={"embeddings": "frozen", "runs": "every run that memorises (accuracy >= perfect)", "unit": "cell (the mean over its memorising seeds)"},
        note=f"near chance taken as <= {chance_factor:g}/N; judged on the output unembedding",
        regime=state.judged_regime(grid, judged, "frozen"))
    # Appendix D: retraining recovers "high accuracy in some settings", and the contrast the main text
    # relies on: learned embeddings transfer at step 0, frozen ones only by re-fitting.
    retrained_runs = np.maximum(panel["smart"]["frozen"], panel["random"]["frozen"])  # (R, d, seed): the better initialisation per run
    retrained_frozen = retrained_runs.mean(-1)  # (R, d)
    i_r, j_r = np.unravel_index(retrained_frozen.argmax(), retrained_frozen.shape)
    best_cell = retrained_runs[i_r, j_r]  # its seeds
    judge_in_regime(report, "exp-transfer-frozen-retrain",
        Contrast(fraction_interval(best_cell, f"retrained accuracy on g' in the best cell (R={grid.R_values[i_r]}, d={grid.d_values[j_r]})",
                                   int(run_trials[i_r, j_r]), 0.95, unit="seeds"),
                 Range(high_accuracy, 1.0, "high"), Range(0.0, chance_factor * chance, "no recovery (chance)")),
        measured=(f"frozen-embedding model, subject embeddings retrained {retrain_steps} steps on g': >= {high_accuracy} in "
                  f"{int((retrained_frozen >= high_accuracy).sum())} of {retrained_frozen.size} cells (better of smart and random init, mean over seeds)"),
        population={"embeddings": "frozen", "cells": "the best cell of the grid", "unit": "seed"},
        note=(f"high taken as >= {high_accuracy}; an existential claim ('in some settings'), judged on the seeds of the cell with "
              f"the highest mean retrained accuracy of the {retrained_frozen.size}, chosen after seeing them (a choice that favours the claim)"),
        regime=state.judged_regime(grid, judged, "frozen"))
    # the contrast over the cells with sufficient capacity, three parts: learned zero-shot above frozen
    # zero-shot (paired by cell), the frozen zero-shot at chance (a memoriser does not transfer at step 0),
    # and the frozen model's retraining above its own zero-shot (its "transfer" is re-fitting)
    def over_judged(values: np.ndarray, quantity: str, fraction: bool = False) -> Estimate:
        """Over the judged cells: Student t for a difference, an interval inside [0, 1] for an accuracy."""
        if not values.size:
            return Estimate.missing(quantity, "no cell has sufficient capacity")
        if fraction:
            return fraction_interval(values, f"{quantity} over cells with sufficient capacity", int(cell_trials[judged].min()),
                                     0.95, unit="cells")
        return t_interval(values, f"{quantity} over cells with sufficient capacity", 0.95, unit="cells")


    contrasts = [Contrast(over_judged((zs_learned - zs_frozen)[judged], "zero-shot, learned minus frozen"), Range(0.0, 1.0, "higher"),
                          Range(-1.0, 0.0, "no higher")),
                 Contrast(over_judged(zs_frozen[judged], "frozen zero-shot", fraction=True), Range(0.0, chance_factor * chance, "at chance"),
                          Range(chance_factor * chance, 1.0, "above chance")),
                 Contrast(over_judged((retrained_frozen - zs_frozen)[judged], "frozen, retrained minus zero-shot"), Range(0.0, 1.0, "higher"),
                          Range(-1.0, 0.0, "no higher"))]
    zs_frozen_judged = float(zs_frozen[judged].mean()) if judged.any() else float("nan")
    judge_in_regime(report, "exp-transfer-contrast", contrasts,
        measured=((f"in the {int(judged.sum())} cells with sufficient capacity: zero-shot on g' learned {mean_judged:.3f}, frozen "
                   f"{zs_frozen_judged:.3f} (chance {chance:.5f}); frozen after {retrain_steps} retraining steps up to "
                   f"{retrained_frozen[judged].max():.3f}") if judged.any() else "no cell has sufficient capacity"),
        population={"embeddings": "learned and frozen, paired by cell", "memorised": "every learned seed", "min_headroom": min_headroom, "unit": "cell (mean over seeds)"},
        note=(f"holds if learned zero-shot exceeds frozen zero-shot, frozen zero-shot is at chance (<= {chance_factor:g}/N) and the frozen "
              "model's retraining exceeds its zero-shot, each on average over the cells"),
        regime=learned_regime)


judge_transfer(report, {"zero_shot": zero, "zero_shot_emb": zero_emb})

# %% [markdown]
# ## The verdicts at three reading points
#
# Runs spike long after they memorise (the spike study above), so the weights a verdict reads depend on
# where training is read. Every run of the capacity grid is trained on to the end of its step budget
# after the stop rule, keeping its state at the stop (what the verdicts above read), its best state
# before any loss spike (the lowest batch loss before the loss first rises {glue:text}`spike_rule_factor:g`
# times above its running minimum, once that minimum is below {glue:text}`spike_rule_floor:g`), and its
# state at the end of the budget. The four verdicts are taken again at the other two points on the same
# runs and the same populations (chosen at the stop rule), the zero-shot transfer recomputed on those
# weights; the retraining of the subject embeddings ({glue:text}`retrain_steps:d` steps a run) starts from
# the stop's weights in every column, so `exp-transfer-frozen-retrain` reads the stop in all three and the
# contrast's third part moves only through the zero-shot accuracy it is set against.

# %%
reading_keys = state.verdict_keys(grid, judged)
read = analyse_readings(grid, records, cache, transfer_at, "zero-shot-transfer",
                        {"new_task_offset": new_task_offset, "alpha": alpha}, reading_keys, device=device)
report.number("n_reading_runs", len(reading_keys))
display(Markdown(read_at_points(report, judge_transfer, {
    r: {m: reading_values(grid, read[r], m) for m in ("zero_shot", "zero_shot_emb")} if read[r] else None for r in READINGS})))
report.save()
