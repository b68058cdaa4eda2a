import pytest
import torch

from geofact.nl.corpus import facts, render
from geofact.nl.states import encode, subject_states, subject_states_by_mode


def _rendered(corpus, n=12):
    return [render(corpus, f, t % 5) for t, f in enumerate(facts(corpus, "people", "city_of_birth")[:n])]


def test_encode_finds_subject_tokens_and_answer_token(corpus, tiny_lm):
    einstein = facts(corpus, "people", "city_of_birth")[0]
    r = render(corpus, einstein, 0)  # "Albert Einstein was born in the city of Ulm"
    e = encode(tiny_lm, r)
    vocab = tiny_lm.tokenizer.get_vocab()
    assert e.subject_positions == (0, 1)
    assert e.prefix == (vocab["Albert"], vocab["Einstein"])
    assert e.answer_token == vocab["Ulm"]


def test_last_and_mean_states_equal_a_direct_forward_pass(corpus, tiny_lm):
    rendered = _rendered(corpus)
    encoded = [encode(tiny_lm, r) for r in rendered]
    last = subject_states(tiny_lm, encoded, mode="last", batch_size=5)
    mean = subject_states(tiny_lm, encoded, mode="mean", batch_size=1)
    assert last.shape == (len(rendered), tiny_lm.n_layers + 1, tiny_lm.d_model)
    for i, r in enumerate(rendered):
        ids = torch.tensor([tiny_lm.tokenizer(r.text)["input_ids"]])
        with torch.no_grad():
            hidden = torch.stack(tiny_lm.model(input_ids=ids, output_hidden_states=True).hidden_states)[:, 0]
        positions = list(encoded[i].subject_positions)
        torch.testing.assert_close(last[i], hidden[:, positions[-1]], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mean[i], hidden[:, positions].mean(1), atol=1e-5, rtol=1e-5)


def test_both_modes_from_one_pass_equal_two_separate_passes(corpus, tiny_lm):
    encoded = [encode(tiny_lm, r) for r in _rendered(corpus)]
    both = subject_states_by_mode(tiny_lm, encoded, ("last", "mean"), batch_size=5)
    for mode in ("last", "mean"):
        assert torch.equal(both[mode], subject_states(tiny_lm, encoded, mode=mode, batch_size=5))


def test_shared_prefixes_are_computed_once_and_returned_per_prompt(corpus, tiny_lm):
    encoded = [encode(tiny_lm, r) for r in _rendered(corpus, 4)]
    twice = subject_states(tiny_lm, encoded + encoded, batch_size=3)
    torch.testing.assert_close(twice[:4], twice[4:])


def test_bad_mode_is_rejected(corpus, tiny_lm):
    with pytest.raises(ValueError, match="mode must be one of"):
        subject_states(tiny_lm, [], mode="first")
    with pytest.raises(ValueError, match="mode must be one of"):
        subject_states_by_mode(tiny_lm, [], ())
