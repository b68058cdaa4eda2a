import pytest
import torch

from geofact.nl import corpus_lm
from geofact.nl.corpus import facts, render
from geofact.nl.corpus_lm import (
    BOS,
    CorpusLMConfig,
    OneLayerLM,
    build_vocab,
    corpus_lm_readout,
    greedy_hits,
    prepare,
    trained_corpus_lm,
)
from geofact.nl.cosine_probe import ProbeConfig

SMALL = CorpusLMConfig(categories=("programming_languages",), d=32, epochs=40, batch_size=64, lr=3e-3)


@pytest.fixture(scope="module")
def small_lm(corpus, tmp_path_factory):
    return trained_corpus_lm(corpus, SMALL, tmp_path_factory.mktemp("corpus-lm"))


def test_word_and_entity_tokenisation_locate_subject_and_answer(corpus):
    tolkien = next(f for f in facts(corpus, "people", "city_of_birth") if f.subject == "J. R. R. Tolkien")
    r = render(corpus, tolkien, 0)  # "J. R. R. Tolkien was born in the city of Bloemfontein"
    for entity_tokens, subject_len in ((False, 7), (True, 1)):
        vocab = build_vocab([r], entity_tokens)
        e = vocab.encode(r)
        assert e.ids[0] == vocab.index[BOS]
        assert len(e.subject_positions) == subject_len and e.subject_positions[0] == 1
        assert [vocab.tokens[e.ids[p]] for p in e.answer_positions] == ["Bloemfontein"]
        assert e.answer_positions[-1] == len(e.ids) - 1
    assert vocab.tokens[e.ids[1]] == "J. R. R. Tolkien"


def test_config_names_the_bad_field():
    with pytest.raises(ValueError, match="CorpusLMConfig.epochs must be >= 1"):
        CorpusLMConfig(epochs=0)


def test_the_model_is_causal_and_sized_like_the_paper():
    model = OneLayerLM(vocab_size=12752, max_len=32, d=256, mlp_ratio=4)
    assert 7.2e6 < sum(p.numel() for p in model.parameters()) < 7.4e6  # the paper's ~7.3M
    ids = torch.randint(0, 12752, (2, 10))
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 12752
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[:, :6], model(changed)[:, :6])


def test_a_small_lm_learns_its_corpus_and_greedy_hits_match_a_decoding_loop(small_lm):
    model, vocab, examples, record = small_lm
    assert record["loss"][-1] < record["loss"][0] / 4
    hits = greedy_hits(model, examples, vocab)
    assert hits.mean() > 0.6
    for e, hit in list(zip(examples, hits))[:40]:
        ids = list(e.ids[: e.answer_positions[0]])
        with torch.no_grad():
            for _ in e.answer_positions:
                ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
        assert hit == float(ids[e.answer_positions[0]:] == list(e.ids[e.answer_positions[0]:]))


def test_trained_models_are_cached(corpus, small_lm, tmp_path, monkeypatch):
    model, vocab, examples, record = trained_corpus_lm(corpus, SMALL.__class__(**{**SMALL.as_dict(), "epochs": 1}), tmp_path)
    monkeypatch.setattr(corpus_lm, "train_corpus_lm", lambda *a, **k: pytest.fail("retrained a cached model"))
    again, _, _, again_record = trained_corpus_lm(corpus, SMALL.__class__(**{**SMALL.as_dict(), "epochs": 1}), tmp_path)
    assert again_record == record
    for name, value in model.state_dict().items():
        assert torch.equal(value, again.state_dict()[name])


def test_readout_reports_both_layers_per_relation(small_lm):
    model, vocab, examples, _ = small_lm
    results = corpus_lm_readout(model, vocab, examples, ProbeConfig(rank=8, max_epochs=3, val_fraction=0.1))
    assert sorted(r["relation"] for r in results) == sorted(
        ["designer", "first_appeared_year", "file_extension", "typing_discipline"])
    for r in results:
        assert [row["layer"] for row in r["layers"]] == [0, 1] and r["n_val"] > 0


def test_prepare_covers_every_fact_through_every_template(corpus):
    vocab, examples = prepare(corpus, SMALL)
    assert len(examples) == 5 * corpus.category("programming_languages").n_facts
    assert len(vocab) == len(set(vocab.tokens))


def test_the_training_loss_is_the_padded_cross_entropy_computed_at_the_real_positions_only():
    from torch.nn import functional as F

    from geofact.nl.corpus_lm import OneLayerLM, next_token_loss

    torch.manual_seed(0)
    model = OneLayerLM(vocab_size=11, max_len=6, d=8, mlp_ratio=2)
    pad = 0
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [2, 9, 10, 0, 0, 0], [5, 1, 0, 0, 0, 0]])  # padded at the end
    logits = model(ids[:, :-1])
    expected = F.cross_entropy(logits.reshape(-1, 11), ids[:, 1:].reshape(-1), ignore_index=pad)
    got = next_token_loss(model, ids, pad)
    torch.testing.assert_close(got, expected)
    grads = torch.autograd.grad(got, list(model.parameters()))
    for g, e in zip(grads, torch.autograd.grad(expected, list(model.parameters()))):
        torch.testing.assert_close(g, e)


def test_training_stopped_by_the_budget_resumes_to_the_weights_of_an_uninterrupted_run(corpus, tmp_path, monkeypatch):
    from geofact.training.resume import BudgetSpent

    config = SMALL.__class__(**{**SMALL.as_dict(), "epochs": 3})
    whole, _, _, whole_record = trained_corpus_lm(corpus, config, tmp_path / "whole")
    def deadline(*spent: bool) -> None:  # the deadline's answers, one read each: at the start, then after each epoch
        answers = iter(spent)
        monkeypatch.setattr(corpus_lm, "past_deadline", lambda: next(answers))

    deadline(False, True)
    with pytest.raises(BudgetSpent, match="after epoch 1 of 3"):
        trained_corpus_lm(corpus, config, tmp_path / "cut")
    assert not list((tmp_path / "cut").glob("corpus-lm-*.json"))  # no record of a half-trained model
    assert len(list((tmp_path / "cut" / "groups").glob("*.npz"))) == 1
    deadline(True)
    with pytest.raises(BudgetSpent, match="before epoch 2 of 3"):  # past the deadline a resumed call trains nothing
        trained_corpus_lm(corpus, config, tmp_path / "cut")
    deadline(False, True)
    with pytest.raises(BudgetSpent, match="after epoch 2 of 3"):  # resumed, and stopped again at the next boundary
        trained_corpus_lm(corpus, config, tmp_path / "cut")
    monkeypatch.setattr(corpus_lm, "past_deadline", lambda: False)
    resumed, _, _, record = trained_corpus_lm(corpus, config, tmp_path / "cut")
    assert record["loss"] == whole_record["loss"]
    for name, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name
    assert not list((tmp_path / "cut" / "groups").glob("*.npz"))  # the state is gone once the record is written


def test_training_does_not_start_past_the_budget(corpus, tmp_path, monkeypatch):
    from geofact.training.resume import BudgetSpent

    monkeypatch.setattr(corpus_lm, "past_deadline", lambda: True)
    with pytest.raises(BudgetSpent, match="before epoch 1 of 1 of the corpus LM"):
        trained_corpus_lm(corpus, SMALL.__class__(**{**SMALL.as_dict(), "epochs": 1}), tmp_path)
