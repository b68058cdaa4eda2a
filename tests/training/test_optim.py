import pytest
import torch

from geofact.training.optim import FlatStack, StackedAdamW, clip_grad_norms_, fused_adamw


def _tensors(M: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(M, 3, 4, generator=g, dtype=torch.float64),
            "b": torch.randn(M, 5, generator=g, dtype=torch.float64)}


def test_views_are_the_buffer_and_keep_drops_runs():
    stack = FlatStack(_tensors(3))
    assert stack.flat.shape == (3, 17)
    assert all(v.is_leaf and v.requires_grad for v in stack.views.values())
    with torch.no_grad():
        stack.flat.add_(1.0)  # an update of the buffer moves the views the model reads
    assert torch.equal(stack.views["b"].detach(), _tensors(3)["b"] + 1.0)
    stack.keep(torch.tensor([0, 2]))
    assert torch.equal(stack.views["a"].detach(), _tensors(3)["a"][[0, 2]] + 1.0)
    assert torch.equal(stack.unflatten(stack.flat)["b"], stack.views["b"].detach())


def test_each_run_is_updated_as_torch_adamw_with_clipping_would_and_masked_entries_never_move():
    M, lrs = 3, [1e-2, 3e-3, 1e-1]
    start = _tensors(M)
    stack = FlatStack(start)
    trains_b = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)  # run 1 keeps "b" frozen
    mask = stack.columns({"a": torch.ones(M, 1, dtype=torch.float64), "b": trains_b[:, None]})
    ranges = [stack.column_ranges(["a", "b"] if trains_b[m] else ["a"]) for m in range(M)]
    opt = StackedAdamW(stack, lrs, 0.1, ranges)
    references = []
    for m in range(M):
        leaves = {k: v[m].clone().requires_grad_() for k, v in start.items()}
        trained = [leaves["a"]] + ([leaves["b"]] if trains_b[m] else [])
        references.append((leaves, trained, torch.optim.AdamW(trained, lr=lrs[m], weight_decay=0.1)))
    for step in range(5):
        target = torch.full((M, 17), float(step), dtype=torch.float64)
        loss = ((torch.cat([v.reshape(M, -1) for v in stack.views.values()], 1) - target) ** 2 * 10).sum()
        grads = torch.autograd.grad(loss, list(stack.views.values()))
        grad = stack.columns(dict(zip(stack.views, grads)), out=opt.grad).mul_(mask)
        clip_grad_norms_(grad, 1.0)  # the loss is steep: clipping is on at every step
        opt.step()
        for m, (leaves, trained, ref) in enumerate(references):
            ref.zero_grad()
            ((torch.cat([leaves["a"].reshape(-1), leaves["b"].reshape(-1)]) - float(step)) ** 2 * 10).sum().backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            ref.step()
    for m, (leaves, _, _) in enumerate(references):
        for k in leaves:
            torch.testing.assert_close(stack.views[k][m].detach(), leaves[k].detach(), rtol=1e-12, atol=1e-12)
    assert torch.equal(stack.views["b"][1].detach(), start["b"][1])  # bit-identical, no weight decay


def test_a_run_left_out_of_the_stack_takes_its_state_with_it():
    stack = FlatStack(_tensors(3))
    opt = StackedAdamW(stack, [1e-2, 2e-2, 3e-2], 0.1, [stack.column_ranges(["a", "b"])] * 3)
    opt.grad.fill_(1.0)
    opt.step()
    moments = opt.m[[0, 2]].clone()
    stack.keep(torch.tensor([0, 2]))
    opt.keep([0, 2], torch.tensor([0, 2]))
    assert opt.lr == [1e-2, 3e-2] and torch.equal(opt.m, moments) and opt.t.tolist() == [1.0, 1.0]
    before = stack.flat.clone()
    opt.grad.fill_(1.0)
    opt.step()  # the kernel's views follow the new buffers
    assert not torch.equal(stack.flat, before) and opt.t.tolist() == [2.0, 2.0]


def test_stacked_adamw_needs_a_rate_and_ranges_per_run():
    stack = FlatStack(_tensors(2))
    with pytest.raises(ValueError, match="one entry per run"):
        StackedAdamW(stack, [1e-2], 0.1, [[(0, 17)]] * 2)


def test_fused_adamw_steps_as_the_plain_adamw():
    start = _tensors(2)
    plain = [torch.nn.Parameter(v.float().clone()) for v in start.values()]
    fused = [torch.nn.Parameter(v.float().clone()) for v in start.values()]
    opts = [torch.optim.AdamW(plain, lr=1e-2, weight_decay=0.1), fused_adamw(fused, lr=1e-2, weight_decay=0.1)]
    assert opts[1].defaults["fused"]  # a CPU has the fused kernel
    for step in range(20):
        g = torch.Generator().manual_seed(step)
        grads = [torch.randn(p.shape, generator=g) for p in plain]
        for params, opt in zip((plain, fused), opts):
            for p, grad in zip(params, grads):
                p.grad = grad.clone()
            opt.step()
    for p, q, initial in zip(plain, fused, start.values()):
        assert (p - initial.float()).abs().max() > 0.05  # 20 steps of lr 1e-2 moved every tensor
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


def test_column_ranges_merge_adjacent_tensors():
    stack = FlatStack({"a": torch.zeros(2, 3), "b": torch.zeros(2, 2), "c": torch.zeros(2, 4)})
    assert stack.column_ranges(["c", "a", "b"]) == [(0, 9)]
    assert stack.column_ranges(["a", "c"]) == [(0, 3), (5, 9)]
    assert stack.column_ranges([]) == []


def test_stepping_each_run_with_its_own_call_folds_the_clipping_in_and_skips_the_runs_told_to():
    start, M, lrs = _tensors(3), 3, [1e-2, 3e-3, 1e-1]
    stacks = [FlatStack(start) for _ in range(2)]
    ranges = [stacks[0].column_ranges(["a", "b"]), stacks[0].column_ranges(["a"]), stacks[0].column_ranges(["a", "b"])]
    together, apart = (StackedAdamW(stack, lrs, 0.1, ranges, per_run=per_run) for stack, per_run in zip(stacks, (False, True)))
    assert len(together.groups) == 3 and len(apart.groups) == 3 and not together.per_run and apart.per_run
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        grad = torch.randn(M, 17, generator=g, dtype=torch.float64) * 10  # clipped at 1 every step
        for opt in (together, apart):
            opt.grad.copy_(grad)
            norms = opt.clip_and_step(1.0)
        torch.testing.assert_close(norms, torch.linalg.vector_norm(grad, dim=1))
    # a division for a product, by a divisor the kernel reads in float32 (its grad_scale): float32's rounding
    torch.testing.assert_close(stacks[1].flat, stacks[0].flat, rtol=1e-6, atol=1e-9)
    apart.skip[1] = 0.0  # unclipped, dividing by 1 is multiplying by 1: bit for bit, from the same state
    stacks[1].flat.copy_(stacks[0].flat)
    apart.m.copy_(together.m), apart.v.copy_(together.v), apart.t.copy_(together.t)
    for opt in (together, apart):
        opt.grad.copy_(torch.randn(M, 17, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
        opt.clip_and_step(1e9)
    assert torch.equal(stacks[1].flat, stacks[0].flat)
    before = [t.clone() for t in (stacks[1].flat, apart.m, apart.v)]
    apart.skip[1] = 1.0
    apart.grad.fill_(1.0)
    apart.clip_and_step(1.0)
    after = (stacks[1].flat, apart.m, apart.v)
    assert all(torch.equal(b[1], a[1]) for b, a in zip(before, after))  # run 1 left as it was, weights and moments
    assert not torch.equal(before[0][0], after[0][0]) and not torch.equal(before[0][2], after[0][2])
