"""The real-LM probing experiment (`sec:real-lm-probing`, `app:real-lm-probing-train`), cached per relation.

For one model and category: every fact of each relation is rendered through that relation's template
for the run (one template per run, chosen deterministically), the subject states of all of them are
collected in one streamed pass, and a stack of per-layer probes is fit per relation. Each relation's
result is written as JSON as soon as it is done, keyed by everything that determines it (model,
category, relation, mode, probe config, template seed, the category's content digest), so an interrupted
run resumes with the relations it has, a changed category or config never reuses a stale number, and a
category added to the corpus leaves the others' results valid.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import torch

from geofact.nl.corpus import Corpus, facts, render, template_for_run
from geofact.nl.lm import LoadedLM
from geofact.nl.cosine_probe import ProbeConfig, chance_metrics, probe_and_score, unit_rows
from geofact.nl.states import encode, subject_states_by_mode
from geofact.store import keyed, read_record, record_key, write_json
from geofact.training.sweep import provenance

SCHEMA = "geofact.nl.probe/1"  # the records' name from before the module was renamed: cached probes stay valid


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:60]


def run_config(lm: LoadedLM, corpus: Corpus, category: str, relation: str, mode: str, probe: ProbeConfig,
               template_seed: int) -> dict:
    return {"model": lm.name, "category": category, "relation": relation, "mode": mode, "probe": probe.as_dict(),
            "template_seed": template_seed, "corpus_version": corpus.version,
            "category_digest": corpus.category(category).digest}


def result_path(cache_dir: Path, config: dict) -> Path:
    name = f"{config['category']}.{config['relation']}.{record_key(config)}.json"
    return keyed(Path(cache_dir) / _slug(config["model"]) / name, config)


def probe_category(lm: LoadedLM, corpus: Corpus, category: str, cache_dir: Path, relations: list[str] | None = None,
                   mode: str = "last", probe: ProbeConfig = ProbeConfig(), template_seed: int = 0,
                   max_entities: int | None = None, batch_size: int = 32, also_modes: tuple[str, ...] = ()) -> list[dict]:
    """Probe results for the relations of one category (all by default), computing only the uncached ones.

    `also_modes`: other subject aggregations whose results are computed and cached from the same forward
    passes (a later call for one of them finds them cached); only `mode`'s results are returned."""
    cat = corpus.category(category)
    chosen = list(cat.relations) if relations is None else relations
    unknown = sorted(set(chosen) - set(cat.relations))
    if unknown:
        raise ValueError(f"relations must be among {sorted(cat.relations)} for {category!r}, got {unknown}")
    if max_entities is not None and max_entities < 10:
        raise ValueError(f"max_entities must be >= 10 (or None for all), got {max_entities}")
    modes = tuple(dict.fromkeys((mode, *also_modes)))
    configs = {(m, r): {**run_config(lm, corpus, category, r, m, probe, template_seed), "max_entities": max_entities}
               for m in modes for r in chosen}
    records = {key: read_record(result_path(cache_dir, c), SCHEMA, c) for key, c in configs.items()}
    todo = {m: [r for r in chosen if records[m, r] is None] for m in modes}
    todo = {m: rs for m, rs in todo.items() if rs}
    if todo:
        started = time.perf_counter()
        per_relation = {}
        for relation in [r for r in chosen if any(r in rs for rs in todo.values())]:
            template = template_for_run(category, relation, template_seed)
            kept, encoded, dropped = [], [], []
            for fact in facts(corpus, category, relation)[:max_entities]:
                rendered = render(corpus, fact, template)
                try:
                    encoded.append(encode(lm, rendered))
                    kept.append(rendered)
                except ValueError:
                    dropped.append(fact.subject)
            per_relation[relation] = (template, kept, encoded, dropped)
        everything = [e for _, _, enc, _ in per_relation.values() for e in enc]
        states = subject_states_by_mode(lm, everything, tuple(todo), batch_size=batch_size, desc=f"{category} states")
        state_seconds = (time.perf_counter() - started) / len(todo)  # one mode's share of the shared passes
        offsets, offset = {}, 0
        for relation, (_, _, encoded, _) in per_relation.items():
            offsets[relation] = offset
            offset += len(encoded)
        origin = provenance(lm.device)
        unembedding = lm.unembedding().float().cpu()  # (V, d): the probe targets are its rows
        d_unit = unit_rows(unembedding)
        for m, relations_to_do in todo.items():
            for relation in relations_to_do:
                template, kept, encoded, dropped = per_relation[relation]
                rel_states = states[m][offsets[relation]: offsets[relation] + len(encoded)]
                fit_start = time.perf_counter()
                gold = torch.tensor([e.answer_token for e in encoded])
                result = probe_and_score(rel_states, gold, [r.fact.subject for r in kept], unembedding, d_unit, probe,
                                         device=lm.device)
                record = {
                    "schema": SCHEMA, "config": configs[m, relation], "model_info": lm.describe(),
                    "template": template, "template_text": cat.relations[relation].templates[template],
                    "example": kept[0].prompt if kept else None, "dropped": dropped,
                    "n_answer_tokens": int(torch.unique(gold).numel()), "chance": chance_metrics(lm.vocab_size), **result,
                    "seconds": {"states_share": state_seconds * len(encoded) / max(1, len(everything)),
                                "probes": time.perf_counter() - fit_start},
                    "provenance": origin,
                }
                path = result_path(cache_dir, configs[m, relation])
                path.parent.mkdir(parents=True, exist_ok=True)
                write_json(path, record)
                records[m, relation] = record
    return [records[mode, r] for r in chosen]


def layer_table(records: list[dict]) -> dict[str, np.ndarray]:
    """Per-layer metrics averaged over relations (the paper's per-category cells).  metric -> (L + 1,)"""
    return {m: np.mean([[row[m] for row in rec["layers"]] for rec in records], axis=0) for m in ("hits1", "hits10", "mrr")}


def best_layer_summary(records: list[dict]) -> dict[str, float]:
    """The row of `tab:real-lm-best-mrr` for one (model, category): the best layer by relation-averaged
    Hits@1 (the paper's rule), its MRR and Hits@1, layer-0 MRR, and the best layer's depth fraction."""
    table = layer_table(records)
    best = int(np.argmax(table["hits1"]))
    depth = len(table["hits1"]) - 1
    return {"layer0_mrr": float(table["mrr"][0]), "best_mrr": float(table["mrr"][best]),
            "best_hits1": float(table["hits1"][best]), "best_layer": best, "depth": depth,
            "best_fraction": best / depth}


# `tab:real-lm-best-mrr`: (layer-0 MRR, best-layer MRR, best-layer Hits@1, best layer, depth).
PAPER_BEST_LAYER = {
    ("Qwen2.5-0.5B", "people"): (0.437, 0.644, 0.578, 24, 24),
    ("Qwen2.5-0.5B", "companies"): (0.440, 0.565, 0.523, 24, 24),
    ("Qwen2.5-0.5B", "buildings"): (0.477, 0.583, 0.489, 24, 24),
    ("Qwen2.5-0.5B", "films"): (0.315, 0.381, 0.326, 24, 24),
    ("Qwen2.5-0.5B", "programming_languages"): (0.451, 0.528, 0.477, 24, 24),
    ("Qwen3-14B", "people"): (0.465, 0.707, 0.659, 36, 40),
    ("Qwen3-14B", "companies"): (0.461, 0.640, 0.594, 36, 40),
    ("Qwen3-14B", "buildings"): (0.490, 0.672, 0.588, 40, 40),
    ("Qwen3-14B", "films"): (0.353, 0.514, 0.464, 36, 40),
    ("Qwen3-14B", "programming_languages"): (0.483, 0.606, 0.553, 12, 40),
    ("Llama-3.1-8B", "people"): (0.436, 0.701, 0.651, 28, 32),
    ("Llama-3.1-8B", "companies"): (0.361, 0.575, 0.510, 24, 32),
    ("Llama-3.1-8B", "buildings"): (0.308, 0.547, 0.462, 32, 32),
    ("Llama-3.1-8B", "films"): (0.256, 0.460, 0.404, 28, 32),
    ("Llama-3.1-8B", "programming_languages"): (0.466, 0.553, 0.475, 8, 32),
    ("Llama-3.2-1B", "people"): (0.415, 0.672, 0.615, 12, 16),
    ("Llama-3.2-1B", "companies"): (0.343, 0.535, 0.468, 16, 16),
    ("Llama-3.2-1B", "buildings"): (0.296, 0.465, 0.369, 16, 16),
    ("Llama-3.2-1B", "films"): (0.249, 0.390, 0.335, 12, 16),
    ("Llama-3.2-1B", "programming_languages"): (0.430, 0.516, 0.453, 8, 16),
    ("Phi-4", "people"): (0.437, 0.707, 0.656, 12, 40),
    ("Phi-4", "companies"): (0.363, 0.565, 0.500, 40, 40),
    ("Phi-4", "buildings"): (0.303, 0.536, 0.449, 40, 40),
    ("Phi-4", "films"): (0.261, 0.434, 0.374, 16, 40),
    ("Phi-4", "programming_languages"): (0.440, 0.545, 0.466, 12, 40),
}


def paper_category_means() -> dict[str, dict[str, float]]:
    """The paper's numbers averaged over its five models, per category (what the body of Section 5.3 quotes)."""
    out = {}
    for category in sorted({c for _, c in PAPER_BEST_LAYER}):
        rows = [v for (_, c), v in PAPER_BEST_LAYER.items() if c == category]
        out[category] = {"layer0_mrr": float(np.mean([r[0] for r in rows])), "best_mrr": float(np.mean([r[1] for r in rows])),
                         "best_hits1": float(np.mean([r[2] for r in rows])),
                         "best_fraction": float(np.mean([r[3] / r[4] for r in rows]))}
    return out


# The paper's five models (hub id -> the name its table uses) and the five categories of its table.
# Verdicts about the paper's numbers are taken on these only; other models and categories (SmolLM2,
# species) are extra rows.
PAPER_MODELS = {
    "Qwen/Qwen2.5-0.5B": "Qwen2.5-0.5B",
    "meta-llama/Llama-3.2-1B": "Llama-3.2-1B",
    "meta-llama/Llama-3.1-8B": "Llama-3.1-8B",
    "Qwen/Qwen3-14B": "Qwen3-14B",
    "microsoft/phi-4": "Phi-4",
}
PAPER_CATEGORIES = ("people", "companies", "buildings", "films", "programming_languages")
# Section 5.3: "best-layer MRR (averaged over models) reaching 0.69 on people, 0.58 on companies, ...".
PAPER_TEXT_BEST_MRR = {"people": 0.69, "companies": 0.58, "buildings": 0.56, "programming_languages": 0.55, "films": 0.44}
# Section 5.3: "with the optimal layer roughly 50-80% through the network".
PAPER_DEPTH_RANGE = (0.5, 0.8)


def paper_depth_counts(low: float = PAPER_DEPTH_RANGE[0], high: float = PAPER_DEPTH_RANGE[1]) -> dict[str, int]:
    """Where the best layers of the paper's own table lie: above, at and below half the depth, and in [low, high]."""
    fractions = [layer / depth for (_, _, _, layer, depth) in PAPER_BEST_LAYER.values()]
    return {"n": len(fractions), "above_half": sum(f > 0.5 for f in fractions), "at_half": sum(f == 0.5 for f in fractions),
            "below_half": sum(f < 0.5 for f in fractions), "in_range": sum(low <= f <= high for f in fractions)}

