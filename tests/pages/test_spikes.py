"""geofact.pages.spikes: the tables name each spiking cell with its headroom and seeds; the figure draws."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

from geofact.pages.spikes import cells_markdown, curves_panel, grid_runs, numbers, sensitivity_markdown  # noqa: E402
from geofact.spikes import SpikeRule  # noqa: E402


def curve(tail):
    down = [[i * 100, 6.0 * (1e-4 / 6.0) ** (i / 39)] for i in range(40)]
    return down + [[4000 + 100 * (i + 1), x] for i, x in enumerate(tail)]


RECORDS = {("learned", 2, 96, 0): {"loss_curve": curve([3.0, 1e-4]), "stopped_early": True, "steps": 9000},
           ("learned", 2, 96, 1): {"loss_curve": curve([1e-4]), "stopped_early": True, "steps": 4500},
           ("frozen", 2, 96, 0): {"loss_curve": curve([1e-4, 50.0]), "stopped_early": False, "steps": 15000}}


def test_grid_runs_key_by_n_and_take_headroom_against_the_given_threshold():
    grid = SimpleNamespace(N=128)
    records, runs, headroom = grid_runs([grid], [RECORDS], [{("learned", 2): 6, ("frozen", 2): None}], SpikeRule())
    assert set(records) == {(128, *k) for k in RECORDS}
    assert headroom[128, "learned", 2, 96] == 16 and headroom[128, "frozen", 2, 96] != headroom[128, "frozen", 2, 96]  # NaN
    assert numbers(runs) == {"memorised": 3, "spiking": 2, "above_1000": 2, "not_back": 1, "met_stop_rule": 1}
    table = cells_markdown(runs, headroom)
    assert "| 128 | learned | 2 | 96 | 16.0 | 1 / 2 | 4100 | 3e+04 | yes | yes |" in table
    assert "| 128 | frozen | 2 | 96 | – | 1 / 1 | 4200 | 5e+05 | no | no |" in table
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    curves_panel(ax, records, runs, SpikeRule(), 1e-4, "test")
    assert len(ax.get_lines()) == 3 + 2  # two spiking runs, one quiet one, the floor and the stop rule
    plt.close(fig)


def test_the_sensitivity_table_holds_the_pages_rule_and_no_spike_says_so():
    table = sensitivity_markdown(list(RECORDS.values()), SpikeRule(5e-4, 20.0))
    assert "| 0.0005 (3 of 3 runs) |" in table and "spike > 20x" in table
    _, runs, headroom = grid_runs([SimpleNamespace(N=128)], [{("learned", 2, 96, 1): RECORDS["learned", 2, 96, 1]}], [{}], SpikeRule())
    assert cells_markdown(runs, headroom) == "No run spiked by this rule."


def test_a_table_of_other_cells_names_its_columns_and_may_leave_headroom_out():
    # exp-multihop's runs: (condition, k, R, seed), no capacity threshold to take headroom against
    from geofact.pages.spikes import run_label
    from geofact.spikes import RunSpikes

    runs = {("CoT, learned", 2, 8, s): RunSpikes.of(r, SpikeRule()) for s, r in enumerate(RECORDS.values())}
    table = cells_markdown(runs, None, ("condition", "k", "R"))
    assert table.splitlines()[0].startswith("| condition | k | R | spiking / memorised seeds |") and "headroom" not in table
    assert "| CoT, learned | 2 | 8 | 2 / 3 | 4100, 4200 |" in table
    assert run_label(("CoT, learned", 2, 8, 1), ("condition", "k", "R")) == "CoT, learned, k=2, R=8, seed 1"
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    curves_panel(ax, {k: r for k, r in zip(runs, RECORDS.values())}, runs, SpikeRule(), None, "test", columns=("condition", "k", "R"))
    assert len(ax.get_lines()) == 3 + 1  # no stop-rule line where the runs have no loss threshold
    plt.close(fig)
