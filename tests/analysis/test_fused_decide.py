"""geofact.analysis.fused_decide: the unembedding's five numbers a row without the logits, in Triton's interpreter."""

import pytest
import torch

from geofact.analysis import fused_decide
from tests.training.test_fused_ce import _interpreted


def test_the_kernel_gives_torchs_five_numbers_a_row():
    """Rows that fill some row blocks, N split over several programs or one, a target in every split, a tie at the
    top, and rows with a NaN or an infinite logit (flagged)."""
    got = _interpreted("""
        from geofact.analysis import fused_decide
        torch.manual_seed(0)
        result = {}
        for name, (rows, D, N, splits) in {"split": (70, 20, 150, 3), "one program a row block": (33, 40, 97, 1),
                                           "wide": (16, 130, 64, 1)}.items():
            final = torch.randn(rows, D)
            E = torch.randn(D, N)
            E[:, 5] = E[:, 9]  # columns 5 and 9 tie in every row
            final[0, 0], final[1, 0] = float("nan"), float("inf")
            targets = torch.randint(0, N, (rows,))
            top1 = fused_decide.decide_partials(final, E, targets, splits)[0]
            logits = final @ E
            top, at = logits.topk(2, -1)
            tied = logits[:, 5] >= top[:, 0]
            ok = torch.isfinite(logits).all(-1)
            numbers = fused_decide.summary(final, E, targets)
            result[name] = {
                "largest": float((numbers[0][ok] - top[ok, 0]).abs().max()),
                "second": float((numbers[1][ok] - top[ok, 1]).abs().max()),
                "index": bool((numbers[2][ok & ~tied] == at[ok & ~tied, 0]).all()),
                "tied index": bool(((numbers[2][ok & tied] == 5) | (numbers[2][ok & tied] == 9)).all()),
                "tied second": float((numbers[1][ok & tied] - numbers[0][ok & tied]).abs().max()) if (ok & tied).any() else 0.0,
                "smallest": float((numbers[3][ok] - logits[ok].amin(-1)).abs().max()),
                "target": float((numbers[4][ok] - logits[ok].gather(-1, targets[ok, None])[:, 0]).abs().max()),
                "flagged": numbers[5].tolist() == (~ok).tolist(),
                "splits": list(top1.shape)}
    """)
    for name, r in got.items():
        assert r["largest"] < 1e-4 and r["second"] < 1e-4 and r["smallest"] < 1e-4 and r["target"] < 1e-4, name
        assert r["index"] and r["tied index"] and r["tied second"] < 1e-4 and r["flagged"], name
    assert got["split"]["splits"] == [70, 3]


def test_the_sweep_through_the_kernel_gives_float32s_answer():
    """The rank sweep's rows decided through the kernel (its TF32 tiles; the interpreter's are float32's), the rows
    near a tie made again through torch and rechecked: the float32 sweep's answer."""
    got = _interpreted("""
        from contextlib import nullcontext
        import tempfile
        from geofact.analysis import fused_decide, interventions, rechecked
        from geofact.analysis.readout import linear_readout, split_subjects
        from geofact.analysis.trained import TrainedModel
        from geofact.training.config import TrainConfig
        from geofact.training.sweep import run_sweep
        config = TrainConfig(N=128, R=4, d=16, batch_size=128, max_steps=200, lr=3e-2)
        cache = tempfile.mkdtemp()
        run_sweep([config], cache, progress=False)
        model = TrainedModel.load(cache, config)
        ks = interventions.rank_grid(16, 4)
        exact = interventions.selectivity_sweep(model, ks, seed=1)
        rechecked.FAST_DEVICES, fused_decide.DECIDE_DEVICES = ("cpu",), ("cpu",)
        rechecked.fast_logits = rechecked.emulated_fast_logits
        rechecked.computing_in = lambda precision, device: nullcontext()
        calls = []
        summary = fused_decide.summary
        fused_decide.summary = lambda *args: calls.append(len(args[0])) or summary(*args)
        fast = interventions.selectivity_sweep(model, ks, seed=1)
        result = {"same": fast == exact, "calls": calls, "accuracy": float(model.correct_fraction())}
    """)
    assert got["same"] and len(got["calls"]) >= 1 and 0 < got["accuracy"]


@pytest.mark.parametrize("device, d, wanted", [("cpu", 32, False), ("meta", 32, True), ("meta", 256, False)])
def test_the_kernel_is_used_where_it_is_the_cheaper_side(device, d, wanted):
    assert fused_decide.used(torch.device(device), d) == wanted
