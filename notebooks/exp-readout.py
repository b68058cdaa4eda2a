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
# # Linear readout: are subject embeddings superpositions of their attributes?
#
# > "With trainable embeddings, the readout is near-perfect across all cells with sufficient capacity,
# > demonstrating that each relation's attribute can be decoded from the subject embedding by a simple
# > per-relation linear map [...] With frozen embeddings the readout collapses to chance for the subject
# > embeddings, and is more moderate for the hidden states." (Section 5.2, `fig:readout-acc`;
# > Appendix D, `fig:frozen-readout`: "The $h$-readout is also low across the grid.")
#
# Theorem 4.1's construction stores subject $x$ as a sum over relations of its attributes' codes, so
# relation $r$'s attribute is a linear function of $s_x$. This page asks whether the models that
# {doc}`exp-capacity` trained have that structure.
#
# **Method** (`geofact.analysis.readout`, Appendix B.3). For each trained model and relation $r$, an
# affine ridge map $W_r$ from the features of subject $x$ to the attribute vector $a_{g_r(x)}$, fitted
# on 80% of the subjects; each held-out subject is classified as the attribute whose vector is nearest
# (cosine) to its prediction, among all $N$. Chance is $1/N$. Two features: the subject's input
# embedding $s_x$ and the post-attention hidden state $h(x, r)$ at the answer position (what the MLP
# reads).
#
# **Which attribute vector.** The models have separate input and output embeddings (Appendix B), so
# "the attribute's vector" needs a choice the paper does not make. Both are run: $a_y$ = the output
# unembedding of entity $y$ (a column of $E_{\text{out}}$, the direction the final state must point to
# for $y$ to win the softmax) and $a_y$ = the input embedding of $y$ (a row of $E_{\text{in}}$). The
# verdicts use the unembedding, the vector the model itself reads answers with; for frozen models the
# input embedding is random by construction, so the paper's "collapses to chance" is then automatic,
# and the page shows both.
#
# **$h$ and $s_x$ coincide under uniform attention.** With uniform attention the hidden state is
# $h(x, r) = e_r + \tfrac12\big(\mathrm{rms}(s_x) + \mathrm{rms}(e_r)\big)\,\mathrm{diag}(g)\,W_V W_O$:
# for a fixed $r$ an affine function of the normalised $s_x$. An affine readout from $h$ can therefore
# never beat one from $\mathrm{rms}(s_x)$, and where $W_V W_O$ has full rank they coincide. The
# paper's "[the readout] is more moderate for the hidden states" of frozen models, read as $h$ reading
# out better than $s_x$, cannot happen in its own single-hop model; the page measures the difference.
#
# **Baselines**, on the same held-out subjects: random Gaussian vectors in place of $s_x$ (no
# information in the features), and $s_x$ against the attributes of a randomly permuted subject
# (no relation between features and targets). Both must sit at chance; if they did not, the scoring
# itself would be leaking.
#
# **Models.** The capacity grid of {doc}`exp-capacity` (one definition per profile), loaded from the run
# cache with its training checkpoints; what is missing is trained first. The readouts run at every
# checkpoint and at the stop rule; the verdicts are taken at the stop rule, where the paper takes them.

# %% tags=["parameters"]
capacity_grid = None  # the grid shared with exp-capacity (geofact.training.grid.CapacityGrid fields); None: the paper's
held_out = 0.2  # fraction of subjects the readout is scored on
alpha = 1e-3  # ridge penalty
near_perfect = 0.9  # readout accuracy the verdict calls near-perfect
near_perfect_cutoffs = [0.8, 0.9, 0.95, 0.99]  # the table of how the verdict moves with the cutoff
min_headroom = 3.0  # sufficient capacity: every learned seed memorises and d is at least this times the learned threshold
# (from about 3x its threshold a run meets the paper's stop rule within 15,000 steps: exp-capacity's table)
headroom_cutoffs = [1.0, 2.0, 3.0, 6.0]
chance_factor = 5.0  # the verdict calls a readout at chance below this many times 1/N
split_seed = 0  # the held-out subjects and the baselines' randomness
cache_dir = None  # the run cache; None means .geofact/runs in this checkout
device = "cpu"

# %%
from pathlib import Path

import numpy as np
from IPython.display import Markdown, display
from matplotlib import pyplot as plt

from geofact.analysis.judging import cutoff_table, format_table, grid_state
from geofact.analysis.readout import model_readouts
from geofact.analysis.trained import TARGETS
from geofact.analysis.trajectory import analyse_grid, final_values, train_grid
from geofact.curves import headroom_curves, trajectory_panels
from geofact.heatmap import heatmap_panels
from geofact.plotting import COLORS, subplots, use_style
from geofact.project import Project
from geofact.report import Report
from geofact.training.grid import REGIMES, CapacityGrid
from geofact.training.regime import claim_in_regime

use_style()
report = Report("exp-readout")
cache = Path(cache_dir) if cache_dir else Project.find().runs_dir
grid = CapacityGrid.from_parameter(capacity_grid)
for name, value in [("near_perfect", near_perfect), ("held_out", held_out)]:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
if chance_factor < 1 or min_headroom < 0:
    raise ValueError(f"chance_factor must be >= 1 and min_headroom >= 0, got {chance_factor}, {min_headroom}")
if min_headroom not in headroom_cutoffs or near_perfect not in near_perfect_cutoffs:
    raise ValueError("headroom_cutoffs and near_perfect_cutoffs must include min_headroom and near_perfect")

records = train_grid(grid, cache, device)
SHORT = {"unembedding": "", "embedding": "_emb"}  # metric suffix per target


def readouts(model) -> dict[str, float]:
    out = {}
    for target, suffix in SHORT.items():
        r = model_readouts(model, held_out, alpha, split_seed, target)
        out.update({f"{what}{suffix}": r[what].mean for what in r})
    return out


points = analyse_grid(grid, records, cache, readouts, desc="readouts")
readout = {m: final_values(grid, points, m) for m in points[next(iter(points))][-1].values}  # metric -> regime -> (R, d, seed)
state = grid_state(grid, records, headroom_cutoffs)
d_min, headroom, population = state.d_min, state.headroom, state.population
judged = population[min_headroom]
chance = 1 / grid.N
report.number("perfect", grid.perfect)
report.number("chance", chance)
report.number("min_headroom", min_headroom)
report.number("n_judged", int(judged.sum()))
report.number("d_min", d_min, glue=False)

# %% [markdown]
# ## Readout against headroom, at the stop rule (`fig:readout-acc`, `fig:frozen-readout`)
#
# Held-out readout accuracy from $s_x$ (left) and $h$ (right) against $d / d_{\min}(R)$, one colour per
# $R$, learned embeddings solid and frozen dashed, mean ± std over seeds; $a_y$ is the output
# unembedding. The dotted vertical line is the headroom from which a cell counts as having sufficient
# capacity.

# %%
fig, axes = subplots(2, 1, width=5.0, height=3.8, sharey=True)
for ax, what in zip(axes[0], ("s", "h")):
    headroom_curves(ax, grid, headroom, readout[what], f"held-out readout from {what}", near_perfect, min_headroom)
    ax.set_title(f"readout from {'s_x' if what == 's' else 'h(x, r)'}, N={grid.N}")
plt.show()

# %% [markdown]
# ## Along training
#
# The same readouts at the training checkpoints (x: training step; right: training loss, falling to the
# right, up to the stop rule), for the largest $d$ of each $R$, mean over seeds.

# %%
cells = [(R, grid.d_values[-1]) for R in grid.R_values]
for what in ("s", "h"):
    fig, axes = subplots(2, 1, width=5.0, height=3.6, sharey=True)
    trajectory_panels(axes[0], grid, points, what, cells, f"held-out readout from {what}")
    plt.show()
fig, axes = subplots(2, 1, width=5.0, height=3.6, sharey=True)
trajectory_panels(axes[0], grid, points, "accuracy", cells, "training accuracy (all N R facts)")
plt.show()


def early(what: str, name: str) -> tuple[float, float] | None:
    """At the largest d, the mean readout at the first checkpoint where accuracy reaches perfect, and at the stop."""
    firsts, finals = [], []
    for R in grid.R_values:
        for s in grid.seeds:
            pts = points[name, R, grid.d_values[-1], s]
            hit = next((p for p in pts if p.accuracy >= grid.perfect), None)
            if hit is not None:
                firsts.append(hit.values[what])
                finals.append(pts[-1].values[what])
    return (float(np.mean(firsts)), float(np.mean(finals))) if firsts else None


lines = []
for what in ("s", "h"):
    e = early(what, "learned")
    if e:
        lines.append(f"from {what}: {e[0]:.3f} when the model first memorises (accuracy >= {grid.perfect}) against {e[1]:.3f} at the stop rule")
display(Markdown("**What the trajectory shows.** At the largest $d$, learned embeddings read out "
                 + ("; ".join(lines) if lines else "nothing: no checkpoint memorises")
                 + ". The verdicts below are taken at the stop rule."))

# %% [markdown]
# ## Heatmaps

# %%
for what in ("s", "h"):
    fig, axes = subplots(2, 1, width=5.6, height=4.2)
    heatmap_panels(axes[0], fig, {f"{name}: readout from {what} (N={grid.N})": readout[what][name] for name in REGIMES},
                   grid.d_values, grid.R_values, "held-out readout accuracy")
    plt.show()

# %% [markdown]
# ## The two targets, and $h$ against $s_x$
#
# Mean over the grid of each readout, per regime and target; the baselines (random features, shuffled
# targets) use the same scoring and must sit at chance.

# %%
print(f"{'readout':>10} {'target':>12} " + " ".join(f"{name:>8}" for name in REGIMES) + "   (mean over cells; max)")
for what in ("s", "h", "random", "shuffled"):
    for target, suffix in SHORT.items():
        m = readout[what + suffix]
        print(f"{what:>10} {target:>12} " + " ".join(f"{m[n].mean():>8.3f}" for n in REGIMES) + "   "
              + " ".join(f"{m[n].mean(-1).max():.3f}" for n in REGIMES))
baseline_max = max(float(readout[b + sfx][n].mean(-1).max()) for b in ("random", "shuffled") for sfx in SHORT.values() for n in REGIMES)
h_minus_s = {name: readout["h"][name].mean(-1) - readout["s"][name].mean(-1) for name in REGIMES}
report.number("baseline_max", baseline_max)
report.number("frozen_h_minus_s_max", float(h_minus_s["frozen"].max()))
report.number("frozen_h_minus_s_mean", float(h_minus_s["frozen"].mean()))
report.number("frozen_s_emb_max", float(readout["s_emb"]["frozen"].mean(-1).max()))
report.number("frozen_s_max", float(readout["s"]["frozen"].mean(-1).max()))

# %% [markdown]
# Both baselines stay at or below {glue:text}`baseline_max:.4f` (chance {glue:text}`chance:.5f`). With
# frozen embeddings, reading out the *input* embedding of the attribute gives at most
# {glue:text}`frozen_s_emb_max:.3f` (random targets: chance by construction), while the output
# unembedding reaches {glue:text}`frozen_s_max:.3f`: the trained $E_{\text{out}}$ places $a_y$ where the
# frozen model's computation on $s_x$ lands. The frozen $h$ readout exceeds the $s_x$ readout by at most
# {glue:text}`frozen_h_minus_s_max:.3f` (mean {glue:text}`frozen_h_minus_s_mean:.3f`), as the affine
# relation between them requires: under uniform attention $h$ cannot be "more moderate" than $s_x$.
#
# ## Verdicts
#
# **Population** (the paper's "all cells with sufficient capacity"): cells where every seed of the learned
# model memorises, with $d \geq$ {glue:text}`min_headroom:g` $d_{\min}(R)$;
# {glue:text}`n_judged:d` cells here. The tables give the verdict at other cutoffs.

# %%
for what in ("s", "h"):
    rows = cutoff_table(readout[what]["learned"].mean(-1), population, near_perfect_cutoffs)
    display(Markdown(f"**Readout from {what}, learned embeddings** (cells passing / cells judged):\n\n" + format_table(rows, "readout")))
    report.number(f"table_{what}", rows, glue=False)

learned_regime = state.judged_regime(grid, judged)
report.number("converged_fraction", learned_regime.converged_fraction)  # the runs behind the verdicts
report.number("grid_converged_fraction", state.grid_regime(grid).converged_fraction)
report.number("headroom_max", learned_regime.headroom_max)
s_min = float(readout["s"]["learned"].mean(-1)[judged].min()) if judged.any() else float("nan")
h_min = float(readout["h"]["learned"].mean(-1)[judged].min()) if judged.any() else float("nan")
claim_in_regime(report, "exp-readout-learned", holds=bool(judged.any()) and min(s_min, h_min) >= near_perfect,
    measured=(f"in the {int(judged.sum())} cells with sufficient capacity (all learned seeds memorise, "
              f"d >= {min_headroom:g} d_min): readout from s_x >= {s_min:.3f}, from h >= {h_min:.3f} (a_y = output unembedding; "
              f"N={grid.N}, R in {list(grid.R_values)}, d in {list(grid.d_values)}, {len(grid.seeds)} seeds; baselines <= {baseline_max:.4f})"),
    note=f"near-perfect taken as >= {near_perfect}", regime=learned_regime)
frozen_s = readout["s"]["frozen"].mean(-1)
frozen_s_chance = bool(frozen_s.max() <= chance_factor * chance)
frozen_h_lower = bool((readout["h"]["frozen"].mean(-1)[judged] < readout["h"]["learned"].mean(-1)[judged]).all()) and bool(judged.any())
i_fs, j_fs = np.unravel_index(frozen_s.argmax(), frozen_s.shape)
claim_in_regime(report, "exp-readout-frozen", holds=frozen_s_chance and frozen_h_lower,
    measured=(f"frozen s_x readout (a_y = output unembedding) up to {frozen_s.max():.3f} (R={grid.R_values[i_fs]}, d={grid.d_values[j_fs]}; "
              f"chance {chance:.5f}); with a_y = input embedding up to {readout['s_emb']['frozen'].mean(-1).max():.3f}; frozen h readout "
              f"below the learned one in {int((readout['h']['frozen'].mean(-1)[judged] < readout['h']['learned'].mean(-1)[judged]).sum())} "
              f"of {int(judged.sum())} cells with sufficient capacity"),
    note=f"at chance taken as <= {chance_factor:g}/N; judged on the output unembedding, the vector the model reads answers with",
    regime=state.judged_regime(grid, judged, None))
report.save()
