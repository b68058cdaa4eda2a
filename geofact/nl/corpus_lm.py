"""A one-layer LM trained on the rendered corpus (Appendix E, last subsection).

A single-layer GPT-style decoder (pre-RMSNorm, one attention head, learned absolute positions, MLP of
width 4d, untied input and output embeddings) over a word-level vocabulary built from the rendered
sentences, trained with full-sequence next-token cross-entropy (AdamW, constant lr 5e-4, weight decay
1e-3, 20 epochs, batch 1024). Then: greedy Hits@1 on the answers, and the readout protocol of
`sec:real-lm-probing` at layer 0 (token + position embedding) and layer 1 (after the block).

Tokenisation is word level (`\\w+` runs and single punctuation marks), or, with `entity_tokens`, one
token per entity: every subject and every answer string is a single token however many words it has
(the paper's "influence of tokenization" variant).

Training is time-budgeted like the stacked trainers (geofact.training.resume): the model, AdamW's moments and
the shuffling generator are written at an epoch boundary every few minutes and at a time budget's deadline,
where training stops with `BudgetSpent`; the same call again resumes from that epoch and ends with the weights
an uninterrupted run would have (same device and thread count).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from geofact.nl.corpus import Corpus, Rendered, render_corpus, template_for_run
from geofact.nl.cosine_probe import ProbeConfig, probe_and_score, unit_rows
from geofact.progress import progress
from geofact.settings import past_deadline
from geofact.store import (
    keyed,
    read_arrays,
    read_record,
    record_key,
    refuse_in_records_only,
    write_arrays,
    write_json,
)
from geofact.training.optim import fused_adamw
from geofact.training.resume import BudgetSpent, GroupCheckpoint, GroupState
from geofact.training.sweep import provenance

RECORD_SCHEMA = "geofact.nl.corpus_lm/1"
WORD = re.compile(r"\w+|[^\w\s]")
PAD, BOS = "<pad>", "<bos>"


@dataclass(frozen=True)
class CorpusLMConfig:
    categories: tuple[str, ...] = ("people", "companies", "films", "buildings", "programming_languages")
    entity_tokens: bool = False     # one token per subject / answer string instead of one per word
    d: int = 256                    # embedding dimension
    mlp_ratio: int = 4              # MLP width = mlp_ratio * d
    epochs: int = 20
    batch_size: int = 1024
    lr: float = 5e-4
    weight_decay: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "categories", tuple(self.categories))
        ranges = {"d": (self.d >= 4, ">= 4"), "mlp_ratio": (self.mlp_ratio >= 1, ">= 1"),
                  "epochs": (self.epochs >= 1, ">= 1"), "batch_size": (self.batch_size >= 1, ">= 1"),
                  "lr": (self.lr > 0, "> 0"), "weight_decay": (self.weight_decay >= 0, ">= 0")}
        for name, (ok, allowed) in ranges.items():
            if not ok:
                raise ValueError(f"CorpusLMConfig.{name} must be {allowed}, got {getattr(self, name)!r}")
        if not self.categories:
            raise ValueError("CorpusLMConfig.categories must name at least one category")

    def as_dict(self) -> dict:
        return {**asdict(self), "categories": list(self.categories)}


@dataclass(frozen=True)
class Example:
    """One rendered fact as token ids, with where its subject and answer sit."""

    rendered: Rendered
    ids: tuple[int, ...]            # <bos> + the sentence
    subject_positions: tuple[int, ...]
    answer_positions: tuple[int, ...]


@dataclass
class Vocab:
    tokens: list[str]
    entity_tokens: bool
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def pieces(self, rendered: Rendered) -> tuple[list[str], list[int], list[int]]:
        """Token strings of a sentence and the positions (in the sentence) of its subject and answer."""
        text, (s0, s1), (a0, a1) = rendered.text, rendered.subject_span, rendered.answer_span

        def words(segment: str) -> list[str]:
            return WORD.findall(segment)

        def entity(segment: str) -> list[str]:
            return [segment] if self.entity_tokens else words(segment)

        before, subject, middle, answer = words(text[:s0]), entity(text[s0:s1]), words(text[s1:a0]), entity(text[a0:a1])
        start_subject = len(before)
        start_answer = start_subject + len(subject) + len(middle)
        return (before + subject + middle + answer, list(range(start_subject, start_subject + len(subject))),
                list(range(start_answer, start_answer + len(answer))))

    def encode(self, rendered: Rendered) -> Example:
        tokens, subject, answer = self.pieces(rendered)
        ids = (self.index[BOS], *(self.index[t] for t in tokens))
        return Example(rendered, ids, tuple(p + 1 for p in subject), tuple(p + 1 for p in answer))


def build_vocab(rendered: list[Rendered], entity_tokens: bool) -> Vocab:
    """The vocabulary of the rendered sentences, in first-seen order after <pad> and <bos>."""
    probe = Vocab([PAD, BOS], entity_tokens)
    seen = dict.fromkeys([PAD, BOS])
    for r in rendered:
        seen.update(dict.fromkeys(probe.pieces(r)[0]))
    return Vocab(list(seen), entity_tokens)


class RMSNorm(torch.nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class OneLayerLM(torch.nn.Module):
    """Single-layer decoder: x0 = E[t] + P[pos]; x1 = x0 + attn(norm(x0)); x1 += mlp(norm(x1)); logits = U norm(x1)."""

    def __init__(self, vocab_size: int, max_len: int, d: int, mlp_ratio: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, d)
        self.pos = torch.nn.Embedding(max_len, d)
        self.norm_attn, self.norm_mlp, self.norm_out = RMSNorm(d), RMSNorm(d), RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.attn_out = torch.nn.Linear(d, d, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, mlp_ratio * d), torch.nn.GELU(), torch.nn.Linear(mlp_ratio * d, d))
        self.unembed = torch.nn.Linear(d, vocab_size, bias=False)  # untied: its rows are the readout targets

    def states(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual stream after the embedding (layer 0) and after the block (layer 1).  (batch, seq, d) each"""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x0 = self.embed(ids) + self.pos(positions)
        q, k, v = self.qkv(self.norm_attn(x0)).chunk(3, dim=-1)
        x = x0 + self.attn_out(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        x1 = x + self.mlp(self.norm_mlp(x))
        return x0, x1

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (batch, seq) -> logits (batch, seq, V)"""
        return self.unembed(self.norm_out(self.states(ids)[1]))


def _pad(examples: list[Example], pad: int) -> torch.Tensor:
    length = max(len(e.ids) for e in examples)
    out = torch.full((len(examples), length), pad, dtype=torch.long)
    for row, e in enumerate(examples):
        out[row, : len(e.ids)] = torch.tensor(e.ids)
    return out


def prepare(corpus: Corpus, config: CorpusLMConfig) -> tuple[Vocab, list[Example]]:
    """Render the chosen categories through all five templates, build the vocabulary and encode."""
    rendered = render_corpus(corpus, list(config.categories))
    vocab = build_vocab(rendered, config.entity_tokens)
    return vocab, [vocab.encode(r) for r in rendered]


def next_token_loss(model: OneLayerLM, ids: torch.Tensor, pad: int) -> torch.Tensor:
    """The mean next-token cross-entropy of padded sequences ids (B, L) over the positions whose next token
    is not `pad`: `F.cross_entropy(model(ids[:, :-1]), ids[:, 1:], ignore_index=pad)`, with the unembedding
    computed at those positions only (the vocabulary-wide logits are most of a step's work, and about half
    the positions of a batch are padding: a step 22% faster at d = 128, batch 128)."""
    targets = ids[:, 1:]
    real = targets != pad  # (B, L - 1)
    final = model.norm_out(model.states(ids[:, :-1])[1])[real]  # (n, d)
    return F.cross_entropy(model.unembed(final), targets[real])


def _training_state(model: OneLayerLM, optimiser: torch.optim.Optimizer, generator: torch.Generator
                    ) -> dict[str, torch.Tensor]:
    """The tensors a resumed training needs: the weights, AdamW's per-parameter state and the shuffling generator."""
    tensors = {f"model/{name}": value for name, value in model.state_dict().items()}
    for index, state in optimiser.state_dict()["state"].items():
        tensors |= {f"optimiser/{index}/{name}": value for name, value in state.items()}
    return tensors | {"generator": generator.get_state()}


def _restore_training(model: OneLayerLM, optimiser: torch.optim.Optimizer, generator: torch.Generator,
                      tensors: dict[str, torch.Tensor]) -> None:
    model.load_state_dict({name[len("model/"):]: value for name, value in tensors.items() if name.startswith("model/")})
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("optimiser/"):
            index, key = name[len("optimiser/"):].split("/", 1)
            state.setdefault(int(index), {})[key] = value
    optimiser.load_state_dict({"state": state, "param_groups": optimiser.state_dict()["param_groups"]})
    generator.set_state(tensors["generator"])


def train_corpus_lm(examples: list[Example], vocab: Vocab, config: CorpusLMConfig,
                    device: str | torch.device = "cpu", checkpoint: GroupCheckpoint | None = None
                    ) -> tuple[OneLayerLM, dict]:
    """Full-sequence next-token training; returns the model (on the CPU) and the mean loss per epoch.

    With a `checkpoint`, training starts from the epoch it holds, writes its state at an epoch boundary when
    due, and past a time budget's deadline writes it and raises `BudgetSpent`: no epoch starts past the deadline."""
    torch.manual_seed(config.seed)
    max_len = max(len(e.ids) for e in examples)
    model = OneLayerLM(len(vocab), max_len, config.d, config.mlp_ratio).to(device)
    optimiser = fused_adamw(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    pad = vocab.index[PAD]
    losses: list[float] = []
    first, seconds_before = 0, 0.0
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is not None:
        _restore_training(model, optimiser, generator, saved.tensors)
        first, losses, seconds_before = saved.step, list(saved.meta["loss"]), saved.seconds
    if checkpoint is not None and past_deadline():
        raise BudgetSpent(f"time budget spent before epoch {first + 1} of {config.epochs} of the corpus LM"
                          + (f"; its state is in {checkpoint.state_path}" if saved is not None else ""))
    started = time.perf_counter()
    for epoch in progress(range(first, config.epochs), desc="corpus LM epochs", unit="epoch",
                          initial=first, total=config.epochs):
        order = torch.randperm(len(examples), generator=generator).tolist()
        total, count = 0.0, 0
        for start in range(0, len(order), config.batch_size):
            ids = _pad([examples[i] for i in order[start: start + config.batch_size]], pad).to(device)
            loss = next_token_loss(model, ids, pad)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            total, count = total + loss.item(), count + 1
        losses.append(total / count)
        spent = checkpoint is not None and past_deadline()
        if checkpoint is not None and epoch + 1 < config.epochs and (spent or checkpoint.due()):
            state = GroupState(step=epoch + 1, alive=[0], tensors=_training_state(model, optimiser, generator),
                               meta={"loss": losses}, seconds=seconds_before + time.perf_counter() - started)
            checkpoint.save(state)
            if spent:
                raise BudgetSpent(f"time budget spent after epoch {epoch + 1} of {config.epochs} of the corpus LM; "
                                  f"its state is in {checkpoint.state_path}, and the same call again resumes it")
    return model.cpu().eval(), {"loss": losses, "seconds": seconds_before + time.perf_counter() - started,
                                "n_params": sum(p.numel() for p in model.parameters())}


@torch.no_grad()
def greedy_hits(model: OneLayerLM, examples: list[Example], vocab: Vocab, batch_size: int = 512) -> np.ndarray:
    """1 where greedy decoding after the prompt reproduces every answer token, else 0.  (n,)

    Greedy decoding matches a k-token answer iff the argmax at each answer position, given the gold
    tokens before it, is the gold token: one teacher-forced pass decides it."""
    hits = np.zeros(len(examples))
    pad = vocab.index[PAD]
    for start in range(0, len(examples), batch_size):
        batch = examples[start: start + batch_size]
        ids = _pad(batch, pad)
        predicted = model(ids).argmax(-1)  # position p predicts token p + 1
        for row, e in enumerate(batch):
            positions = torch.tensor(e.answer_positions)
            hits[start + row] = float(torch.equal(predicted[row, positions - 1], ids[row, positions]))
    return hits


@torch.no_grad()
def subject_mean_states(model: OneLayerLM, examples: list[Example], vocab: Vocab, batch_size: int = 512) -> torch.Tensor:
    """Layer-0 and layer-1 states averaged over all of each subject's tokens.  (n, 2, d)"""
    out = []
    pad = vocab.index[PAD]
    for start in range(0, len(examples), batch_size):
        batch = examples[start: start + batch_size]
        x0, x1 = model.states(_pad(batch, pad))
        weights = torch.zeros(len(batch), x0.shape[1])
        for row, e in enumerate(batch):
            weights[row, list(e.subject_positions)] = 1 / len(e.subject_positions)
        out.append(torch.stack([torch.einsum("bsd,bs->bd", x, weights) for x in (x0, x1)], dim=1))
    return torch.cat(out)


def key_content(config: CorpusLMConfig, corpus: Corpus) -> dict:
    """What the cached LM depends on: the config and the contents of the categories it trains on (not the
    whole corpus, so a category added to the corpus leaves the trained LMs valid)."""
    return {**config.as_dict(), "categories_digest": corpus.categories_digest(config.categories)}


def config_key(config: CorpusLMConfig, corpus: Corpus) -> str:
    """The cache key of the LM (`geofact.store.record_key` of `key_content`)."""
    return record_key(key_content(config, corpus))


def trained_corpus_lm(corpus: Corpus, config: CorpusLMConfig, cache_dir: Path,
                      device: str | torch.device = "cpu") -> tuple[OneLayerLM, Vocab, list[Example], dict]:
    """The trained LM for `config`, from the cache (weights NPZ + JSON record) or trained and cached."""
    vocab, examples = prepare(corpus, config)
    key = config_key(config, corpus)
    cache_dir = Path(cache_dir)
    content = key_content(config, corpus)
    weights, record_path = (keyed(cache_dir / f"corpus-lm-{key}{suffix}", content) for suffix in (".npz", ".json"))
    max_len = max(len(e.ids) for e in examples)
    if weights.exists() and record_path.exists():
        record = read_record(record_path, RECORD_SCHEMA, config.as_dict())
        model = OneLayerLM(len(vocab), max_len, config.d, config.mlp_ratio)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in read_arrays(weights).items()})
        return model.eval(), vocab, examples, record
    refuse_in_records_only(f"the corpus LM {key} (its weights)")
    checkpoint = GroupCheckpoint(cache_dir / "groups", [key], content)
    model, log = train_corpus_lm(examples, vocab, config, device, checkpoint)
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_arrays(weights, {k: v.numpy() for k, v in model.state_dict().items()})
    record = {"schema": RECORD_SCHEMA, "config": config.as_dict(), "corpus_digest": corpus.digest,
              "categories_digest": corpus.categories_digest(config.categories), "vocab_size": len(vocab),
              "n_sentences": len(examples), "max_len": max_len, **log,
              "provenance": provenance(torch.device(device))}
    write_json(record_path, record)
    checkpoint.clear()
    return model, vocab, examples, record


def corpus_lm_readout(model: OneLayerLM, vocab: Vocab, examples: list[Example], probe: ProbeConfig,
                      template_seed: int = 0) -> list[dict]:
    """The readout protocol of `sec:real-lm-probing` on the corpus LM, per (category, relation): the
    subject state averaged over all its tokens at layer 0 and layer 1, a cosine probe to the LM-head row
    of the answer's first token, full-vocabulary ranks on held-out subjects."""
    buckets: dict[tuple[str, str], list[Example]] = {}
    for e in examples:
        fact = e.rendered.fact
        if e.rendered.template == template_for_run(fact.category, fact.relation, template_seed):
            buckets.setdefault((fact.category, fact.relation), []).append(e)
    unembedding = model.unembed.weight.detach()  # (V, d)
    d_unit = unit_rows(unembedding)
    results = []
    for (category, relation), bucket in progress(list(buckets.items()), desc="readout probes", unit="relation"):
        states = subject_mean_states(model, bucket, vocab)  # (n, 2, d)
        gold = torch.tensor([e.ids[e.answer_positions[0]] for e in bucket])
        # held-out subjects are the measurement; the training subjects tell fitting apart from generalising
        scored = probe_and_score(states, gold, [e.rendered.fact.subject for e in bucket], unembedding, d_unit, probe,
                                 score_seen=True)
        results.append({"category": category, "relation": relation, **scored})
    return results
