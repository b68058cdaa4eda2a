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


def test_under_tf32_the_kernel_rounds_its_tiles_to_nearest_as_cublas_does():
    """Triton's tl.dot truncates its inputs to TF32 (about twice the error in a logit difference that the recheck's
    margin was measured with); the kernel rounds them to nearest first. The interpreter's tl.dot is float32's, so
    here the kernel's numbers must be those of the inputs rounded to nearest, and differ from float32's."""
    got = _interpreted("""
        from geofact.analysis import fused_decide
        from geofact.analysis.rechecked import tf32_rounded
        torch.manual_seed(1)
        final, E = torch.randn(100, 48), torch.randn(48, 300)
        targets = torch.randint(0, 300, (100,))
        torch.set_float32_matmul_precision("high")  # TF32: fused_ce._precision
        numbers = fused_decide.summary(final, E, targets)
        scale = (final @ E).abs().amax(-1)
        def error(logits):
            top = logits.topk(2, -1).values
            want = [top[:, 0], top[:, 1], logits.amin(-1), logits.gather(-1, targets[:, None])[:, 0]]
            return max(float(((numbers[i] - w).abs() / scale).max()) for i, w in zip((0, 1, 3, 4), want))
        result = {"to nearest": error(tf32_rounded(final) @ tf32_rounded(E)), "float32": error(final @ E)}
    """)
    assert got["to nearest"] < 1e-6 < 1e-4 < got["float32"]


def test_under_tf32_a_nan_of_any_payload_is_flagged():
    """Rounding a NaN's bits could carry its payload into the sign (CUDA's 0x7FFFFFFF would read as -0.0): the kernel
    keeps NaN and infinity as they are, so their rows are flagged, whichever input holds them."""
    got = _interpreted("""
        from geofact.analysis import fused_decide
        torch.manual_seed(2)
        final, E = torch.randn(40, 24), torch.randn(24, 100)
        nan = torch.tensor([0x7FFFFFFF, -1], dtype=torch.int32).view(torch.float32)  # payloads all ones, both signs
        final[3, 5], final[7, 0] = nan[0], nan[1]
        E[2, 17] = nan[0]  # every row reads column 17
        torch.set_float32_matmul_precision("high")
        flags = fused_decide.summary(final, E, torch.zeros(40, dtype=torch.int64))[5]
        E[2, 17] = 1.0
        alone = fused_decide.summary(final, E, torch.zeros(40, dtype=torch.int64))[5]
        result = {"all": bool(flags.all()), "rows": torch.nonzero(alone).flatten().tolist()}
    """)
    assert got["all"] and got["rows"] == [3, 7]


def test_the_sweep_through_the_kernel_gives_float32s_answer():
    """The rank sweep's rows decided through the kernel (its TF32 tiles; the interpreter's are float32's), the rows
    near a tie made again through torch and rechecked: the float32 sweep's answer."""
    got = _interpreted("""
        from contextlib import nullcontext
        import tempfile
        from geofact import fast_paths
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
        fast_paths.FAST_DEVICES, fast_paths.DECIDE_DEVICES = ("cpu",), ("cpu",)
        rechecked.fast_logits = rechecked.emulated_fast_logits
        rechecked.computing_in = lambda precision, device: nullcontext()
        calls = []
        summary = fused_decide.summary
        fused_decide.summary = lambda *args: calls.append(len(args[0])) or summary(*args)
        fast = interventions.selectivity_sweep(model, ks, seed=1)
        before = len(calls)
        accuracy = (float(model.correct_fraction()), len(calls) - before)
        fast_paths.FAST_DEVICES = ()
        result = {"same": fast == exact, "calls": before, "accuracy": accuracy, "float32": float(model.correct_fraction())}
    """)
    assert got["same"] and got["calls"] >= 1
    assert got["accuracy"] == [got["float32"], 1]  # an accuracy through the kernel too, float32's


@pytest.mark.parametrize("device, d, wanted", [("cpu", 32, False), ("meta", 32, True), ("meta", 256, False)])
def test_the_kernel_is_used_where_it_is_the_cheaper_side(device, d, wanted):
    assert fused_decide.used(torch.device(device), d) == wanted
