import pytest
import torch

from geofact.nl.lm import SMOLLM2, ModelUnavailable, load_lm


def test_tiny_llama_exposes_what_the_probes_need(tiny_lm):
    assert tiny_lm.n_layers == 2 and tiny_lm.d_model == 32
    D = tiny_lm.unembedding()
    assert D.shape == (tiny_lm.vocab_size, 32)
    info = tiny_lm.describe()
    assert info["architecture"] == "LlamaForCausalLM" and info["tied_embeddings"] is False
    enc = tiny_lm.tokenizer("Albert Einstein was born in Ulm", return_offsets_mapping=True)
    assert enc["offset_mapping"][1] == (7, 15)


def test_missing_models_fail_clearly(tmp_path):
    with pytest.raises(ModelUnavailable, match="does not exist"):
        load_lm(str(tmp_path / "model.gguf"))
    with pytest.raises(ModelUnavailable, match="cannot load 'no-such-org/no-such-model' \\(hub\\)"):
        load_lm("no-such-org/no-such-model")


def test_cuda_request_without_cuda_is_an_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        load_lm(SMOLLM2, device="cuda")
