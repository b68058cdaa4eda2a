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
# **Sample size.** Each map $W_r$ has $d$ inputs and is fitted on the $0.8N$ training subjects. Where
# they are few against $d$ the fit chases noise and the held-out readout falls whatever the
# embeddings hold; the paper ($N = 4096$, $d \le 768$) fits on at least 4.3 subjects per dimension. The
# verdict is therefore taken on the cells with sufficient capacity that also have at least
# `min_samples_per_dim` training subjects per dimension, and a check at one $(R, d)$ trains the same
# model at larger $N$ (batch in proportion to $N$, so equal epochs) to show how the readout moves with
# the sample size alone.
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
min_samples_per_dim = 4.0  # a cell is judged only where each ridge map is fitted on at least this many subjects per dimension
samples_per_dim_cutoffs = [0.0, 1.0, 2.0, 4.0]  # the table of how the verdict moves with it
sample_size_N = [8192]  # the sample-size check: the grid's N and these, at one (R, d), batch in proportion to N
sample_size_cell = [8, 768]  # (R, d) of that check
split_seed = 0  # the held-out subjects and the baselines' randomness
cache_dir = None  # the run cache; None means .geofact/runs in this checkout
device = "cpu"

# %%
from pathlib import Path

import numpy as np
from IPython.display import Markdown, display
from matplotlib import pyplot as plt

from geofact.analysis.judging import cutoff_table, format_table, grid_state
from geofact.analysis.readout import model_readouts, split_subjects
from geofact.analysis.trained import TrainedModel
from geofact.analysis.trajectory import analyse_grid, final_values, train_grid
from geofact.curves import headroom_curves, trajectory_panels
from geofact.heatmap import heatmap_panels
from geofact.plotting import COLORS, subplots, use_style
from geofact.project import Project
from geofact.report import Report
from geofact.training.grid import REGIMES, CapacityGrid
from geofact.training.regime import claim_in_regime
from geofact.training.sweep import run_sweep

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
if min_samples_per_dim < 0 or min_samples_per_dim not in samples_per_dim_cutoffs:
    raise ValueError(f"min_samples_per_dim must be >= 0 and in samples_per_dim_cutoffs, got {min_samples_per_dim}")
if any(N <= grid.N for N in sample_size_N) or len(sample_size_cell) != 2:
    raise ValueError(f"sample_size_N must hold N above the grid's {grid.N} and sample_size_cell be [R, d], got {sample_size_N}, {sample_size_cell}")

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
# ## Readout against the sample size
#
# The same model at one $(R, d)$, learned embeddings, trained at larger $N$ (each seed; batch in
# proportion to $N$ so every $N$ gets as many epochs); the readout is fitted on 80% of the subjects
# as above. The top axis gives the training subjects per dimension, $0.8N/d$.

# %%
R_ss, d_ss = sample_size_cell
ss_N = [grid.N, *sample_size_N]
ss_configs = {(N, s): grid.config(R_ss, d_ss, False, s, N=N, batch_size=grid.batch_size * N // grid.N) for N in ss_N for s in grid.seeds}
ss_records = dict(zip(ss_configs, run_sweep(list(ss_configs.values()), cache, device=device)))
ss = {}  # (N, seed) -> readouts
for key, c in ss_configs.items():
    model = TrainedModel.load(cache, c)
    ss[key] = {what: r.mean for what, r in model_readouts(model, held_out, alpha, split_seed).items()}
ss_mean = {what: [float(np.mean([ss[N, s][what] for s in grid.seeds])) for N in ss_N] for what in ("s", "h")}
ss_accuracy = [float(np.mean([ss_records[N, s]["accuracy"] for s in grid.seeds])) for N in ss_N]
ss_converged = [sum(ss_records[N, s]["stopped_early"] for s in grid.seeds) for N in ss_N]
fig, axes = subplots(1, 1, width=5.0, height=3.6)
ax = axes[0][0]
for what, marker in (("s", "o-"), ("h", "s--")):
    sd = [float(np.std([ss[N, s][what] for s in grid.seeds])) for N in ss_N]
    ax.errorbar(ss_N, ss_mean[what], yerr=sd, fmt=marker, capsize=2, color=COLORS["measured" if what == "s" else "alt"],
                label=f"readout from {'s_x' if what == 's' else 'h(x, r)'}")
ax.axhline(near_perfect, color="black", linestyle=":", linewidth=1, label=f"near-perfect {near_perfect:g}")
ax.set(xscale="log", xlabel="N (entities)", ylabel="held-out readout accuracy", ylim=(0, 1.02),
       title=f"learned, R={R_ss}, d={d_ss}, mean ± std over {len(grid.seeds)} seeds")
ax.set_xscale("log", base=2)
top = ax.secondary_xaxis("top", functions=(lambda n: (1 - held_out) * n / d_ss, lambda q: q * d_ss / (1 - held_out)))
top.set_xlabel("training subjects per dimension")
ax.legend(fontsize=7)
plt.show()
for i, N in enumerate(ss_N):
    print(f"N={N:>5}: {(1 - held_out) * N / d_ss:4.1f} subjects/dim; readout s {ss_mean['s'][i]:.3f}, h {ss_mean['h'][i]:.3f}; "
          f"training accuracy {ss_accuracy[i]:.3f}; {ss_converged[i]}/{len(grid.seeds)} met the stop rule")
report.number("sample_size_N", ss_N, glue=False)
report.number("sample_size_readout_s", ss_mean["s"], glue=False)
report.number("sample_size_readout_h", ss_mean["h"], glue=False)
report.number("sample_size_converged", ss_converged, glue=False)

# %% [markdown]
# ## Verdicts
#
# **Population** (the paper's "all cells with sufficient capacity"): cells where every seed of the learned
# model memorises, with $d \geq$ {glue:text}`min_headroom:g` $d_{\min}(R)$, and whose readout is fitted
# on at least {glue:text}`min_samples_per_dim:g` training subjects per dimension;
# {glue:text}`n_judged_readout:d` cells here ({glue:text}`n_judged:d` by capacity alone). The tables
# give the verdict at other cutoffs of both.

# %%
n_train = int(split_subjects(grid.N, held_out, split_seed).sum())
samples_per_dim = n_train / np.array(grid.d_values, dtype=float)  # (d,)
sampled = {q: judged & (samples_per_dim >= q)[None, :] for q in samples_per_dim_cutoffs}
judged_readout = sampled[min_samples_per_dim]
report.number("min_samples_per_dim", min_samples_per_dim)
report.number("n_judged_readout", int(judged_readout.sum()))
for what in ("s", "h"):
    rows = cutoff_table(readout[what]["learned"].mean(-1), population, near_perfect_cutoffs)
    display(Markdown(f"**Readout from {what}, learned embeddings, by headroom** (any sample size; cells passing / cells judged):\n\n"
                     + format_table(rows, "readout")))
    report.number(f"table_{what}", rows, glue=False)
    rows = cutoff_table(readout[what]["learned"].mean(-1), sampled, near_perfect_cutoffs)
    display(Markdown(f"**Readout from {what}, learned embeddings, by training subjects per dimension** (cells with "
                     f"d/d_min >= {min_headroom:g}):\n\n" + format_table(rows, "readout", population="training subjects per dimension >=")))
    report.number(f"table_{what}_samples", rows, glue=False)

learned_regime = state.judged_regime(grid, judged)
report.number("converged_fraction", learned_regime.converged_fraction)  # the runs behind the verdicts
report.number("grid_converged_fraction", state.grid_regime(grid).converged_fraction)
report.number("headroom_max", learned_regime.headroom_max)
readout_regime = state.judged_regime(grid, judged_readout)
report.number("readout_headroom_max", readout_regime.headroom_max)
s_min = float(readout["s"]["learned"].mean(-1)[judged_readout].min()) if judged_readout.any() else float("nan")
h_min = float(readout["h"]["learned"].mean(-1)[judged_readout].min()) if judged_readout.any() else float("nan")
all_s_min = float(readout["s"]["learned"].mean(-1)[judged].min()) if judged.any() else float("nan")
judged_R = sorted({grid.R_values[i] for i in np.nonzero(judged_readout)[0]})
sample_text = (f"sample-size check at R={R_ss}, d={d_ss}: readout from s_x {', '.join(f'{v:.2f}' for v in ss_mean['s'])} at "
               f"N={ss_N} ({', '.join(f'{(1 - held_out) * N / d_ss:.1f}' for N in ss_N)} subjects/dim)")
claim_in_regime(report, "exp-readout-learned", holds=bool(judged_readout.any()) and min(s_min, h_min) >= near_perfect,
    measured=(f"in the {int(judged_readout.sum())} cells with sufficient capacity (all learned seeds memorise, d >= {min_headroom:g} d_min) "
              f"and >= {min_samples_per_dim:g} training subjects per dimension (R in {judged_R}): readout from s_x >= {s_min:.3f}, "
              f"from h >= {h_min:.3f} (a_y = output unembedding; N={grid.N}, {n_train} training subjects, {len(grid.seeds)} seeds; "
              f"baselines <= {baseline_max:.4f}); over all {int(judged.sum())} cells with sufficient capacity, s_x >= {all_s_min:.3f}; "
              + sample_text),
    note=f"near-perfect taken as >= {near_perfect}", regime=readout_regime)
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
