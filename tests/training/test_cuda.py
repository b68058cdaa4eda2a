"""The training code on a real CUDA device: skipped where there is none (CI, the project's machines),
run on a GPU lease (`python3 -m pytest tests/training/test_cuda.py`) before any paper-scale work.

The CPU tests prove what a CPU can (fake tensors on `meta`, a stand-in graph backend); these check what
only a GPU shows: the captured CUDA graphs replay to the eager results (to rounding: the embeddings'
gradients are atomics there), the chunked output layer's
recomputing path, and the trainers' results against the same runs on the CPU in float64.
"""

import warnings

import pytest
import torch
from torch.nn import functional as F

from geofact.precision import computing_in
from geofact.training import fused_ce, graphs
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.model import forward
from geofact.training.stack import stack_params
from geofact.training.step import DEFAULT_WAY, entity_chunk, loss_and_grads, output_loss_and_grads
from geofact.training.hop_trainer import train_multihop
from geofact.training.trainer import train_group

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (a GPU lease)")

BASE = dict(N=48, d=12, batch_size=64, max_steps=60, loss_threshold=0.0)


def _runs(**over) -> list[TrainConfig]:
    kw = {**BASE, **over}
    return [TrainConfig(R=2, seed=0, lr=3e-2, **kw),
            TrainConfig(R=3, seed=1, lr=3e-2, frozen_embeddings=True, **kw),
            TrainConfig(R=2, seed=2, lr=1e-2, task_seed=7, **kw)]


def _assert_same_runs(a, b, rtol, atol):
    for x, y in zip(a, b):
        assert x.steps == y.steps
        assert x.final_loss == pytest.approx(y.final_loss, rel=rtol, abs=atol)
        for name, value in x.params.items():
            torch.testing.assert_close(value.cpu(), y.params[name].cpu(), rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("attention,positions", [("uniform", False), ("learned", True)])
def test_stacked_training_on_cuda_is_the_cpus_in_float64(attention, positions):
    configs = _runs(precision="fp32", attention=attention, learned_positions=positions)
    on_gpu = train_group(configs, device="cuda", dtype=torch.float64)
    on_cpu = train_group(configs, device="cpu", dtype=torch.float64)
    _assert_same_runs(on_gpu, on_cpu, rtol=1e-7, atol=1e-9)


def test_d_min_trials_stop_on_cuda_where_they_stop_on_the_cpu_in_float64():
    """The accuracy stop and the hopeless rule (`give_up`) on the device, between a graph's replays: at level 0.4 of
    256 facts one run crosses at a check, one gives up, two train to their budget (tests/training/test_trainer.py)."""
    configs = [TrainConfig(N=64, R=4, d=8, lr=lr, batch_size=64, max_steps=400, seed=s, stop_accuracy=(0.4, 20), give_up=2.0)
               for lr, s in ((3e-2, 0), (1e-2, 1), (3e-3, 2), (1e-5, 3))]
    on_gpu = train_group(configs, device="cuda", dtype=torch.float64)
    on_cpu = train_group(configs, device="cpu", dtype=torch.float64)
    assert [(r.steps, r.gave_up, r.accuracy) for r in on_gpu] == [(r.steps, r.gave_up, r.accuracy) for r in on_cpu]
    assert sorted(r.gave_up for r in on_cpu) == [False, False, False, True]
    _assert_same_runs(on_gpu, on_cpu, rtol=1e-7, atol=1e-9)


def test_graph_replays_are_the_eager_steps(monkeypatch):
    """In float64: the embeddings' gradients are CUDA atomics (index_add_, scatter_add_), whose order of
    addition varies from step to step, so even two eager runs agree only to rounding, not bit for bit."""
    configs = _runs(precision="fp32", max_steps=200, loss_threshold=0.5)  # runs leave the stack: re-captures
    with warnings.catch_warnings():  # a capture that fails goes on eagerly with a warning: here it fails the test
        warnings.filterwarnings("error", message="CUDA graph capture")
        graphed = train_group(configs, device="cuda", dtype=torch.float64)
    monkeypatch.setenv(graphs.ENV, "0")
    eager = train_group(configs, device="cuda", dtype=torch.float64)
    _assert_same_runs(graphed, eager, rtol=1e-7, atol=1e-9)


def test_the_recomputed_chunked_output_layer_is_autograds_on_cuda():
    configs = [TrainConfig(N=24, R=R, d=8, seed=s, batch_size=16) for R in (2, 3) for s in (0, 1)]
    g = torch.Generator().manual_seed(0)
    params = {k: (v + 0.3 * torch.randn(v.shape, generator=g, dtype=v.dtype)).cuda().requires_grad_()
              for k, v in stack_params(configs, torch.float64).items()}
    M, B = len(configs), 16
    tokens = torch.stack([torch.randint(0, 24, (M, B), generator=g), 24 + torch.randint(0, 2, (M, B), generator=g)], 2).cuda()
    targets = torch.randint(0, 24, (M, B), generator=g).cuda()
    reference = F.cross_entropy(forward(params, tokens).flatten(0, 1), targets.flatten(), reduction="none").view(M, B).mean(1)
    expected = dict(zip(params, torch.autograd.grad(reference.sum(), list(params.values()))))
    for width in (None, 5, 1):  # keep=None: the device's own way, recomputing on CUDA (not the fused kernels)
        losses, grads = loss_and_grads(params, tokens[..., 0], tokens[..., 1] - 24, targets, width, way=DEFAULT_WAY)
        torch.testing.assert_close(losses, reference.detach(), rtol=1e-12, atol=1e-12)
        for name, value in expected.items():
            torch.testing.assert_close(grads[name], value, rtol=1e-10, atol=1e-12, msg=f"{name}, width {width}")


def test_a_scaling_shaped_step_trains_under_each_precision():
    """N = 8192 at batch 1024 (exp-scaling's larger N): 8M logits a run, past the CPU's whole-output limit, whole on a
    GPU."""
    assert entity_chunk(1024, 8192, torch.device("cpu")) < 8192 == entity_chunk(1024, 8192, torch.device("cuda"))
    losses = {}
    for precision in ("fp32", "tf32", "bf16"):
        configs = [TrainConfig(N=8192, R=4, d=64, batch_size=1024, max_steps=30, lr=1e-2, loss_threshold=0.0,
                               seed=s, precision=precision) for s in (0, 1)]
        results = train_group(configs, device="cuda", evaluate=False)
        losses[precision] = [r.final_loss for r in results]
        assert all(torch.isfinite(torch.tensor(losses[precision])))
    # 30 steps from the same start: the policies round differently but train the same runs
    for precision in ("tf32", "bf16"):
        assert losses[precision] == pytest.approx(losses["fp32"], rel=0.05), (precision, losses)


@pytest.mark.parametrize("cot", [True, False])
def test_multihop_training_on_cuda_is_the_cpus_in_float64(cot):
    configs = [MultiHopConfig(N=16, R=2, k=2, d=16, cot=cot, batch_size=32, max_steps=40, check_every=20,
                              seed=s, precision="fp32") for s in (0, 1)]
    on_gpu = train_multihop(configs, device="cuda", dtype=torch.float64)
    on_cpu = train_multihop(configs, device="cpu", dtype=torch.float64)
    for x, y in zip(on_gpu, on_cpu):
        assert x.steps == y.steps
        for name, value in x.params.items():
            torch.testing.assert_close(value.cpu(), y.params[name].cpu(), rtol=1e-7, atol=1e-9, msg=name)


@pytest.mark.parametrize("least", [1, 10**9])  # the softmax unstored where d <= 128, or stored
@pytest.mark.parametrize("d", [12, 64, 96, 128, 200])  # 96 and 128: the unstored kernels' largest tiles
def test_the_compiled_fused_output_layer_is_the_torch_ops(d, least, monkeypatch):
    """geofact.training.fused_ce compiled by Triton (tests/training/test_fused_ce.py checks it interpreted, on a CPU):
    float32 against float64 through torch's ops, with IEEE products and with TF32, at both gradient paths (d <= 128
    never stores the softmax) and N split over programs; skipped when GEOFACT_FUSED_CE=0 (tools/lease.sh's fallback)."""
    if not fused_ce.wanted():
        pytest.skip("the fused output layer is off (GEOFACT_FUSED_CE=0) or Triton is missing")
    monkeypatch.setattr(fused_ce, "UNSTORED_MIN_PROGRAMS", least)
    g = torch.Generator().manual_seed(d)
    M, B, N = 3, 1000, 4000
    hf = torch.randn(M, B, d, generator=g, dtype=torch.float64).cuda()
    E = (torch.randn(M, d, N, generator=g, dtype=torch.float64) / d**0.5).cuda()
    targets = torch.randint(0, N, (M, B), generator=g).cuda()
    exact = output_loss_and_grads(hf, E, targets, N, way=DEFAULT_WAY)
    for precision, rtol in (("fp32", 1e-5), ("tf32", 1e-2)):
        with computing_in(precision, hf.device):
            fused = output_loss_and_grads(hf.float(), E.float(), targets, N, way="fused kernels")
        for name, a, b in zip(("loss", "d_hf", "d_E_out"), fused, exact):
            error = ((a.double() - b).abs().max() / b.abs().max()).item()
            assert error < rtol, (precision, name, error)


def test_the_compiled_sampler_keys_are_the_torch_ops_keys_bit_for_bit():
    """geofact.training.fused_sampler compiled by Triton: the same batches as the torch ops (and so as a CPU's);
    skipped when GEOFACT_FUSED_CE=0 (tools/lease.sh's fallback)."""
    from geofact.training.data import FactSampler

    if not fused_ce.wanted():
        pytest.skip("geofact's Triton kernels are off (GEOFACT_FUSED_CE=0) or Triton is missing")
    seeds, n_facts = [0, 7, 123456789, 4], [4096 * 16, 4096 * 2, 4096 * 16, 1500]  # at least a batch each
    torch_ops = FactSampler(seeds, n_facts, 1024, max(n_facts), "cuda", fused=False)
    kernel = FactSampler(seeds, n_facts, 1024, max(n_facts), "cuda", fused=True)
    cpu = FactSampler(seeds, n_facts, 1024, max(n_facts), "cpu")
    for steps in (range(0, 4), range(14990, 15000)):
        assert torch.equal(kernel(steps), torch_ops(steps))
        assert torch.equal(kernel(steps).cpu(), cpu(steps))


def test_the_compiled_adamw_kernel_steps_as_torchs_fused_adamw():
    """geofact.training.fused_adamw compiled by Triton against torch's fused AdamW per run: own learning rates, a
    frozen block, clipping, a skipped run; skipped when GEOFACT_FUSED_CE=0 (tools/lease.sh's fallback)."""
    from geofact.training.optim import FlatStack, StackedAdamW

    if not fused_ce.wanted():
        pytest.skip("geofact's Triton kernels are off (GEOFACT_FUSED_CE=0) or Triton is missing")
    g = torch.Generator().manual_seed(0)
    weights = {"a": torch.randn(3, 150000, generator=g).cuda(), "b": torch.randn(3, 100000, generator=g).cuda()}
    ranges = [[(0, 250000)], [(150000, 250000)], [(0, 250000)]]
    opts = {fused: StackedAdamW(FlatStack({k: v.clone() for k, v in weights.items()}), [1e-2, 3e-3, 1e-3], 0.1, ranges,
                                per_run=True, fused=fused) for fused in (False, True)}
    for step in range(8):
        grad = torch.randn(3, 250000, generator=g).cuda() * torch.tensor([[0.01], [5.0], [0.3]], device="cuda")
        for opt in opts.values():
            opt.grad.copy_(grad)
            if step == 2:
                opt.skip[2] = 1
            opt.clip_and_step(1.0)
    a, b = opts[True].stack.flat, opts[False].stack.flat
    assert ((a - b).abs().max() / b.abs().max()).item() < 1e-5
    assert torch.equal(a[1, :150000], weights["a"][1])


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("shape", [(3, 200, 64), (2, 100, 2, 768), (1, 64, 3072)])
def test_the_compiled_norm_and_gelu_kernels_are_the_torch_ops(shape, dtype, tolerance):
    """geofact.training.fused_norm and fused_gelu compiled by Triton against torch's ops (the forward and backward of
    each run's RMSNorm and gain, GELU's backward and its bias's sum), x strided and, at 4-d, dy expanded as the uniform
    attention's is; skipped when GEOFACT_FUSED_CE=0."""
    from geofact.training import fused_gelu, fused_norm
    from geofact.training.model import RMS_EPS

    if not fused_ce.wanted():
        pytest.skip("geofact's Triton kernels are off (GEOFACT_FUSED_CE=0) or Triton is missing")
    g = torch.Generator().manual_seed(4)
    x = torch.randn(*shape[:-1], 2 * shape[-1], generator=g, dtype=dtype).cuda()[..., ::2].requires_grad_()
    gain = torch.randn(shape[0], shape[-1], generator=g, dtype=dtype).cuda().requires_grad_()
    expected = F.rms_norm(x, (shape[-1],), eps=RMS_EPS) * gain.reshape(shape[0], *[1] * (len(shape) - 2), shape[-1])
    dy = torch.randn(*shape, generator=g, dtype=dtype).cuda()
    if len(shape) == 4:
        dy = dy[:, :, :1].expand(*shape)
    d_x, d_gain = torch.autograd.grad(expected, (x, gain), dy)
    y, r = fused_norm.rms_norm(x.detach(), gain.detach())
    mine_x, mine_gain = fused_norm.backward(dy, x.detach(), r, gain.detach())
    for mine, theirs in ((y, expected), (mine_x, d_x), (mine_gain, d_gain)):
        assert ((mine - theirs).abs().max() / theirs.abs().max()).item() < tolerance
    z1 = torch.randn(shape[0], shape[1], shape[-1], generator=g, dtype=dtype).cuda().requires_grad_()
    d_z = torch.randn(z1.shape, generator=g, dtype=dtype).cuda()
    (expected_z1,) = torch.autograd.grad(F.gelu(z1), (z1,), d_z)
    d_z1, d_b = fused_gelu.gelu_backward(d_z, z1.detach())
    assert ((d_z1 - expected_z1).abs().max() / expected_z1.abs().max()).item() < tolerance
    assert ((d_b - expected_z1.sum(1)).abs().max() / expected_z1.sum(1).abs().max()).item() < 10 * tolerance


def test_the_written_out_bf16_step_is_autocasts_on_cuda():
    """geofact.training.step_bf16 against autograd under CUDA's autocast (its cast lists are not the CPU's): as close
    as two orders of the same bfloat16 ops come, much closer than either is to the float32 step; and a bf16 group
    trained through it against the same group through autograd."""
    from geofact.training import trainer
    from geofact.training.step_bf16 import loss_and_grads_bf16

    configs = [TrainConfig(N=24, R=R, d=8, seed=s, batch_size=16) for R in (2, 3) for s in (0, 1)]
    g = torch.Generator().manual_seed(0)
    params = {k: (v + 0.3 * torch.randn(v.shape, generator=g)).cuda().requires_grad_()
              for k, v in stack_params(configs, torch.float32).items()}
    subjects, relations = torch.randint(0, 24, (4, 16), generator=g).cuda(), torch.randint(0, 2, (4, 16), generator=g).cuda()
    targets = torch.randint(0, 24, (4, 16), generator=g).cuda()
    tokens = torch.stack([subjects, 24 + relations], 2)

    def autograd() -> tuple[torch.Tensor, dict]:
        logits = forward(params, tokens).float()
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(4, 16).mean(1)
        return losses.detach(), dict(zip(params, torch.autograd.grad(losses.sum(), list(params.values()))))

    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        reference, expected = autograd()
    losses, grads = loss_and_grads_bf16(params, subjects, relations, targets)
    with computing_in("fp32", torch.device("cuda")):
        _, fp32 = loss_and_grads(params, subjects, relations, targets)
    torch.testing.assert_close(losses, reference, rtol=1e-3, atol=1e-3)
    for name, value in expected.items():
        apart = float((grads[name] - value).norm() / value.norm())
        # looser than the CPU's 0.1 (tests/training/test_step_bf16.py): here the RMSNorms run through geofact's kernels
        # and the tables' gradients through atomics, whose roundings can flip a bfloat16 rounding downstream
        assert apart < 0.02 and apart < 0.3 * float((fp32[name] - value).norm() / value.norm()), name
    runs = [TrainConfig(**{**BASE, "precision": "bf16", "seed": s, "R": 2}) for s in (0, 1)]
    by_hand = train_group(runs, device="cuda")
    original = trainer.covers_bf16
    trainer.covers_bf16 = lambda *args: False
    try:
        through_autograd = train_group(runs, device="cuda")
    finally:
        trainer.covers_bf16 = original
    for a, b in zip(by_hand, through_autograd):
        assert a.final_loss == pytest.approx(b.final_loss, rel=5e-2, abs=1e-3)  # atomics: runs drift apart by rounding
