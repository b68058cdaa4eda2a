"""The analyses on a real CUDA device: skipped where there is none (CI, the project's machines), run on a GPU
lease by tools/lease.sh with tests/training/test_cuda.py, before any paper-scale work.

The CPU checks the rank sweep's TF32 path with TF32 emulated (tests/analysis/test_interventions.py); this checks
it where TF32 is real: the sweep through TF32 with its float32 recheck gives the float32 sweep's answer.
"""

import pytest
import torch

from geofact.analysis import interventions
from geofact.analysis.readout import linear_readout, split_subjects
from geofact.analysis.trained import TrainedModel
from geofact.precision import computing_in
from geofact.training.config import TrainConfig
from geofact.training.sweep import run_sweep

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (a GPU lease)")


def test_the_rank_sweep_through_tf32_is_the_float32_sweep_on_cuda(tmp_path):
    config = TrainConfig(N=256, R=4, d=32, batch_size=256, max_steps=400, lr=2e-2)
    run_sweep([config], tmp_path, progress=False)
    model = TrainedModel.load(tmp_path, config, device="cuda")
    ks = interventions.rank_grid(config.d, 8)
    train = split_subjects(config.N, 0.2, 1)
    subjects = torch.nonzero(~train).flatten()
    hidden, vectors = model.hidden_states(), model.attribute_vectors("unembedding")
    maps = [W for W, _ in linear_readout(hidden, model.answers, vectors, train, 1e-3).maps]
    swaps = interventions.random_swaps(model.answers, subjects, 1)
    with computing_in("fp32", model.device):
        exact = interventions.intervene(hidden, model.answers, interventions.by_argmax(model.predict), maps, vectors, subjects, swaps, ks)
    fast = interventions.intervene(hidden, model.answers, model.answered,
                                   maps, vectors, subjects, swaps, ks)
    assert fast == exact
    assert interventions.selectivity_sweep(model, ks, seed=1) == exact


def test_the_fused_decisions_are_torchs_on_cuda():
    """geofact.analysis.fused_decide's five numbers a row, where TF32 is real: as cuBLAS's TF32 logits give them, well
    within the recheck's 1% margin (its tiles rounded to nearest, not truncated by tl.dot), the same largest column
    wherever a row's lead is clear, and every row the decision calls certain answered as float32 answers it
    (bench/bench_decide.py times the two)."""
    from geofact.analysis import fused_decide, rechecked

    g = torch.Generator().manual_seed(0)
    final, E = torch.randn(5000, 64, generator=g).cuda(), (torch.randn(64, 4096, generator=g) / 8).cuda()
    targets = torch.randint(0, 4096, (5000,), generator=g).cuda()
    targets[:2500] = (final[:2500] @ E).argmax(-1)  # half the rows' targets their argmax: both branches of the rule
    with computing_in("tf32", final.device):
        top1, top2, index, low, picked, bad = fused_decide.summary(final, E, targets)
        logits = final @ E
    with computing_in("fp32", final.device):
        exact = (final @ E).argmax(-1) == targets
    top, at = logits.topk(2, -1)
    scale = logits.abs().amax(-1)
    for got, want in [(top1, top[:, 0]), (top2, top[:, 1]), (low, logits.amin(-1)), (picked, logits.gather(-1, targets[:, None])[:, 0])]:
        assert float(((got - want).abs() / scale).max()) < 2e-3
    clear = (top[:, 0] - top[:, 1]) > 0.02 * scale
    assert bool((index[clear] == at[clear, 0]).all()) and not bool(bad.any())
    hit, unsure, _ = rechecked.decision(top1, top2, index, low, picked, targets, bad)
    assert bool((hit[~unsure] == exact[~unsure]).all()) and 0 < int(hit.sum()) < 5000
