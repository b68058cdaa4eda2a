import pytest
import torch

from geofact.transformer import MLP, AttentionHead, Layer, Transformer


def eye(d):
    return torch.eye(d, dtype=torch.float64)


def test_uniform_head_averages_the_causal_prefix():
    x = torch.arange(12, dtype=torch.float64).reshape(1, 3, 4)  # (batch, seq, d)
    head = AttentionHead(torch.zeros(4, 1, dtype=torch.float64), torch.zeros(4, 1, dtype=torch.float64), eye(4), eye(4), "uniform")
    out = head(x)
    expected = torch.stack([x[0, :1].mean(0), x[0, :2].mean(0), x[0, :3].mean(0)])
    assert torch.allclose(out[0], expected)


def test_softmax_head_is_causal_and_sharp_with_large_scores():
    d = 2
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]], dtype=torch.float64)
    # position 2 queries "first coordinate" strongly: it must attend to position 0 only
    w_q = torch.tensor([[0.0], [50.0]], dtype=torch.float64)
    w_k = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    pattern = AttentionHead(w_q, w_k, eye(d), eye(d)).pattern(x)
    assert torch.allclose(pattern[0, 0], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    assert pattern[0, 2, 0] > 0.999
    assert torch.all(pattern.triu(1) == 0)


def test_layer_residual_mlp_and_logits():
    d = 3
    embed = eye(d)
    mlp = MLP([2 * eye(d), eye(d)], [torch.full((d,), -1.0, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)])
    model = Transformer(embed, [Layer([], mlp)], unembed=eye(d))
    # x = e_i; MLP(x) = relu(2x - 1) = e_i; residual doubles it
    assert torch.allclose(model.residual(torch.tensor([[1]]))[0, 0], torch.tensor([0.0, 2.0, 0.0], dtype=torch.float64))
    assert model.logits(torch.tensor([[0, 2]])).argmax(-1).item() == 2
    assert model.mlp_width == d and model.n_layers == 1 and model.n_heads == 0
    assert model.n_params == 3 * 9 + 2 * 3 + 9


def test_shapes_are_validated():
    with pytest.raises(ValueError, match="W_O"):
        AttentionHead(torch.zeros(4, 1), torch.zeros(4, 1), torch.zeros(4, 2), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="scores"):
        AttentionHead(torch.zeros(4, 1), torch.zeros(4, 1), torch.zeros(4, 2), torch.zeros(2, 4), "hard")
    with pytest.raises(ValueError, match="bias"):
        MLP([torch.zeros(3, 4)], [torch.zeros(3)])
    with pytest.raises(ValueError, match="unembed"):
        Transformer(torch.zeros(5, 3), [], torch.zeros(4, 7))


def test_to_changes_dtype_not_semantics():
    model = Transformer(eye(3), [Layer([AttentionHead(torch.zeros(3, 1), torch.zeros(3, 1), eye(3), eye(3), "uniform")])], eye(3))
    f32 = model.to("cpu", torch.float32)
    tokens = torch.tensor([[0, 1], [2, 2]])
    assert f32.embed.dtype == torch.float32
    assert torch.equal(f32.logits(tokens).argmax(-1), model.logits(tokens).argmax(-1))


def test_generate_feeds_each_output_back_through_the_map():
    # a 1-layer model whose logits copy the last token's embedding: output a -> input token map[a]
    vocab = 4
    embed = torch.eye(vocab, dtype=torch.float64)
    model = Transformer(embed, [], torch.roll(torch.eye(vocab, dtype=torch.float64), 1, dims=1))  # predicts id + 1
    out, logits = model.generate(torch.tensor([[0], [2]]), steps=3)
    assert out.tolist() == [[1, 2, 3], [3, 0, 1]] and logits.shape == (2, 3, vocab)
    out, _ = model.generate(torch.tensor([[0]]), steps=2, output_to_input=torch.tensor([0, 0, 0, 0]))
    assert out.tolist() == [[1, 1]]
    with pytest.raises(ValueError, match="steps"):
        model.generate(torch.tensor([[0]]), steps=0)


def test_unmasked_head_sees_later_positions_and_readout_position_picks_the_decoded_state():
    d = 2
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]], dtype=torch.float64)
    # position 0 queries "second coordinate": only an unmasked head can reach positions 1 and 2
    w_q = torch.tensor([[50.0], [0.0]], dtype=torch.float64)
    w_k = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    unmasked = AttentionHead(w_q, w_k, eye(d), eye(d), causal=False).pattern(x)
    assert unmasked[0, 0, 0] < 1e-20 and torch.allclose(unmasked[0, 0, 1:], torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert AttentionHead(w_q, w_k, eye(d), eye(d)).pattern(x)[0, 0, 0] == 1.0
    uniform = AttentionHead(torch.zeros(d, 1, dtype=torch.float64), torch.zeros(d, 1, dtype=torch.float64), eye(d), eye(d),
                            "uniform", causal=False).pattern(x)
    assert torch.allclose(uniform, torch.full((1, 3, 3), 1 / 3, dtype=torch.float64))

    model = Transformer(eye(3), [], unembed=eye(3), readout_position=0)
    tokens = torch.tensor([[2, 0, 1]])
    assert model.logits(tokens).argmax(-1).item() == 2
    assert model.to("cpu").readout_position == 0
    with pytest.raises(ValueError, match="readout_position"):
        model.generate(tokens, 1)


def test_run_with_cache_names_every_state_and_adds_up_to_the_logits():
    torch.manual_seed(0)
    d, vocab = 6, 5
    heads = [AttentionHead(torch.randn(d, d), torch.randn(d, d), torch.randn(d, d), torch.randn(d, d)) for _ in range(2)]
    mlp = MLP([torch.randn(d, 4), torch.randn(4, d)], [torch.randn(4), torch.randn(d)])
    model = Transformer(torch.randn(vocab, d), [Layer(heads, mlp), Layer([], mlp)], torch.randn(d, 3),
                        pos_embed=torch.randn(4, d))
    tokens = torch.tensor([[0, 3, 1], [4, 4, 2]])
    logits, cache = model.run_with_cache(tokens)
    assert torch.equal(logits, model.logits(tokens))
    assert set(cache) == {"embed", "blocks.0.attn.pattern.0", "blocks.0.attn.pattern.1", "blocks.0.attn_out",
                          "blocks.0.resid_mid", "blocks.0.mlp_out", "blocks.0.resid_post",
                          "blocks.1.resid_mid", "blocks.1.mlp_out", "blocks.1.resid_post"}
    assert cache["blocks.0.attn.pattern.1"].shape == (2, 3, 3)
    # the residual stream is the running sum of what each block writes into it
    assert torch.allclose(cache["blocks.0.resid_mid"], cache["embed"] + cache["blocks.0.attn_out"])
    assert torch.allclose(cache["blocks.1.resid_post"], cache["blocks.0.resid_post"] + cache["blocks.1.mlp_out"])
    assert torch.allclose(cache["blocks.1.resid_post"][:, -1] @ model.unembed, logits)
