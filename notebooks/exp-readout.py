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
# "the attribute's vector" needs a choice: $a_y$ is the output unembedding of entity $y$ (a column of
# $E_{\text{out}}$), the direction the final state must point to for $y$ to win the softmax. The input
# embedding of $y$ is the other candidate, but it encodes $y$ *as a subject* and has no reason to be
# what a query about $x$ produces.
#
# **Baselines**, on the same held-out subjects: random Gaussian vectors in place of $s_x$ (no
# information in the features), and $s_x$ against the attributes of a randomly permuted subject
# (no relation between features and targets). Both must sit at chance; if they did not, the scoring
# itself would be leaking.
#
# **Models.** The capacity grid of {doc}`exp-capacity`, loaded from the run cache (what is missing is
# trained first). The `paper` profile is the paper's grid ($N$ = 4096, GPU); the `laptop` profile the
# reduced grid below, whose models are exactly those of the laptop {doc}`exp-capacity` page.

# %% tags=["parameters"]
N = 4096  # entities
R_values = [2, 4, 8, 10, 12, 14, 16]  # relations
d_values = [32, 64, 128, 256, 512, 768]  # embedding dimensions
seeds = [0, 1, 2]
lr = 1e-3  # must be exp-capacity's rate for its cached models to be reused (else they are trained here)
batch_size = 1024
max_steps = 15000
perfect = 0.99  # a cell "has capacity" when the model's mean accuracy is at least this (as on exp-capacity)
held_out = 0.2  # fraction of subjects the readout is scored on
alpha = 1e-3  # ridge penalty
near_perfect = 0.9  # readout accuracy the verdict calls near-perfect
chance_factor = 5.0  # the verdict calls a readout "at chance" below this many times 1/N
split_seed = 0  # the held-out subjects and the baselines' randomness
cache_dir = None  # the run cache; None means .geofact/runs in this checkout
device = "cpu"

# %%
from pathlib import Path

import numpy as np
from IPython.display import Markdown, display
from matplotlib import pyplot as plt

from geofact.analysis.readout import READOUTS, model_readouts
from geofact.analysis.trained import trained_grid
from geofact.heatmap import heatmap_panels
from geofact.notebook import progress
from geofact.plotting import COLORS, subplots, use_style
from geofact.project import Project
from geofact.report import Report
from geofact.training.grid import REGIMES, by_cell, capacity_grid

use_style()
report = Report("exp-readout")
cache = Path(cache_dir) if cache_dir else Project.find().runs_dir
for name, value, low, high in [("perfect", perfect, 0, 1), ("near_perfect", near_perfect, 0, 1), ("held_out", held_out, 0, 1)]:
    if not low < value <= high:
        raise ValueError(f"{name} must be in ({low}, {high}], got {value}")
if chance_factor < 1:
    raise ValueError(f"chance_factor must be >= 1, got {chance_factor}")

grid = capacity_grid(N, R_values, d_values, seeds, lr, max_steps, batch_size)
records, models = trained_grid(grid, cache, device)
readouts = {key: model_readouts(model, held_out, alpha, split_seed) for key, model in progress(models, total=len(grid), desc="readouts")}
acc = by_cell({k: r["accuracy"] for k, r in records.items()}, R_values, d_values, seeds)  # (R, d, seed)
readout = {what: by_cell({k: r[what].mean for k, r in readouts.items()}, R_values, d_values, seeds) for what in READOUTS}
capacity = {name: acc[name].mean(-1) >= perfect for name in REGIMES}  # (R, d) cells where the model learned its table
chance = 1 / N
report.number("perfect", perfect)

# %% [markdown]
# ## Learned embeddings (`fig:readout-acc`)

# %%
fig, axes = subplots(2, 1, width=5.6, height=4.2)
heatmap_panels(axes[0], fig, {f"learned: readout from {w} (N={N})": readout[w]["learned"] for w in ("s", "h")},
               d_values, R_values, "held-out readout accuracy")
plt.show()

# %% [markdown]
# ## Frozen embeddings (`fig:frozen-readout`)

# %%
fig, axes = subplots(2, 1, width=5.6, height=4.2)
heatmap_panels(axes[0], fig, {f"frozen: readout from {w} (N={N})": readout[w]["frozen"] for w in ("s", "h")},
               d_values, R_values, "held-out readout accuracy")
plt.show()

# %% [markdown]
# ## Against the baselines
#
# Readout from $s_x$ (solid) and $h$ (dotted) against $d$, one colour per $R$, with the largest value
# either baseline reached anywhere on the grid and the chance level $1/N$. Open markers: cells where the
# model itself has not reached accuracy {glue:text}`perfect`.

# %%
fig, axes = subplots(2, 1, width=5.0, height=3.8, sharey=True)
cmap = plt.get_cmap("viridis")
baseline_max = max(float(readout[b][name].mean(-1).max()) for b in ("random", "shuffled") for name in REGIMES)
for ax, name in zip(axes[0], REGIMES):
    for i, R in enumerate(R_values):
        color = cmap(i / max(1, len(R_values) - 1))
        for what, style in (("s", "-"), ("h", ":")):
            mean = readout[what][name][i].mean(-1)
            ax.plot(d_values, mean, style, color=color, label=f"R={R}" if what == "s" else None)
            learned_it = capacity[name][i]
            ax.scatter(np.array(d_values)[learned_it], mean[learned_it], color=color, zorder=3)
            ax.scatter(np.array(d_values)[~learned_it], mean[~learned_it], edgecolors=color, facecolors="none", zorder=3)
    ax.axhline(baseline_max, color=COLORS["baseline"], linestyle="--", label="baselines (max over grid)")
    ax.axhline(chance, color=COLORS["theory"], linestyle=":", label="chance 1/N")
    ax.set(xscale="log", yscale="log", xlabel="embedding dimension d", ylabel="held-out readout accuracy",
           title=f"{name} embeddings: s_x (solid), h (dotted)", ylim=(min(chance, baseline_max) / 3, 1.5))
    ax.set_xticks(d_values, [str(d) for d in d_values])
    ax.minorticks_off()
axes[0][0].legend(ncol=2)
plt.show()

# %%
def cells(name: str, what: str, where: np.ndarray) -> np.ndarray:
    """Mean-over-seeds readout of the cells selected by `where` (R, d)."""
    return readout[what][name].mean(-1)[where]


learned_cap, frozen_cap = capacity["learned"], capacity["frozen"]
both_cap = learned_cap & frozen_cap
everywhere = np.ones_like(learned_cap)
for label, value in [
    ("n_capacity_cells", int(learned_cap.sum())),
    ("learned_s_min", float(cells("learned", "s", learned_cap).min()) if learned_cap.any() else None),
    ("learned_h_min", float(cells("learned", "h", learned_cap).min()) if learned_cap.any() else None),
    ("learned_s_at_dmax", float(readout["s"]["learned"][:, -1].mean(-1).min())),
    ("frozen_s_max", float(cells("frozen", "s", everywhere).max())),
    ("frozen_h_max", float(cells("frozen", "h", everywhere).max())),
    ("baseline_max", baseline_max),
    ("chance", chance),
    ("d_max", d_values[-1]),
]:
    report.number(label, value, glue=value is not None)
i_fs, j_fs = np.unravel_index(readout["s"]["frozen"].mean(-1).argmax(), learned_cap.shape)
report.number("frozen_s_max_R", R_values[i_fs])
report.number("frozen_s_max_d", d_values[j_fs])
gap = readout["s"]["learned"].mean(-1) - readout["s"]["frozen"].mean(-1)  # (R, d)
report.number("learned_minus_frozen_s_mean", float(gap.mean()))
report.number("learned_minus_frozen_s_min", float(gap.min()))

print(f"{'R':>3} {'d':>4} " + " ".join(f"{name[:7]:>7} {'s':>6} {'h':>6}" for name in REGIMES) + f" {'random':>7} {'shuffled':>8}")
for i, R in enumerate(R_values):
    for j, d in enumerate(d_values):
        row = " ".join(f"{acc[name][i, j].mean():>7.3f} {readout['s'][name][i, j].mean():>6.3f} {readout['h'][name][i, j].mean():>6.3f}"
                       for name in REGIMES)
        base = max(readout["random"][n][i, j].mean() for n in REGIMES), max(readout["shuffled"][n][i, j].mean() for n in REGIMES)
        print(f"{R:>3} {d:>4} {row} {base[0]:>7.4f} {base[1]:>8.4f}")

# %% [markdown]
# Columns: the model's accuracy, then its readout from $s_x$ and from $h$, for learned and frozen
# embeddings (means over seeds); the baselines' largest value over both regimes.
#
# **What the grid shows.** Both baselines stay at or below {glue:text}`baseline_max:.4f` (chance
# is {glue:text}`chance:.5f`), so the scoring does not leak. Learned embeddings read out better than
# frozen ones by {glue:text}`learned_minus_frozen_s_mean:.2f` on average over the grid (smallest
# difference {glue:text}`learned_minus_frozen_s_min:.2f`). At the largest $d$ ({glue:text}`d_max:d`)
# every $R$ reads out from $s_x$ at {glue:text}`learned_s_at_dmax:.3f` or better.

# %%
learned_s = readout["s"]["learned"].mean(-1)  # (R, d)
rises = all(np.all(np.diff(learned_s[i][learned_cap[i]]) >= 0) for i in range(len(R_values)))
if learned_cap.any():
    display(Markdown(
        f"In the {int(learned_cap.sum())} cells where the learned model reaches accuracy {perfect}, the readout from "
        f"$s_x$ is at least {cells('learned', 's', learned_cap).min():.3f} and from $h$ at least "
        f"{cells('learned', 'h', learned_cap).min():.3f}"
        + ("; for every $R$ it rises with $d$ beyond the capacity threshold, so cells just at the threshold store "
           "the attributes less linearly than cells with room to spare." if rises else ".")))
frozen_s = readout["s"]["frozen"].mean(-1)  # (R, d)
fades = bool(np.all(np.diff(frozen_s[:, -1]) < 0))
display(Markdown(
    f"With frozen embeddings the readout from $s_x$ reaches {frozen_s.max():.3f} "
    f"(at $R$ = {R_values[i_fs]}, $d$ = {d_values[j_fs]}), against chance {chance:.5f}."
    + (" The input embeddings are random and never trained, but the attribute vectors are: $E_{\\text{out}}$ "
       "learns to place $a_y$ where the frozen model's computation on $s_x$ lands, and with few relations per "
       "subject that landing point is close to a linear function of $s_x$: the superposition then lives in the "
       f"output embeddings instead of the input ones. At $d$ = {d_values[-1]} it fades as $R$ grows ("
       + ", ".join(f"{v:.3f} at $R$ = {R}" for R, v in zip(R_values, frozen_s[:, -1]))
       + "): more attributes to fit into each $a_y$." if frozen_s.max() > chance_factor * chance and fades else "")))

# %% [markdown]
# ## Verdicts

# %%
learned_holds = bool(learned_cap.any()) and min(cells("learned", "s", learned_cap).min(),
                                                 cells("learned", "h", learned_cap).min()) >= near_perfect
report.claim(
    "exp-readout-learned",
    holds=learned_holds,
    measured=(f"in the {int(learned_cap.sum())} cells with model accuracy >= {perfect}: readout from s_x >= "
              + (f"{cells('learned', 's', learned_cap).min():.3f}, from h >= {cells('learned', 'h', learned_cap).min():.3f}"
                 if learned_cap.any() else "n/a (no cell reaches it)")
              + f"; at d = {d_values[-1]} s_x readout >= {readout['s']['learned'][:, -1].mean(-1).min():.3f} for every R "
              f"(N={N}, R in {R_values}, d in {d_values}, {len(seeds)} seeds; baselines <= {baseline_max:.4f})"),
    note=f"near-perfect taken as >= {near_perfect}",
)
frozen_s_chance = cells("frozen", "s", everywhere).max() <= chance_factor * chance
frozen_h_lower = bool((cells("frozen", "h", both_cap) < cells("learned", "h", both_cap)).all())
report.claim(
    "exp-readout-frozen",
    holds=bool(frozen_s_chance and frozen_h_lower),
    measured=(f"frozen s_x readout up to {cells('frozen', 's', everywhere).max():.3f} (R={R_values[i_fs]}, d={d_values[j_fs]}; "
              f"chance {chance:.5f}); frozen h readout up to {cells('frozen', 'h', everywhere).max():.3f}, below the learned "
              f"h readout in {int((cells('frozen', 'h', both_cap) < cells('learned', 'h', both_cap)).sum())} of "
              f"{int(both_cap.sum())} cells where both models reach accuracy {perfect}"),
    note=f"at chance taken as <= {chance_factor:g}/N",
)
report.save()
