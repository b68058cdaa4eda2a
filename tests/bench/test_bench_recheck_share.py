"""bench/bench_recheck_share.py: the share of rows the TF32 path rechecks in float32, TF32 emulated."""

from geofact import fast_paths
from geofact.analysis import rechecked
from geofact.analysis.interventions import rank_grid
from geofact.analysis.readout import split_subjects
from geofact.analysis.trained import TrainedModel
from geofact.training.config import TrainConfig
from geofact.training.sweep import run_sweep
from tests.bench import script


def test_the_share_counts_every_row_the_pages_ask_and_every_answer_is_float32s(tmp_path):
    share = script("bench_recheck_share")
    config = TrainConfig(N=128, R=4, d=16, batch_size=128, max_steps=200, lr=3e-2)
    run_sweep([config], tmp_path, progress=False, checkpoints=(100,))
    p = {"rank_points": 4, "held_out": 0.2, "alpha": 1e-3, "split_seed": 0}
    states = [(TrainedModel.load(tmp_path, config, step), p) for step in (100, None)]
    tally = share.Tally()
    rows = share.measure(states, tally)
    edited = len(rank_grid(config.d, 4)) * config.R * config.R * int((~split_subjects(config.N, 0.2, 0)).sum())
    assert tally.rows == {"edits": 2 * edited, "facts": 2 * 3 * config.N * config.R}  # own facts, two smart inits
    assert tally.wrong == 0
    assert [r["step"] for r in rows] == [100, None]
    assert all(0 <= r[kind] <= tally.worst_state[kind] <= 1 for r in rows for kind in share.KINDS)
    assert fast_paths.FAST_DEVICES == ("cuda",) and rechecked.fast_logits is not rechecked.emulated_fast_logits  # put back
    assert rechecked.decided.__name__ == "decided"
