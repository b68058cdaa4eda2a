"""Subject hidden states at every layer and the answers' first tokens (`sec:real-lm-probing`).

The probe input is s_l, the layer-l hidden state of the subject: at its last token (mode "last", the
paper's default) or averaged over its tokens (mode "mean", the robustness check). In a causal LM both
depend only on the tokens up to the subject's last token, so each distinct prefix is run once however
many relations and templates share it, and only the subject's vectors are kept from each batch: memory
is O(prompts x layers x d), never O(prompts x sequence x layers x d).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from geofact.nl.corpus import Rendered
from geofact.nl.lm import LoadedLM
from geofact.progress import progress

MODES = ("last", "mean")


@dataclass(frozen=True)
class Encoded:
    """One rendered fact, tokenised."""

    prefix: tuple[int, ...]        # token ids up to and including the subject's last token
    subject_positions: tuple[int, ...]
    answer_token: int              # the answer's first token: its LM-head row is the probe target


def _overlapping(offsets: list[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    """Token positions whose characters overlap [start, end); special tokens (empty offsets) never do."""
    start, end = span
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


def encode(lm: LoadedLM, rendered: Rendered) -> Encoded:
    """Tokenise the full sentence and locate the subject's tokens and the answer's first token."""
    enc = lm.tokenizer(rendered.text, return_offsets_mapping=True, add_special_tokens=True)
    ids, offsets = enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]
    subject = _overlapping(offsets, rendered.subject_span)
    answer = _overlapping(offsets, rendered.answer_span)
    if not subject or not answer:
        raise ValueError(f"cannot locate subject or answer tokens in {rendered.text!r}")
    if answer[0] <= subject[-1]:
        raise ValueError(f"the answer's first token merges with the subject in {rendered.text!r}")
    return Encoded(prefix=tuple(ids[: subject[-1] + 1]), subject_positions=tuple(subject), answer_token=ids[answer[0]])


@torch.no_grad()
def subject_states(lm: LoadedLM, encoded: list[Encoded], mode: str = "last", batch_size: int = 32,
                   desc: str = "subject states") -> torch.Tensor:
    """Subject hidden states of every prompt at every layer.  # (n_prompts, n_layers + 1, d)

    Layer 0 is the token embedding; layer n_layers is the last block's output as transformers returns
    it (after the final norm for Llama-family models)."""
    return subject_states_by_mode(lm, encoded, (mode,), batch_size, desc)[mode]


@torch.no_grad()
def subject_states_by_mode(lm: LoadedLM, encoded: list[Encoded], modes: tuple[str, ...], batch_size: int = 32,
                           desc: str = "subject states") -> dict[str, torch.Tensor]:
    """`subject_states` in each of `modes` from one forward pass of each prompt (the aggregation is all
    that differs between them).  {mode: (n_prompts, n_layers + 1, d)}"""
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"mode must be one of {MODES}, got {list(modes) or 'none'}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    unique = {}
    for e in encoded:
        unique.setdefault((e.prefix, e.subject_positions), len(unique))
    keys = list(unique)
    out = {m: torch.empty(len(keys), lm.n_layers + 1, lm.d_model) for m in modes}
    order = sorted(range(len(keys)), key=lambda i: len(keys[i][0]))  # similar lengths batch with little padding
    batches = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    pad = lm.tokenizer.pad_token_id
    for batch in progress(batches, desc=desc, unit="batch"):
        length = max(len(keys[i][0]) for i in batch)
        ids = torch.full((len(batch), length), pad, dtype=torch.long)
        mask = torch.zeros(len(batch), length, dtype=torch.long)
        weights = {m: torch.zeros(len(batch), length) for m in modes}  # which positions form s for each prompt
        for row, i in enumerate(batch):
            prefix, positions = keys[i]
            ids[row, : len(prefix)] = torch.tensor(prefix)
            mask[row, : len(prefix)] = 1
            for m in modes:
                chosen = positions[-1:] if m == "last" else positions
                weights[m][row, list(chosen)] = 1.0 / len(chosen)
        # the base model: the same hidden states without the LM head's (batch, seq, V) logits, a quarter
        # of SmolLM2's forward time that nothing here reads
        hidden = lm.model.base_model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device),
                                     output_hidden_states=True).hidden_states  # n_layers + 1 x (batch, seq, d)
        stacked = torch.stack([h.float().cpu() for h in hidden], dim=1)  # (batch, n_layers + 1, seq, d)
        for m in modes:
            out[m][batch] = torch.einsum("blsd,bs->bld", stacked, weights[m])
    index = torch.tensor([unique[(e.prefix, e.subject_positions)] for e in encoded], dtype=torch.long)
    return {m: states[index] for m, states in out.items()}
