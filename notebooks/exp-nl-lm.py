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
# # A one-layer LM trained on the natural-language facts
#
# > "After training, the LM has effectively memorized the corpus, attaining greedy Hits@1 of 99.4% [...]
# > The post-embedding hidden state (layer 0) admits substantially sharper linear decoding than the
# > post-block representation (layer 1): mean full-vocabulary Hits@1 of 0.71 vs. 0.52 [...] with a
# > tokenizer that allocates a single token for each entity [...] we see even higher linear readout of the
# > attribute information (over 97%)." (Appendix E, last subsection)
#
# The theory's construction stores a subject's attributes in its embedding row as a superposition over
# relations, shaped by gradients that reach the embedding through attention from the answer position.
# A model trained from scratch on templated facts is the closest natural-language analogue of the toy
# task: does it store facts where the theory puts them?
#
# **Model and data** (`geofact.nl.corpus_lm`). Every fact of the chosen categories of the corpus
# ({doc}`exp-real-lm-probing`) rendered through all five templates; a word-level vocabulary over those
# sentences; a single-layer GPT-style decoder (pre-RMSNorm, one attention head, learned absolute
# positions, MLP of width 4d, untied input/output embeddings) trained with full-sequence next-token
# cross-entropy and AdamW at a constant learning rate.
#
# **Measurements.** (1) Greedy Hits@1: the answer is decoded greedily after its prompt and must match
# every answer token, on a random subsample of the sentences. (2) Readout: per (category, relation), with
# one template per relation, the subject state averaged over all the subject's tokens at layer 0 (token
# + position embedding) and layer 1 (after the block), a rank-limited cosine probe onto the LM-head row
# of the answer's first token trained as on {doc}`exp-real-lm-probing`, full-vocabulary Hits@1 on a
# subject-disjoint 10% of the subjects. (3) The same with one token per entity: every subject and every
# answer string is a single token.

# %% tags=["parameters"]
categories = ["people", "companies", "films", "buildings", "programming_languages"]
d = 256
mlp_ratio = 4
epochs = None  # None: as many as reach the paper's optimiser steps at this batch size (PAPER_STEPS, ~3,600)
batch_size = 1024
lr = 5e-4
weight_decay = 1e-3
seed = 0
eval_sample = 16384  # sentences scored for greedy Hits@1 (all when fewer)
probe_rank = 512
probe_lr = 1e-3
probe_weight_decay = 1e-3
probe_max_epochs = 200
probe_patience = 5
probe_batch_size = 64
val_fraction = 0.1
template_seed = 0
memorized = 0.95  # greedy Hits@1 the verdict calls "memorized" (paper: 0.994)
entity_readout = 0.97  # readout Hits@1 the one-token-per-entity verdict needs (paper: above 0.97)
torch_threads = None  # CPU threads for torch (None: every core this process may use)
cache_dir = None  # the model cache; None means .geofact/runs in this checkout
device = "cpu"

# %%

import math

import numpy as np
from matplotlib import pyplot as plt

from geofact.device import configure_cpu
from geofact.evidence import FAILS, Contrast, Estimate, Range, exact, fraction_interval, judge, t_interval, universal
from geofact.nl.corpus import load_corpus, render_corpus
from geofact.nl.corpus_lm import CorpusLMConfig, OneLayerLM, corpus_lm_readout, greedy_hits, trained_corpus_lm
from geofact.nl.cosine_probe import ProbeConfig
from geofact.pages.display import Markdown, display
from geofact.pages.legends import legend
from geofact.pages.page import Page
from geofact.pages.plotting import COLORS, subplots
from geofact.intervals import wilson
from geofact.regime import mark_not_in_regime

page = Page("exp-nl-lm", cache_dir)
report = page.report
configure_cpu(torch_threads)
cache = page.cache("corpus-lm")
corpus = load_corpus()
for name, value in [("memorized", memorized), ("entity_readout", entity_readout)]:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
if eval_sample < 1:
    raise ValueError(f"eval_sample must be >= 1, got {eval_sample}")
# The paper's optimisation budget: 20 epochs of ~184k sentences at batch 1024 (Appendix E.4). Its corpus is several
# times this one, so its "20 epochs" here would be a few hundred updates: `epochs` None trains for the paper's updates.
PAPER_RECIPE = {"d": 256, "batch_size": 1024, "lr": 5e-4, "epochs": 20}
PAPER_SENTENCES = 184_000
PAPER_STEPS = PAPER_RECIPE["epochs"] * math.ceil(PAPER_SENTENCES / PAPER_RECIPE["batch_size"])
# A run is held to the paper's budget to within one of its 20 epochs (the paper gives its corpus size as "~184k")
BUDGET_TOLERANCE = 1 / PAPER_RECIPE["epochs"]


def steps_per_epoch(sentences: int) -> int:
    """Optimiser steps of one epoch (geofact.nl.corpus_lm: the last batch may be short)."""
    return math.ceil(sentences / batch_size)


if epochs is None:  # either variant trains on every fact through every template
    epochs = math.ceil(PAPER_STEPS / steps_per_epoch(len(render_corpus(corpus, list(categories)))))
if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
    raise ValueError(f"epochs must be None (the paper's optimiser steps) or an integer >= 1, got {epochs!r}")
configs = {variant: CorpusLMConfig(categories=tuple(categories), entity_tokens=variant == "entity", d=d, mlp_ratio=mlp_ratio,
                                   epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=weight_decay, seed=seed)
           for variant in ("word", "entity")}
probe = ProbeConfig(rank=probe_rank, lr=probe_lr, weight_decay=probe_weight_decay, max_epochs=probe_max_epochs,
                    patience=probe_patience, batch_size=probe_batch_size, val_fraction=val_fraction, seed=seed)

# %% [markdown]
# ## Training
#
# The paper trains at $d$ = 256, batch 1024, lr $5 \times 10^{-4}$ for 20 epochs on ~184k sentences,
# about 3,600 optimiser steps. This corpus is several times smaller, so at batch 1024 the same 20 epochs
# would be a few hundred steps, an eighth of the paper's training (executed so, the `paper` profile's LM
# stayed far from memorising its corpus: `CHANGELOG.md`, 2026-12-01). The `paper` profile therefore keeps the paper's $d$,
# batch and learning rate and trains for the paper's number of steps (`epochs` None: as many epochs of
# this corpus as that takes). The `laptop` profile keeps 20 epochs but takes batches of 128, which here
# is about the paper's 3,600 steps, with a larger learning rate and a narrower model so that the two LMs
# train in minutes on a CPU. Each run's steps are in the table below; a verdict that a run trained for
# fewer steps than the paper's would refute is marked *not in regime* (see the verdicts).
#
# Shown in {numref}`fig-nl-lm-training`.

# %%
PAPER_VOCAB, PAPER_PARAMS_M = 12_752, 7.3  # Appendix E.4: |V| = 12,752 words, ~7.3M parameters
run_recipe = {"d": d, "batch_size": batch_size, "lr": lr, "epochs": epochs}
run_sentences = len(render_corpus(corpus, list(categories)))
run_steps = epochs * steps_per_epoch(run_sentences)
display(Markdown("| | $d$ | batch | lr | epochs | sentences | optimiser steps |\n|---|---|---|---|---|---|---|\n"
                 + "| paper | " + " | ".join(f"{v:g}" for v in PAPER_RECIPE.values()) + f" | ~{PAPER_SENTENCES:,} | ~{PAPER_STEPS:,} |\n"
                 + "| this run | " + " | ".join(f"{v:g}" for v in run_recipe.values()) + f" | {run_sentences:,} | {run_steps:,} |"))

# %% mystnb={"figure": {"caption": "Mean next-token loss of the one-layer corpus LM per epoch, with word-level and entity-level tokens.", "name": "fig-nl-lm-training"}}
trained = {variant: trained_corpus_lm(corpus, config, cache, device) for variant, config in configs.items()}
fig, axes = subplots(1, 1, width=5.0, height=3.4)
ax = axes[0][0]
for variant, color in (("word", COLORS["measured"]), ("entity", COLORS["alt"])):
    loss = trained[variant][3]["loss"]
    ax.plot(np.arange(1, len(loss) + 1), loss, color=color, marker="o", label=f"{variant}-level tokens")
ax.set(xlabel="epoch", ylabel="mean next-token loss", yscale="log", title="corpus LM training")
legend(ax)
plt.show()
for variant, (model, vocab, examples, record) in trained.items():
    print(f"{variant}: |V| = {len(vocab):,}, {len(examples):,} sentences, {record['n_params'] / 1e6:.2f}M parameters, "
          f"final loss {record['loss'][-1]:.4f}, {record['seconds']:.0f} s on {record['provenance']['device']}")
word_model, word_vocab, word_examples, word_record = trained["word"]
report.number("vocab_size", len(word_vocab))
report.number("n_sentences", len(word_examples))
report.number("n_params_m", word_record["n_params"] / 1e6)
report.scale(f"a one-layer LM at d = {d} (the paper's 256), {word_record['n_params'] / 1e6:.2f}M parameters (the paper's ~7.3M), "
             f"|V| = {len(word_vocab):,}, {len(word_examples):,} sentences (the paper's ~184k), {epochs} epochs at batch {batch_size}: "
             f"{run_steps:,} optimiser steps (the paper's ~{PAPER_STEPS:,})")
for variant, (_, _, examples, record) in trained.items():  # the table's count is what each LM trained
    if record["config"]["epochs"] * steps_per_epoch(len(examples)) != run_steps:
        raise RuntimeError(f"the {variant}-level LM trained {record['config']['epochs']} epochs of {len(examples)} sentences, "
                           f"not the {run_steps} steps this page counts")

# %% [markdown]
# The paper's LM: $|V|$ = 12,752 words, ~184k sentences, ~7.3M parameters. This corpus has
# {glue:text}`vocab_size` words and {glue:text}`n_sentences` sentences, so the model has
# {glue:text}`n_params_m:.2f`M parameters at the same $d$.

# %% [markdown]
# ## Memorization: greedy Hits@1

# %%
rng = np.random.default_rng(seed)
sample = rng.choice(len(word_examples), size=min(eval_sample, len(word_examples)), replace=False)
hits = greedy_hits(word_model, [word_examples[i] for i in sample], word_vocab)
sample_categories = np.array([word_examples[i].rendered.fact.category for i in sample])
per_category = {c: float(hits[sample_categories == c].mean()) for c in categories}
report.number("greedy_hits1", float(hits.mean()))
report.number("greedy_min_category", min(per_category.values()))
report.number("greedy_max_category", max(per_category.values()))
report.number("n_eval", len(sample))
for c, v in per_category.items():
    print(f"{c:<22} greedy Hits@1 {v:.3f}")

# %% [markdown]
# Greedy Hits@1 over {glue:text}`n_eval` sentences: {glue:text}`greedy_hits1:.3f` (per category
# {glue:text}`greedy_min_category:.3f` to {glue:text}`greedy_max_category:.3f`; paper 0.994, range
# 0.969 to 0.999).

# %% [markdown]
# ## Readout at layer 0 and layer 1
#
# Shown in {numref}`fig-nl-lm-readout`.

# %%
readouts = {variant: corpus_lm_readout(model, vocab, examples, probe, template_seed)
            for variant, (model, vocab, examples, _) in trained.items()}


def category_means(results: list[dict], layer: int) -> dict[str, float]:
    return {c: float(np.mean([r["layers"][layer]["hits1"] for r in results if r["category"] == c])) for c in categories}


PAPER_READOUT = {"people": (0.85, 0.57), "programming_languages": (0.80, 0.63), "companies": (0.73, 0.68),
                 "buildings": (0.69, 0.48), "films": (0.56, 0.32)}
means = {variant: (category_means(r, 0), category_means(r, 1)) for variant, r in readouts.items()}
print(f"{'category':<22} {'word L0':>8} {'word L1':>8} {'entity L0':>10} {'entity L1':>10} | {'paper L0':>8} {'paper L1':>8}")
for c in categories:
    paper = PAPER_READOUT.get(c)
    paper_cols = f"{paper[0]:>8.2f} {paper[1]:>8.2f}" if paper else f"{'-':>8} {'-':>8}"
    print(f"{c:<22} {means['word'][0][c]:>8.3f} {means['word'][1][c]:>8.3f} {means['entity'][0][c]:>10.3f} "
          f"{means['entity'][1][c]:>10.3f} | {paper_cols}")
overall = {variant: tuple(float(np.mean([r["layers"][layer]["hits1"] for r in readouts[variant]])) for layer in (0, 1))
           for variant in readouts}
majority = float(np.mean([r["majority"]["hits1"] for r in readouts["word"]]))
seen = {variant: tuple(float(np.mean([r["train_layers"][layer]["hits1"] for r in readouts[variant]])) for layer in (0, 1))
        for variant in readouts}
for variant in readouts:
    print(f"{variant}-level tokens, mean over relations: held-out Hits@1 {overall[variant][0]:.3f} (layer 0) / "
          f"{overall[variant][1]:.3f} (layer 1); on the probe's own training subjects {seen[variant][0]:.3f} / {seen[variant][1]:.3f}")
    report.number(f"{variant}_seen_l0", seen[variant][0])
for variant, (l0, l1) in overall.items():
    report.number(f"{variant}_readout_l0", l0)
    report.number(f"{variant}_readout_l1", l1)
report.number("majority_hits1", majority)

# %% mystnb={"figure": {"caption": "Held-out readout Hits@1 per category from layer 0 and layer 1, with word-level (left) and entity-level (right) tokens; the paper's values are the orange marks.", "name": "fig-nl-lm-readout"}}
fig, axes = subplots(2, 1, width=5.2, height=3.6, sharey=True)
x = np.arange(len(categories))
for ax, variant in zip(axes[0], ("word", "entity")):
    ax.bar(x - 0.2, [means[variant][0][c] for c in categories], 0.4, color=COLORS["measured"], label="layer 0")
    ax.bar(x + 0.2, [means[variant][1][c] for c in categories], 0.4, color=COLORS["alt"], label="layer 1")
    if variant == "word":
        ax.scatter(x - 0.2, [PAPER_READOUT.get(c, (np.nan, np.nan))[0] for c in categories], color=COLORS["paper"], marker="_", s=300, zorder=3,
                   label="paper")
        ax.scatter(x + 0.2, [PAPER_READOUT.get(c, (np.nan, np.nan))[1] for c in categories], color=COLORS["paper"], marker="_", s=300, zorder=3)
    ax.set_xticks(x, [c.replace("_", " ") for c in categories], rotation=30, ha="right")
    ax.set(ylabel="held-out readout Hits@1", ylim=(0, 1), title=f"{variant}-level tokens")
legend(axes[0][0])
plt.show()

# %% [markdown]
# Mean over all relations: word-level tokens {glue:text}`word_readout_l0:.3f` at layer 0 against
# {glue:text}`word_readout_l1:.3f` at layer 1 (paper 0.71 vs 0.52; the majority baseline is
# {glue:text}`majority_hits1:.3f`); one token per entity {glue:text}`entity_readout_l0:.3f` and
# {glue:text}`entity_readout_l1:.3f`.
#
# **Fitting against generalising.** On the subjects the probes were trained on, layer 0 reads out at
# {glue:text}`word_seen_l0:.3f` (word-level) and {glue:text}`entity_seen_l0:.3f` (one token per
# entity), well above the held-out numbers: a probe fitted on 90% of
# the subjects transfers to the rest only where answers recur across subjects (countries, centuries,
# genres). A held-out film's director or a held-out building's completion year is usually an answer no
# training subject had, and this protocol can reach it only if answer directions themselves are
# arranged linearly, which is where this page and the paper's numbers part.

# %% [markdown]
# ## Verdicts

# %%
# Each verdict but the parameter count (an exact number) is a test against an alternative
# (geofact.evidence): memorisation with a Wilson interval over the sampled sentences, the readouts with
# Student-t intervals over the (category, relation) probes, layer 0 against layer 1 paired by probe.
lo, hi = wilson(int(hits.sum()), len(hits))
judge(report, "exp-nl-lm-memorizes",
    Contrast(Estimate("greedy Hits@1 over sampled training sentences", float(hits.mean()), lo, hi, 0.95, f"Wilson over {len(hits)} sentences", len(hits)),
             Range(memorized, 1.0, "memorized"), Range(0.0, memorized, "not memorized")),
    measured=(f"greedy Hits@1 {hits.mean():.3f} on {len(sample)} sentences (per category "
              + ", ".join(f"{c} {v:.3f}" for c, v in per_category.items())
              + f"); |V| = {len(word_vocab)}, {len(word_examples)} sentences, d = {d}, {epochs} epochs"),
    population={"sentences": "a random subsample of the training sentences", "unit": "sentence"},
    note=f"memorized taken as >= {memorized}",
)
layer_gap = {c: np.array([r["layers"][0]["hits1"] - r["layers"][1]["hits1"] for r in readouts["word"] if r["category"] == c]) for c in categories}
all_gaps = np.concatenate(list(layer_gap.values()))
judge(report, "exp-nl-lm-layer0-readout",
    Contrast(t_interval(all_gaps, "readout Hits@1 at layer 0 minus layer 1, over (category, relation) probes", 0.95,
                        unit="probes").within(-1.0, 1.0),  # a difference of fractions
             Range(0.0, 1.0, "layer 0 sharper"), Range(-1.0, 0.0, "layer 0 no sharper")),
    measured=(f"mean readout Hits@1 {overall['word'][0]:.3f} at layer 0 vs {overall['word'][1]:.3f} at layer 1 (per category "
              + ", ".join(f"{c} {means['word'][0][c]:.2f}/{means['word'][1][c]:.2f}" for c in categories) + ")"),
    population={"tokens": "word-level", "probes": "every (category, relation)", "unit": "probe (paired by layer)"},
    note="word-level tokens; subject states averaged over the subject's tokens; subject-disjoint split",
)
# The paper's model at its own size: |V| = 12,752 words, d = 256, MLP 4d, untied, learned positions
# (the sequence length, not given, is taken as this corpus's longest sentence).
paper_size_model = OneLayerLM(PAPER_VOCAB, word_record["max_len"], PAPER_RECIPE["d"], 4)
paper_size_params = sum(p.numel() for p in paper_size_model.parameters())
del paper_size_model
report.number("paper_size_params_m", paper_size_params / 1e6)
tied_params = paper_size_params - PAPER_VOCAB * PAPER_RECIPE["d"]  # the unembedding shared with the embedding
size = exact(paper_size_params / 1e6, "parameters (millions) at the paper's vocabulary and width")
judge(report, "exp-nl-lm-size",
      [Contrast(size, Range(0.95 * PAPER_PARAMS_M, math.inf, "not below 95%"), Range(0.0, 0.95 * PAPER_PARAMS_M, "fewer")),
       Contrast(size, Range(0.0, 1.05 * PAPER_PARAMS_M, "not above 105%"), Range(1.05 * PAPER_PARAMS_M, math.inf, "more"))],
      measured=(f"this code's one-layer LM at |V| = {PAPER_VOCAB:,}, d = {PAPER_RECIPE['d']}, MLP 4d, untied, {word_record['max_len']} positions: "
                f"{paper_size_params / 1e6:.2f}M parameters (paper ~{PAPER_PARAMS_M}M; with tied embeddings {tied_params / 1e6:.2f}M); "
                f"the LM trained here has {word_record['n_params'] / 1e6:.2f}M at |V| = {len(word_vocab):,}, d = {d}"),
      population={"architecture": "one layer, d = 256, MLP 4d, untied, learned positions, |V| = 12,752", "unit": "the model, counted exactly"},
      note="~ taken as within 5%")
layer0_above = {c: means["word"][0][c] > means["word"][1][c] for c in categories}
judge(report, "exp-nl-lm-per-category",
    universal(layer_gap, "readout Hits@1 at layer 0 minus layer 1 in {}", Range(0.0, 1.0, "layer 0 sharper"),
              Range(-1.0, 0.0, "layer 0 no sharper"), unit="relations"),
    measured=("layer 0 / layer 1 readout Hits@1: " + ", ".join(f"{c} {means['word'][0][c]:.2f}/{means['word'][1][c]:.2f}" for c in categories)
              + f"; layer 0 above layer 1 in {sum(layer0_above.values())} of {len(categories)} categories"),
    population={"tokens": "word-level", "categories": "every category", "unit": "category, each tested (its relations, paired by layer)"},
    note="paper: people 0.85/0.57, programming_languages 0.80/0.63, companies 0.73/0.68, buildings 0.69/0.48, films 0.56/0.32",
)
# The paper's sentence is about its LM, which memorised its corpus, at d = 256. The regime rule: the
# entity-token LM must memorise its own corpus (greedy Hits@1 on a sample, as above, at least
# `memorized`), and a readout below the threshold from a narrower model than the paper's is no
# refutation of the paper's (a readout of N entities from d dimensions can only sharpen with d), so
# "does not hold" stands only at the paper's width or wider; "holds" stands at any width.
entity_model, entity_vocab, entity_examples, entity_record = trained["entity"]
entity_sample = rng.choice(len(entity_examples), size=min(eval_sample, len(entity_examples)), replace=False)
entity_hits = greedy_hits(entity_model, [entity_examples[i] for i in entity_sample], entity_vocab)
report.number("entity_greedy_hits1", float(entity_hits.mean()))
judge(report, "exp-nl-lm-entity-tokens",
    Contrast(fraction_interval([r["layers"][0]["hits1"] for r in readouts["entity"]], "layer-0 readout Hits@1 with one token per entity, over probes",
                               min(r["n_val"] for r in readouts["entity"]), 0.95, unit="probes"),
             Range(entity_readout, 1.0, f"above {entity_readout}"), Range(0.0, entity_readout, f"below {entity_readout}")),
    measured=(f"one token per entity: layer-0 readout Hits@1 {overall['entity'][0]:.3f} (layer 1 {overall['entity'][1]:.3f}); "
              f"word-level {overall['word'][0]:.3f}; the entity-token LM's greedy Hits@1 {entity_hits.mean():.3f} on {len(entity_sample)} "
              f"sentences; d = {d} (paper {PAPER_RECIPE['d']}), {entity_record['n_params'] / 1e6:.2f}M parameters"),
    population={"tokens": "one per entity", "probes": "every (category, relation)", "unit": "probe"},
    note=f"above {entity_readout} at layer 0; in regime when the entity-token LM memorises (greedy Hits@1 >= {memorized})"
         f" and, for a verdict that does not hold, at the paper's width d >= {PAPER_RECIPE['d']}",
)
# The paper's sentences are about its LM after its training: a run with fewer optimiser steps than the paper's
# (to within one of its epochs) cannot refute that the LM memorises, and a readout of an LM that has not memorised
# its corpus says nothing of how a memorised one stores facts (as for the entity-token LM below).
short_of_budget = run_steps < (1 - BUDGET_TOLERANCE) * PAPER_STEPS
budget_reason = (f"the LM trained for {run_steps:,} optimiser steps, fewer than the paper's ~{PAPER_STEPS:,} (20 epochs of ~184k "
                 f"sentences at batch 1024): its corpus not memorised by then says nothing of the paper's LM after its training")
if report.claims["exp-nl-lm-memorizes"]["verdict"] == FAILS and short_of_budget:
    mark_not_in_regime(report.claims["exp-nl-lm-memorizes"], budget_reason)
if hits.mean() < memorized:
    for claim in ("exp-nl-lm-layer0-readout", "exp-nl-lm-per-category"):
        mark_not_in_regime(report.claims[claim], f"the word-level LM does not memorise its corpus (greedy Hits@1 {hits.mean():.3f} < "
                           f"{memorized}): the paper reads the layers of an LM that has")
entity_reasons = []
if entity_hits.mean() < memorized:
    entity_reasons.append(f"the entity-token LM does not memorise its corpus (greedy Hits@1 {entity_hits.mean():.3f} < {memorized}): "
                          "a readout of facts it did not learn says nothing of how it stores them")
if report.claims["exp-nl-lm-entity-tokens"]["verdict"] == FAILS and d < PAPER_RECIPE["d"]:
    entity_reasons.append(f"d = {d} is narrower than the paper's {PAPER_RECIPE['d']}: a readout below {entity_readout} there does not "
                          "refute the paper's model")
if entity_reasons:
    mark_not_in_regime(report.claims["exp-nl-lm-entity-tokens"], *entity_reasons)
report.save()
