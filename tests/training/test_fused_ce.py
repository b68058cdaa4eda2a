"""geofact.training.fused_ce: the Triton output layer, checked in Triton's interpreter against autograd in float64,
and on fake `meta` tensors for what the plan counts.

Triton decides whether it interprets when it is first imported, so the kernels run in a child process started
with TRITON_INTERPRET=1 (`_interpreted`); the compiled kernels are checked on a GPU lease
(tests/training/test_cuda.py).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from geofact.training import fused_ce
from geofact.training import step as step_module
from geofact.training.dispatch_count import TrafficCounter

pytestmark = pytest.mark.skipif(not fused_ce.TRITON, reason="Triton is a test dependency (pip install -e '.[test]')")


def _interpreted(body: str) -> dict:
    """Run `body` (which sets `result`, a JSON-able dict) in a child Python whose Triton interprets on the CPU."""
    script = "import json, torch\nfrom torch.nn import functional as F\n" + textwrap.dedent(body) + "\nprint(json.dumps(result))"
    env = {**os.environ, "TRITON_INTERPRET": "1", "GEOFACT_FUSED_CE": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_kernels_are_autograds_cross_entropy_in_float64():
    """Both gradient paths (the softmax unstored, d <= 128 in stacks that fill the device, here forced; stored), N
    split over several programs or not, a run's gradient written into a strided view, without d_E_out, and a
    collapsed run (losses of hundreds of nats)."""
    errors = _interpreted("""
        from geofact.training import fused_ce
        from geofact.training.step import output_loss_and_grads
        torch.manual_seed(0)
        result = {}
        cases = {"unstored": (2, 70, 20, 150, 1.0, 1), "stored, small d": (2, 70, 20, 150, 1.0, 10**9),
                 "stored": (3, 33, 130, 97, 1.0, 1), "one block": (1, 16, 8, 40, 1.0, 1),
                 "collapsed": (2, 40, 24, 90, 60.0, 1), "collapsed, stored": (2, 40, 24, 90, 60.0, 10**9)}
        for name, (M, B, D, N, scale, least) in cases.items():
            fused_ce.UNSTORED_MIN_PROGRAMS = least
            hf = (torch.randn(M, B, D, dtype=torch.float64) * scale).requires_grad_()
            E = torch.randn(M, D, N, dtype=torch.float64).requires_grad_()
            targets = torch.randint(0, N, (M, B))
            reference = F.cross_entropy(torch.bmm(hf, E).flatten(0, 1), targets.flatten(), reduction="none").view(M, B).mean(1)
            g_hf, g_E = torch.autograd.grad(reference.sum(), (hf, E))
            buffer = torch.zeros(M, N + 3, D, dtype=torch.float64)
            out = buffer[:, 1 : N + 1].transpose(1, 2)  # (M, D, N), strided as an optimiser's view can be
            losses, d_hf, d_E = output_loss_and_grads(hf.detach(), E.detach(), targets, N, way="fused kernels", out=out)
            alone, d_hf_alone, none = output_loss_and_grads(hf.detach(), E.detach(), targets, N, way="fused kernels",
                                                            want_E_out=False)
            result[name] = {"splits": fused_ce.splits_for(M, B, N), "unstored": fused_ce.unstored(M, B, D),
                            "loss": (losses - reference).abs().max().item(),
                            "largest loss": reference.max().item(),
                            "d_hf": ((d_hf - g_hf).abs().max() / g_hf.abs().max()).item(),
                            "d_E": ((d_E - g_E).abs().max() / g_E.abs().max()).item(),
                            "into out": d_E.data_ptr() == out.data_ptr() and bool((buffer[:, 0] == 0).all()),
                            "without d_E": none is None and torch.equal(alone, losses) and torch.equal(d_hf_alone, d_hf)}
    """)
    assert errors["unstored"]["splits"] > 1 and errors["stored"]["splits"] > 1 and errors["one block"]["splits"] == 1
    assert [name for name, e in errors.items() if e["unstored"]] == ["unstored", "one block", "collapsed"]
    assert errors["collapsed"]["largest loss"] > 100
    for name, e in errors.items():
        assert e["loss"] < 1e-12 * max(1.0, e["largest loss"]), (name, e)
        assert e["d_hf"] < 1e-12 and e["d_E"] < 1e-12, (name, e)  # relative to the largest entry
        assert e["into out"] and e["without d_E"], (name, e)


def step_error(attention: str, way: str) -> float:
    """The largest difference between geofact.training.step.loss_and_grads computed `way` and autograd through the
    model (losses and every gradient), float64, two runs of N = 80, R = 3, d = 12 drawn from torch's global generator:
    what the kernels' child processes check (here and tests/training/test_fused_norm.py)."""
    from torch.nn import functional as F

    from geofact.training.config import TrainConfig
    from geofact.training.model import forward
    from geofact.training.stack import stack_params
    from geofact.training.step import loss_and_grads

    configs = [TrainConfig(N=80, R=3, d=12, batch_size=24, seed=s, attention=attention) for s in range(2)]
    p = {k: v.requires_grad_() for k, v in stack_params(configs, torch.float64).items()}
    subjects, relations = torch.randint(0, 80, (2, 24)), torch.randint(0, 3, (2, 24))
    targets = torch.randint(0, 80, (2, 24))
    logits = forward(p, torch.stack([subjects, relations + 80], 2))
    reference = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(2, 24).mean(1)
    grads = dict(zip(p, torch.autograd.grad(reference.sum(), list(p.values()))))
    losses, mine = loss_and_grads(p, subjects, relations, targets, way=way)
    return max([(losses - reference).abs().max().item()] + [(mine[k] - grads[k]).abs().max().item() for k in grads])


def test_the_whole_steps_gradients_through_the_kernels_are_autograds():
    """geofact.training.step.loss_and_grads with the fused way, float64, uniform and learned attention."""
    errors = _interpreted("""
        from geofact.training import fused_ce
        from tests.training.test_fused_ce import step_error
        torch.manual_seed(1)
        result = {}
        for attention, least in (("uniform", 1), ("learned", 1), ("uniform, stored", 10**9)):
            fused_ce.UNSTORED_MIN_PROGRAMS = least
            result[f"{attention} {least}"] = step_error(attention.split(",")[0], "fused kernels")
    """)
    assert len(errors) == 3 and all(e < 1e-12 for e in errors.values()), errors


def test_float32_through_the_kernels_is_float64_to_rounding():
    """IEEE float32 products (torch's 'highest', the CPU's only float32) with float32 accumulation."""
    errors = _interpreted("""
        from geofact.training import fused_ce
        from geofact.training.step import output_loss_and_grads
        torch.manual_seed(2)
        hf, E = torch.randn(2, 64, 40, dtype=torch.float64), torch.randn(2, 40, 200, dtype=torch.float64) / 4
        targets = torch.randint(0, 200, (2, 64))
        exact = output_loss_and_grads(hf, E, targets, 200, way="softmax kernel")
        result = {}
        for least in (1, 10**9):  # unstored, stored
            fused_ce.UNSTORED_MIN_PROGRAMS = least
            single = output_loss_and_grads(hf.float(), E.float(), targets, 200, way="fused kernels")
            result.update({f"{name} {least}": ((a.double() - b).abs().max() / b.abs().max()).item()
                           for name, a, b in zip(("loss", "d_hf", "d_E"), single, exact)})
        fused_ce.UNSTORED_MIN_PROGRAMS = 1
        # a target 300 below the best logit (a collapse: its probability underflows float32) and one on top by 12 (a
        # memorised run, loss 7 e^-12 = 4.3e-5), against float64 (tests/training/test_step.py's case for the others)
        E = torch.eye(4, 8)[None].repeat(2, 1, 1)
        hf = torch.tensor([[[300.0, 0.0, 0.0, 0.0]], [[12.0, 0.0, 0.0, 0.0]]])
        targets = torch.tensor([[1], [0]])
        logits = torch.bmm(hf.double(), E.double())
        expected = (torch.logsumexp(logits, -1) - logits.gather(-1, targets[..., None])[..., 0]).mean(1)
        losses, d_hf, d_E = output_loss_and_grads(hf, E, targets, 8, way="fused kernels")
        result["edge"] = (losses.double() - expected).abs().tolist()
        result["edge finite"] = bool(torch.isfinite(d_hf).all() and torch.isfinite(d_E).all())
    """)
    edge, finite = errors.pop("edge"), errors.pop("edge finite")
    assert len(errors) == 6 and all(e < 1e-5 for e in errors.values()), errors
    assert finite and edge[0] < 1e-4 and edge[1] < 3e-6, edge  # 300 nats to float32's rounding; 4.3e-5 to 7%


def test_a_gpu_takes_the_fused_kernels_where_they_store_nothing_on_the_devices_that_take_them(monkeypatch):
    monkeypatch.delenv(fused_ce.ENV, raising=False)
    meta, grid = torch.device("meta"), (42, 1024)  # the capacity grid's column at batch 1024
    assert step_module.default_way(torch.device("cpu"), *grid, 32) == "softmax kernel"  # the CPU's runs, as cached
    assert step_module.FUSED_WAY_DEVICES == ()  # since the H200 lease of 2026-11-30: cuBLAS's matmuls everywhere
    assert step_module.default_way(meta, *grid, 32) == step_module.DEFAULT_WAY
    monkeypatch.setattr(step_module, "FUSED_WAY_DEVICES", ("cuda", "meta"))
    assert step_module.default_way(meta, *grid, 32) == step_module.default_way(meta, *grid, 128) == "fused kernels"
    # where they would store the softmax (d > 128, a stack too small to fill the device, float64), cuBLAS's matmuls
    for shape, dtype in (((*grid, 256), torch.float32), ((*grid, 768), torch.float32), ((1, 1024, 32), torch.float32),
                         ((*grid, 32), torch.float64)):
        assert not fused_ce.unstored(*shape, dtype)
        assert step_module.default_way(meta, *shape, dtype) == step_module.DEFAULT_WAY, shape
    monkeypatch.setenv(fused_ce.ENV, "0")
    assert step_module.default_way(meta, *grid, 32) == step_module.DEFAULT_WAY
    monkeypatch.setenv(fused_ce.ENV, "yes")
    with pytest.raises(ValueError, match="GEOFACT_FUSED_CE must be '0'"):
        step_module.default_way(meta, *grid, 32)


def test_the_kernels_refuse_a_cpu_tensor_outside_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not fused_ce.runs_on(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        fused_ce.loss_and_grads(torch.zeros(1, 4, 8), torch.zeros(1, 8, 16), torch.zeros(1, 4, dtype=torch.long))


@pytest.mark.parametrize("d, M", [(32, 32), (32, 3), (256, 32)])
def test_the_count_takes_each_kernels_own_traffic_and_flops(d, M):
    """On fake `meta` tensors: the kernels' inputs read once and outputs written once, nothing of the logits' size
    at d <= 128 in a stack of enough runs (32 x 4 row blocks: 128 programs) and one write of it otherwise; FLOPs
    2 M B N d a computation of the logits (3 and 2 products unstored; 2, and the two matmuls of the stored softmax)."""
    B, N = 256, 1024
    with FakeTensorMode(allow_non_fake_inputs=True):
        hf, E = torch.empty(M, B, d, device="meta"), torch.empty(M, d, N, device="meta")
        targets = torch.empty(M, B, dtype=torch.long, device="meta")
        with TrafficCounter() as traffic, FlopCounterMode(display=False) as flops:
            losses, d_hf, d_E = step_module.output_loss_and_grads(hf, E, targets, N, way="fused kernels")
    assert losses.shape == (M,) and d_hf.shape == (M, B, d) and d_E.shape == (M, d, N)
    logits = M * B * N * 4
    kernels = {k: v for k, v in traffic.by_op.items() if k.startswith("ce_")}
    inputs = (M * B * d + M * d * N) * 4 + M * B * 8
    assert kernels["ce_partials"] == inputs + 3 * M * B * fused_ce.splits_for(M, B, N) * 4
    assert fused_ce.unstored(M, B, d) == (d <= 128 and M == 32)
    if fused_ce.unstored(M, B, d):
        assert set(kernels) == {"ce_partials", "ce_grad_hf", "ce_grad_unembedding"}
        assert kernels["ce_grad_hf"] == inputs + M * B * 4 + M * B * d * 4
        assert kernels["ce_grad_unembedding"] == inputs + M * B * 4 + M * d * N * 4  # d_E_out written, not read
        assert max(traffic.by_op.values()) < logits / 2  # nothing of the logits' size, read or written
        assert flops.get_total_flops() == 5 * 2 * M * B * N * d
    else:
        assert kernels["ce_grad_logits"] == inputs + M * B * 4 + logits
        assert flops.get_total_flops() == 4 * 2 * M * B * N * d


def test_a_kernel_launches_on_the_device_of_its_tensors(monkeypatch):
    """Triton launches on the current CUDA device: a stack on cuda:1 must make that device current for its launch."""
    entered = []

    class Current:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(self.device)

        def __exit__(self, *exc):
            entered.append("left")

    monkeypatch.setattr(torch.cuda, "device", Current)
    launched = []
    kernel = {(4, 2): lambda *args: launched.append((args, list(entered)))}  # kernel[grid](*args)
    fused_ce._OnDevice(kernel, torch.device("cuda:1"))[(4, 2)](7, 8)
    assert launched == [((7, 8), [torch.device("cuda:1")])] and entered[-1] == "left"
    entered.clear()
    fused_ce._OnDevice(kernel, torch.device("cpu"))[(4, 2)](9)  # the interpreter: no CUDA device to make current
    assert launched[-1] == ((9,), []) and entered == []
