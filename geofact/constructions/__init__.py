"""Every construction of the paper as weights of `geofact.transformer.Transformer`.

Each function takes a task (and, for k-hop, the task carries k) and returns a `Construction` with
`predict`, `evaluate`/`accuracy(task)` and the built `d_model`, `mlp_width`, `n_layers`, `n_heads`,
`n_params` beside the paper's `formulas`, and `blocks`, the residual stream's coordinates named as
the proof names them. Each module splits its construction into the proof's stages (embeddings,
heads, MLPs, read-out) as public functions, so a page can show each one under the paragraph it
implements; `primitives` holds what several proofs share.

| function | paper |
|---|---|
| `disjoint_attribute_transformer` | Theorem F.1 (Appendix F) |
| `shared_attribute_mlp` | Theorem 4.1, MLP version |
| `shared_attribute_attention` | Theorem 4.1, attention-only version |
| `shared_attribute_hierarchical` | Theorem 4.1, hierarchical attention |
| `key_value_memory` | Theorem 4.3 (1) |
| `key_value_memory_first_token` | Theorem 4.3 (1), the proof's layout (unmasked attention) |
| `embedding_precomputation` | Theorem 4.3 (2) |
| `chain_of_thought` | Theorem 4.4 |
"""

from geofact.constructions.base import Construction, Evaluation
from geofact.constructions.cot import chain_of_thought
from geofact.constructions.disjoint import disjoint_attribute_transformer
from geofact.constructions.khop import embedding_precomputation, key_value_memory, key_value_memory_first_token
from geofact.constructions.shared import (
    shared_attribute_attention,
    shared_attribute_hierarchical,
    shared_attribute_mlp,
)

__all__ = [
    "Construction",
    "Evaluation",
    "chain_of_thought",
    "disjoint_attribute_transformer",
    "embedding_precomputation",
    "key_value_memory",
    "key_value_memory_first_token",
    "shared_attribute_attention",
    "shared_attribute_hierarchical",
    "shared_attribute_mlp",
]
