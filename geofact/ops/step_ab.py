"""The stacked step with each of its output layers, timed in one process (issue 47, item 6).

geofact.training.step computes the output layer one of five ways (`WAYS`): off the CPU from the evening of 2026-11-29
to the H200 lease of 2026-11-30 by its fused kernels (geofact.training.fused_ce: the logits never written), which
that lease found slower than cuBLAS (`step.FUSED_WAY_DEVICES`); since, and without Triton from 2026-11-29,
through torch's softmax kernel and one maximum (6 passes over them), before that through its log-softmax
kernel (7 passes), on the CPU through its softmax kernel and two maxima (7 passes), and the written-out
softmax (17 passes; what every GPU lease ran before 2026-11-27 and every CPU run before 2026-11-29). Its optimiser steps the stack's runs together, or each with its own call (`OPTIMISERS`;
geofact.training.optim.PER_RUN_DEVICES: five fewer passes over the weights for one launch more a run; a GPU's
way from a million weights a run, never measured on one before 2026-11-29). Fewer bytes need not mean faster on
every card; nor need geofact's kernels for each run's RMSNorm and GELU's backward (geofact.training.fused_norm,
fused_gelu, from the ninth session of 2026-11-29) beat torch's ops, which they replace (`norms`), nor the batch
sampler's (geofact.training.fused_sampler, `sampling`). So the next GPU lease times them all, at the paper's shapes, before it spends
its minutes on scale (bench/bench_output_layer.py): a way that loses on the GPU is not the GPU's.
"""

from __future__ import annotations

import gc
import os
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Iterator

import torch

from geofact.host import as_device
from geofact.training import data, fused_ce, fused_gelu, fused_norm, optim
from geofact.training import step as step_module
from geofact.training import trainer as trainer_module
from geofact.training.config import TrainConfig
from geofact.training.data import FactSampler
from geofact.training.stack import start_group
from geofact.training.trainer import FactGroup, train_block
from geofact.training.step import WAYS
from geofact.training.traffic import paper_shape

WARM_STEPS = 5  # steps of a stack before it is timed: its graph captured, its allocator grown
# one torch fused AdamW call per learning rate, or per run; or every run in one launch of geofact's kernel
OPTIMISERS = ("together", "per run", "fused kernel")
# a bf16 stack's step: written out (geofact.training.step_bf16, from 2026-11-30) or autograd under autocast (before)
BF16_WAYS = ("written out", "autograd")
DEFAULT_SOFTMAX = "softmax kernel, one max"  # step.DEFAULT_WAY when the rows below were written: what the fused way must beat


@contextmanager
def output_layer(way: str, device: torch.device) -> Iterator[None]:
    """Steps made inside compute whole logits `way` on `device` (one of WAYS)."""
    if way not in WAYS:
        raise ValueError(f"way must be one of {WAYS}, got {way!r}")
    before = dict(step_module.WHOLE_WAY)
    step_module.WHOLE_WAY[device.type] = way
    try:
        yield
    finally:
        step_module.WHOLE_WAY.clear()
        step_module.WHOLE_WAY.update(before)


@contextmanager
def bf16_step(how: str) -> Iterator[None]:
    """bf16 stacks made inside step `how` (one of BF16_WAYS): through geofact.training.step_bf16 where it covers
    them, or through autograd under autocast."""
    if how not in BF16_WAYS:
        raise ValueError(f"how must be one of {BF16_WAYS}, got {how!r}")
    before = trainer_module.covers_bf16
    if how == "autograd":
        trainer_module.covers_bf16 = lambda *args: False
    try:
        yield
    finally:
        trainer_module.covers_bf16 = before


@contextmanager
def stepping(how: str, device: torch.device) -> Iterator[None]:
    """Stacks made inside step their runs `how` (one of OPTIMISERS) on `device`, whatever their size."""
    if how not in OPTIMISERS:
        raise ValueError(f"how must be one of {OPTIMISERS}, got {how!r}")
    before = optim.PER_RUN_DEVICES, optim.PER_RUN_MIN_PARAMS, optim.FUSED_KERNEL_DEVICES
    optim.PER_RUN_DEVICES = (device.type,) if how == "per run" else ()
    optim.PER_RUN_MIN_PARAMS = 0
    optim.FUSED_KERNEL_DEVICES = (device.type,) if how == "fused kernel" else ()
    try:
        yield
    finally:
        optim.PER_RUN_DEVICES, optim.PER_RUN_MIN_PARAMS, optim.FUSED_KERNEL_DEVICES = before


def probe(device: torch.device) -> dict[str, str]:
    """Each of geofact's Triton kernels run once on small tensors of `device`: {kernel: its error} for those that
    raise (none on a device they do not run on). A lease's benchmark calls it first: a kernel that no GPU had
    compiled must not take the benchmark's other rows down with it."""
    if not fused_ce.runs_on(device) or not fused_ce.wanted():
        return {}
    errors = {}
    trials = {
        "output layer": lambda: fused_ce.loss_and_grads(torch.randn(2, 64, 40, device=device),
                                                        torch.randn(2, 40, 300, device=device),
                                                        torch.randint(0, 300, (2, 64), device=device)),
        "output layer, d > 128": lambda: fused_ce.loss_and_grads(torch.randn(2, 64, 200, device=device),
                                                                 torch.randn(2, 200, 300, device=device),
                                                                 torch.randint(0, 300, (2, 64), device=device)),
        "sampler keys": lambda: FactSampler([0, 1], [300, 200], 32, 300, device, padded=True, fused=True)(range(3)),
        "adamw": lambda: _adamw_trial(device),
        "rms norm": lambda: fused_norm.backward(torch.randn(2, 64, 2, 40, device=device), torch.randn(2, 64, 2, 40, device=device),
                                                fused_norm.rms_norm(torch.randn(2, 64, 2, 40, device=device),
                                                                    torch.randn(2, 40, device=device))[1],
                                                torch.randn(2, 40, device=device)),
        "gelu backward": lambda: fused_gelu.gelu_backward(torch.randn(2, 64, 160, device=device),
                                                          torch.randn(2, 64, 160, device=device)),
    }
    for name, trial in trials.items():
        try:
            trial()
        except Exception as error:  # noqa: BLE001 - reported, and the benchmark goes on without the kernels
            errors[name] = f"{type(error).__name__}: {error}"[:1000]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return errors


def _adamw_trial(device: torch.device) -> None:
    opt = optim.StackedAdamW(optim.FlatStack({"w": torch.randn(2, 3000, device=device)}), [1e-3, 1e-2], 0.1,
                             [[(0, 3000)], [(1000, 3000)]], fused=True)
    opt.grad.normal_()
    opt.clip_and_step(1.0)


@contextmanager
def _kernel_devices(module, name: str, kernels: bool) -> Iterator[None]:
    """Inside, with `kernels` False, `module.<name>` (the devices where one of geofact's kernels runs) is empty, so
    the steps made inside take torch's ops; with `kernels` True it is left as it is. Put back on leaving."""
    before = getattr(module, name)
    if not kernels:
        setattr(module, name, ())
    try:
        yield
    finally:
        setattr(module, name, before)


def norms(kernels: bool) -> AbstractContextManager[None]:
    """Steps made inside normalise (and take GELU's backward) through geofact's kernels where they run
    (geofact.training.fused_norm, fused_gelu), or with `kernels` False through torch's ops."""
    return _kernel_devices(fused_norm, "DEVICES", kernels)


def sampling(fused: bool) -> AbstractContextManager[None]:
    """Stacks made inside draw their batches' keys through geofact's kernel where it runs
    (geofact.training.fused_sampler), or with `fused` False through torch's ops: the same batches."""
    return _kernel_devices(data, "FUSED_DEVICES", fused)


def timed_stack(N: int, d: int, runs: int, precision: str) -> list[TrainConfig]:
    """The paper's stack at a shape (geofact.training.traffic.paper_shape) with no stop in reach: what a timing steps."""
    return [TrainConfig(**{**c.as_dict(), "loss_threshold": 0.0}) for c in paper_shape(N, d, runs, precision)]


def block_seconds(configs: list[TrainConfig], steps: int, device: torch.device) -> tuple[float, list[float]]:
    """(seconds a step, each run's last batch loss) of `configs` stacked, over one block of `steps` steps
    (geofact.training.trainer.train_block: the sampler's draws, the step's graph replays, the stop rule, as
    train_group's blocks run them) after a block of WARM_STEPS that captures the graph and grows the allocator,
    wall time between two synchronisations: none of a call's fixed costs (weights drawn on the host, the
    stack built, the capture) is in it."""
    device = start_group(configs, device, "step_ab")  # as train_group readies it (a CPU's threads and denormals)
    group = FactGroup(configs, device, torch.float32, None, None)
    train_block(group, range(WARM_STEPS), set(), None)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    block = train_block(group, range(WARM_STEPS, WARM_STEPS + steps), set(), None)
    losses = block.losses[:, -1].tolist()  # a host read: the block has finished
    seconds = (time.perf_counter() - start) / steps
    del group, block
    # a stack's captured graph is freed with its reference cycles: without a collection the stacks of a row held
    # 44 GB of graph pools at d = 768 and the next ran out of the H200's memory (lease of 2026-11-30)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return seconds, losses


def time_step(configs: list[TrainConfig], device: torch.device, way: str, steps: int, how: str | None = None
              ) -> tuple[float, list[float]]:
    """(seconds a step, each run's last batch loss) of `configs` trained as one stack, `way`, its runs stepped
    `how` (one of OPTIMISERS; None: as the device and the stack's size decide), timed over a block of `steps`
    (`block_seconds`).

    The leases of 2026-11-28 and 2026-11-30 timed whole `train_group` calls, first of 10 steps (100 ms a step at
    d = 32 where the grid's groups ran at 9 ms: the call's fixed costs), then as the difference of a call of
    5 + 20 steps and one of 5: at d = 32 the same step then read 0.42 ms in one row and 2.74 ms in another,
    the fixed costs' jitter over 20 steps. Timed inside one stack, the fixed costs are not in the timing."""
    with output_layer(way, device), (stepping(how, device) if how is not None else nullcontext()):
        return block_seconds(configs, steps, device)


def ways(device: torch.device) -> list[str]:
    """The WAYS a step can take on `device`: all, but the fused kernels only where they run and are wanted
    (geofact.training.fused_ce.runs_on: CUDA with Triton, or a CPU in Triton's interpreter; `wanted`)."""
    return [way for way in WAYS if way != "fused kernels" or fused_ce.runs_on(device) and fused_ce.wanted()]


def rows(device: str | torch.device = "cpu", ds=(32, 768, 128), runs: int = 42, N: int = 4096, steps: int = 20,
         precisions=("tf32", "bf16"), optimisers: bool = True) -> Iterator[dict]:
    """Per (d, precision), as each is timed: ms a step each way (`ms`, by way; under bf16 each of BF16_WAYS), the fastest way, each
    way's ms over the fastest's (`relative`: 1 for the fastest) and the largest difference of the runs'
    last losses between any two ways (rounding only); with `optimisers`, also ms a step of the device's own
    way with the runs stepped each way of OPTIMISERS (`optimiser_ms`) and the faster (`optimiser_fastest`); where
    geofact's kernels run, not under bf16, ms a step of the device's own way with each run's RMSNorm and GELU's
    backward through them and through torch's ops (`norm_ms`), and with the batches' keys drawn through
    geofact's sampler kernel and through torch's ops (`sampler_ms`).
    A short first stack takes the process's one-time costs (the CUDA context, the libraries' handles) out of
    the first row; each timing builds its own stack (time_step). A way that raises is left out of `ms` and its
    error kept (`errors`): only the fused kernels may, which no GPU had compiled before a lease ran them."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    device = as_device(device)
    kernel_errors = probe(device)
    if kernel_errors:  # every step of this process in torch's ops: the rows then time what a lease without them runs
        os.environ[fused_ce.ENV] = "0"
    block_seconds(paper_shape(N, min(ds), 2, precisions[0])[:2], 2, device)
    for d in ds:
        for precision in precisions:
            configs = timed_stack(N, d, runs, precision)
            timed, errors = {}, {}
            for how in BF16_WAYS if precision == "bf16" else ():  # its own output layer: no way to choose
                with bf16_step(how):
                    timed[how] = time_step(configs, device, step_module.DEFAULT_WAY, steps)
            for way in ways(device) if precision != "bf16" else ():
                try:
                    timed[way] = time_step(configs, device, way, steps)
                except Exception as error:  # noqa: BLE001 - new kernels that fail on a card are reported, the rest timed
                    if way != "fused kernels":
                        raise
                    errors[way] = f"{type(error).__name__}: {error}"[:1000]
            ms = {way: 1e3 * seconds for way, (seconds, _) in timed.items()}
            fastest = min(ms, key=ms.get)
            losses = [last for _, last in timed.values()]
            row = {"N": N, "d": d, "runs": runs, "precision": precision, "steps": steps, "ms": ms, "fastest": fastest,
                   "relative": {w: t / ms[fastest] if ms[fastest] > 0 and t > 0 else float("nan") for w, t in ms.items()},
                   "loss_difference": max(abs(a - b) for x in losses for y in losses for a, b in zip(x, y)), "errors": errors,
                   "kernel_errors": kernel_errors}
            own = step_module.default_way(device, len(configs), configs[0].batch_size, d)
            own = step_module.DEFAULT_WAY if own in errors or precision == "bf16" else own
            if precision != "bf16" and fused_ce.runs_on(device) and fused_ce.wanted():  # the kernels' rows: TF32's step
                with norms(False):
                    row["norm_ms"] = {"kernels": ms[own], "torch ops": 1e3 * time_step(configs, device, own, steps)[0]}
                with sampling(False):
                    row["sampler_ms"] = {"kernel": ms[own], "torch ops": 1e3 * time_step(configs, device, own, steps)[0]}
            if optimisers:
                hows = [how for how in OPTIMISERS if how != "fused kernel" or (fused_ce.runs_on(device) and fused_ce.wanted())]
                row["optimiser_ms"] = {how: 1e3 * time_step(configs, device, own, steps, how)[0] for how in hows}
                row["optimiser_fastest"] = min(row["optimiser_ms"], key=row["optimiser_ms"].get)
            yield row


def compare(*args, **kwargs) -> list[dict]:
    """Every row of `rows` (same arguments)."""
    return list(rows(*args, **kwargs))


# Timings within this share of each other are a tie: a default that ties stays as it is, one that is off comes on only
# where it wins by more (a lease's block of 50 steps repeats to a few percent)
TIE = 0.03


def decide(timed: list[dict]) -> dict[str, dict]:
    """What a lease's rows (`rows`, as bench/bench_output_layer.py --json prints them) say of each default the next
    lease decides (book/leases.md, "First"): {switch: {"setting", "on": True, False or None (no row timed it),
    "rows": one line a row}}.
    - the fused output layer (step.FUSED_WAY_DEVICES, off): on where it beats "softmax kernel, one max" by more than
      TIE in every TF32 row at N = 4096 with d <= 128 (where it stores nothing of the logits' size);
    - geofact's norm kernels (fused_norm.DEVICES), sampler kernel (data.FUSED_DEVICES) and AdamW kernel
      (optim.FUSED_KERNEL_DEVICES), on: kept where each is within TIE of torch's ops (the fastest of them, for the
      optimiser) in every row timing it;
    - the written-out bf16 step (trainer.covers_bf16), on: kept where it is within TIE of autograd in every bf16 row."""
    def verdict(setting: str, lines: list[tuple[bool, str]]) -> dict:
        return {"setting": setting, "on": all(ok for ok, _ in lines) if lines else None, "rows": [line for _, line in lines]}

    def shape(r: dict) -> str:
        return f"N={r['N']} d={r['d']} {r['runs']} runs {r['precision']}"

    fused, norms_, sampler, adamw, bf16 = [], [], [], [], []
    for r in timed:
        ms = r["ms"]
        if r["precision"] == "tf32" and r["N"] == 4096 and r["d"] <= 128 and DEFAULT_SOFTMAX in ms:
            if "fused kernels" in ms:
                fused.append((ms["fused kernels"] < (1 - TIE) * ms[DEFAULT_SOFTMAX],
                              f"{shape(r)}: fused {ms['fused kernels']:.2f} ms, one max {ms[DEFAULT_SOFTMAX]:.2f}"))
            else:
                fused.append((False, f"{shape(r)}: the fused kernels failed: {r['errors'].get('fused kernels', 'not run')}"))
        for found, key, mine, theirs in ((norms_, "norm_ms", "kernels", "torch ops"), (sampler, "sampler_ms", "kernel", "torch ops")):
            if key in r:
                t = r[key]
                found.append((t[mine] <= (1 + TIE) * t[theirs], f"{shape(r)}: {mine} {t[mine]:.2f} ms, {theirs} {t[theirs]:.2f}"))
        if "fused kernel" in r.get("optimiser_ms", {}):
            t = r["optimiser_ms"]
            best = min(v for how, v in t.items() if how != "fused kernel")
            adamw.append((t["fused kernel"] <= (1 + TIE) * best, f"{shape(r)}: " + ", ".join(f"{h} {v:.2f} ms" for h, v in t.items())))
        if r["precision"] == "bf16" and set(BF16_WAYS) <= set(ms):
            bf16.append((ms["written out"] <= (1 + TIE) * ms["autograd"],
                         f"{shape(r)}: written out {ms['written out']:.2f} ms, autograd {ms['autograd']:.2f}"))
    return {"fused output layer": verdict("step.FUSED_WAY_DEVICES", fused),
            "norm kernels": verdict("fused_norm.DEVICES", norms_),
            "sampler kernel": verdict("data.FUSED_DEVICES", sampler),
            "AdamW kernel": verdict("optim.FUSED_KERNEL_DEVICES", adamw),
            "written-out bf16 step": verdict("trainer.covers_bf16", bf16)}
