"""geofact.training.traffic: a step's ops, bytes and FLOPs counted on fake meta tensors."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn import functional as F

from geofact.training.config import TrainConfig
from geofact.training.step import unembed_cross_entropy
from geofact.training.dispatch_count import TrafficCounter, count_step
from geofact.training import fused_ce
from geofact.training import step as step_module
from geofact.training.traffic import StepTraffic, grid_column, step_traffic


def test_the_counter_counts_inputs_and_outputs_of_kernels_and_not_views():
    a, b = torch.ones(8, 4), torch.ones(4, 2)
    with TrafficCounter() as counter:
        c = a @ b  # reads 32 + 8 floats, writes 16
        c.t()  # a view: no kernel, no traffic
        c.add_(1.0)  # reads and writes c
    assert counter.ops == 2
    assert counter.bytes == 4 * (32 + 8 + 16) + 4 * (16 + 16)


def test_indexed_written_and_shaped_ops_count_what_they_touch():
    big, index, src, whole = torch.zeros(100, 8), torch.zeros(2, 8, dtype=torch.long), torch.ones(2, 8), torch.ones(100, 8)
    with TrafficCounter() as counter:
        big.gather(0, index)  # reads 16 of big's floats and the index, writes 16
    assert counter.bytes == 4 * 16 + 8 * 16 + 4 * 16
    with TrafficCounter() as counter:
        big.scatter_add_(0, index, src)  # reads and writes 16 of big's floats
    assert counter.bytes == 4 * 16 + 8 * 16 + 4 * 16 + 4 * 16
    with TrafficCounter() as counter:
        big.copy_(whole)  # reads the source, writes big
        torch.zeros_like(big)  # writes its output only
    assert counter.bytes == 3 * 4 * 800  # the copy's read and write, the new tensor's write


def test_repeats_allocations_and_metadata_move_nothing():
    """An expanded tensor's repeats (stride 0) are the same memory; an allocation and a fake tensor's metadata query
    launch no kernel."""
    row, whole = torch.ones(1, 8), torch.ones(100, 8)
    with TrafficCounter() as counter:
        whole.add(row.expand(100, 8))  # reads 800 + 8 floats, writes 800
        torch.empty(100, 8)
        torch.empty_like(whole)
    assert counter.ops == 1 and counter.bytes == 4 * (800 + 8 + 800)
    with TrafficCounter() as counter:
        whole.t().reshape(-1)  # a copy (clone), then a view of it (_unsafe_view)
    assert counter.ops == 1 and counter.bytes == 4 * (800 + 800)
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(4, 3, device="meta")
        with TrafficCounter() as counter:
            torch.ops.prim.device(x)
    assert counter.ops == 0 and counter.bytes == 0


def test_torchs_fused_rms_norm_counts_as_the_one_kernel_a_gpu_runs():
    """On meta tensors torch runs its composite definition (five kernels' worth); counted as CUDA's one kernel: x read,
    the normalised x and 1 / rms written. Through `count_step`, as every step is counted."""
    def train(steps: int) -> None:
        x = torch.empty(6, 10, 16, device="meta")
        for _ in range(steps):
            torch.ops.aten._fused_rms_norm(x, [16], None, 1e-6)

    counted = count_step(train, 1)
    assert counted["ops"] == 1 and counted["bytes"] == 4 * (960 + 960 + 60)


def test_a_step_counts_what_its_shapes_say(monkeypatch):
    small = [TrainConfig(N=64, R=2, d=8, batch_size=32, max_steps=10, seed=s) for s in range(2)]
    wide = [TrainConfig(**{**c.as_dict(), "N": 256}) for c in small]
    with monkeypatch.context() as asked:  # the output layer through geofact's kernels, asked for (step.default_way)
        asked.setitem(step_module.WHOLE_WAY, "meta", "fused kernels")
        fused = step_traffic(wide)
    monkeypatch.setenv("GEOFACT_FUSED_CE", "0")  # the output layer in torch's ops: its logits are written and read
    one, four = step_traffic(small), step_traffic(wide)
    assert one.ops == four.ops and one.ops > 50  # the same step on bigger tensors
    assert four.bytes > 2 * one.bytes  # the logits and the output layer grow with N
    if fused_ce.TRITON:  # the fused kernels never write the logits: 2 x 32 x 256 floats, 6 passes, a step
        assert four.bytes - fused.bytes > 4 * 2 * 32 * 256 * 4 and fused.ops < four.ops
        # their matmuls and launches counted apart (priced at the card's rates for them): none without the kernels
        assert fused.kernel_flops > 0 == four.kernel_flops and fused.kernel_ops >= 4 > 0 == four.kernel_ops
        assert fused.kernel_flops < fused.flops
    # the matmuls: forward and backward of V/O, the MLP and the output layer, two runs
    d, w, B = 8, 32, 32
    assert one.flops == pytest.approx(2 * 3 * 2 * B * (2 * d * d + 2 * d * w + d * 64), rel=0.35)
    assert len(grid_column(32)) == 42


def test_the_roofline_is_the_slower_of_bytes_and_flops():
    shape = dict(runs=1, N=1, d=1, batch_size=1, ops=1)
    assert StepTraffic(**shape, precision="fp32", bytes=3.35e9, flops=1e9).roofline_ms() == pytest.approx(1.0)
    assert StepTraffic(**shape, precision="bf16", bytes=1e6, flops=990e9).roofline_ms() == pytest.approx(1.0)
    assert StepTraffic(**shape, precision="fp32", bytes=0.0, flops=0.0).as_dict()["roofline_h100_ms"] == 0.0


def test_the_multi_hop_unembedding_moves_fewer_bytes_than_autograd_through_its_logits(monkeypatch):
    # the multi-hop step's output layer (geofact.training.step.unembed_cross_entropy) at the paper's
    # Appendix C shapes with CoT at k = 4 (4 targets a query), against autograd through the logits
    M, B, d, N = 18, 4096, 256, 2048
    moved = {}
    ways = ("autograd", "one function", "default", "fused kernels") if fused_ce.TRITON else ("autograd", "one function")
    for way in ways:
        monkeypatch.setenv("GEOFACT_FUSED_CE", "0" if way in ("autograd", "one function") else "1")
        if way == "fused kernels":  # asked for: by default d = 256 goes through cuBLAS (step.default_way)
            monkeypatch.setitem(step_module.WHOLE_WAY, "meta", "fused kernels")
        with FakeTensorMode():
            hf = torch.empty(M, B, d, device="meta", requires_grad=True)
            E_out = torch.empty(M, d, N, device="meta", requires_grad=True)
            targets = torch.zeros(M, B, dtype=torch.long, device="meta")
            with TrafficCounter() as counter:
                if way == "autograd":
                    losses = F.cross_entropy(torch.bmm(hf, E_out).flatten(0, 1), targets.flatten(), reduction="none").view(M, B).mean(1)
                else:
                    losses = unembed_cross_entropy(hf, E_out, targets)
                losses.sum().backward()
        moved[way] = counter.bytes / (M * B * N * 4)  # passes over the float32 logits
    assert moved["autograd"] == pytest.approx(11.6, abs=0.1) and moved["one function"] == pytest.approx(7.3, abs=0.1)
    if fused_ce.TRITON:  # d = 256 stores (softmax - one-hot) / B once, read by the two matmuls: 3 passes, and the
        # kernels' and matmuls' reads of hf and E_out and the backward's scaling of both gradients, 1.1 more
        assert moved["fused kernels"] == pytest.approx(4.1, abs=0.1)
        assert moved["default"] == pytest.approx(moved["one function"])


def test_an_op_that_writes_its_arguments_in_place_and_returns_nothing_counts_them_written():
    params, grads, m, v = ([torch.ones(100)] for _ in range(4))
    steps = [torch.zeros(())]
    with TrafficCounter() as counter:
        torch._fused_adamw_(params, grads, m, v, [], steps, lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0,
                            eps=1e-8, amsgrad=False, maximize=False)
    # reads the weights, gradients, moments and step count; writes the weights and the moments
    assert counter.bytes == 4 * 400 + 4 + 4 * 300
    with TrafficCounter() as counter:
        torch._fused_adamw_(params, grads, m, v, [], steps, lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0,
                            eps=1e-8, amsgrad=False, maximize=False, grad_scale=torch.ones(()), found_inf=torch.zeros(()))
    # and the gradients it unscales (with the scale and the flag it reads)
    assert counter.by_op["_fused_adamw_"] == 4 * 400 + 4 + 4 + 4 + 4 * 400
    table, rows = torch.ones(1000, 8), torch.zeros(16, dtype=torch.long)
    with TrafficCounter() as counter:
        table[rows]  # a gather: the 16 rows it reads, the index, the 16 rows it writes
    assert counter.bytes == 4 * 16 * 8 + 8 * 16 + 4 * 16 * 8


@pytest.mark.parametrize("cot", [True, False])
def test_the_multi_hop_step_by_hand_moves_fewer_bytes_than_autograd(cot, monkeypatch):
    # geofact.training.hop_step against autograd through the same model (causal_hidden, the MLP block, the output
    # layer as one function), at Appendix C's shapes at k = 4 (6 of the grid's 30 runs: bytes scale with the runs),
    # the output layer the same way in both (torch's ops); the counted RMSNorm forward is decomposed in both
    from geofact.training.config import MultiHopConfig
    from geofact.training.hop_step import hop_loss_and_grads
    from geofact.training.model import causal_hidden, final_state, init_params

    monkeypatch.setenv("GEOFACT_FUSED_CE", "0")
    c = MultiHopConfig(N=2048, R=16, k=4, d=256, cot=cot, batch_size=1024)
    M, L, T = 6, c.seq_len, c.n_targets
    moved = {}
    for way in ("autograd", "by hand"):
        with FakeTensorMode():
            p = {n: torch.empty(M, *v.shape, device="meta", requires_grad=way == "autograd")
                 for n, v in init_params(c).items()}
            tokens = torch.zeros(M, c.batch_size, L, dtype=torch.long, device="meta")
            targets = torch.zeros(M, c.batch_size, T, dtype=torch.long, device="meta")
            with TrafficCounter() as counter:
                if way == "autograd":
                    states = final_state(p, causal_hidden(p, tokens, T).flatten(1, 2))
                    losses = unembed_cross_entropy(states, p["E_out"], targets.flatten(1, 2))
                    torch.autograd.grad(losses.sum(), list(p.values()))
                else:
                    hop_loss_and_grads(p, tokens, targets, c.k)
        moved[way] = counter.bytes
    # 8.45 -> 6.50 GB with CoT (0.77), 3.37 -> 2.36 without (0.70; counted so from the ninth session (2026-11-29), when a reshape's
    # `_unsafe_view` stopped counting as a copy: 8.75 and 3.49 before); at 30 runs with the trainer around it (the
    # sampler, AdamW, geofact's kernels): 42.8 -> 25.1 GB with CoT and 20.0 -> 10.3 without
    assert moved["by hand"] < (0.8 if cot else 0.72) * moved["autograd"], moved
