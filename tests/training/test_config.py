import dataclasses

import pytest

from geofact.training.config import MultiHopConfig, TrainConfig


@pytest.mark.parametrize("kwargs,name", [
    (dict(d=0), "d"), (dict(N=8, R=9), "R"), (dict(N=8, R=2, batch_size=17), "batch_size"),
    (dict(lr=0), "lr"), (dict(attention="sparse"), "attention"), (dict(max_steps=0), "max_steps"),
    (dict(N=1), "N"), (dict(mlp_width=0), "mlp_width"), (dict(d=True), "d"), (dict(max_steps=True), "max_steps"),
])
def test_invalid_configs_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        TrainConfig(**kwargs)


def test_key_is_stable_and_distinguishes_configs():
    assert TrainConfig().key() == TrainConfig().key() != TrainConfig(seed=1).key()
    assert TrainConfig(d=32).width == 128 and TrainConfig(d=32, mlp_width=64).width == 64


def test_only_the_stackable_fields_may_differ_within_a_stack():
    import dataclasses

    from geofact.training.config import MultiHopConfig

    for base in (TrainConfig(N=64, R=4, d=16, batch_size=64), MultiHopConfig(N=32, R=2, k=2, d=32, cot=True, batch_size=64)):
        # R (padded), seeds, bijections, frozen or not and the rate vary per run
        same = dataclasses.replace(base, R=base.R + 1, seed=7, task_seed=3, frozen_embeddings=True, lr=base.lr / 10)
        assert same.shape_key() == base.shape_key()
        assert dataclasses.replace(base, mlp_width=4 * base.d).shape_key() == base.shape_key()  # the same width
        for field in ("N", "d", "batch_size", "max_steps", "weight_decay", "loss_threshold"):
            value = getattr(base, field)
            other = dataclasses.replace(base, **{field: value * 2 if isinstance(value, int) else value / 2})
            assert other.shape_key() != base.shape_key(), field


def test_record_schemas_keep_their_names():
    """Cached records are read back under these names (geofact.store.read_record): renaming a module must not
    rename them, or every cached run and probe would be refused."""
    from geofact.nl.relation_probing import SCHEMA as PROBE_SCHEMA

    assert (TrainConfig.schema, MultiHopConfig.schema, PROBE_SCHEMA) == (
        "geofact.training.run/1", "geofact.training.multihop/1", "geofact.nl.probe/1")


def test_a_run_read_past_its_stop_is_another_run_and_stacks_only_with_its_kind():
    import dataclasses

    plain = TrainConfig(N=32, R=2, d=8, batch_size=16)
    past = dataclasses.replace(plain, read_past_stop=True)
    assert "read_past_stop" not in plain.as_dict() and past.as_dict()["read_past_stop"] is True
    assert past.key() != plain.key() and past.shape_key() != plain.shape_key()
    with pytest.raises(ValueError, match="read_past_stop must be True or False"):
        TrainConfig(N=32, R=2, d=8, batch_size=16, read_past_stop=1)


def test_a_run_keeping_a_tail_is_another_run_whose_tail_ends_below_its_stop():
    plain = TrainConfig(N=32, R=2, d=8, batch_size=16, max_steps=1000)
    tailed = dataclasses.replace(plain, keep_tail=[300, 3])  # as a profile's YAML gives it
    assert tailed.keep_tail == (300, 3) and tailed.as_dict()["keep_tail"] == [300, 3] and "keep_tail" not in plain.as_dict()
    assert tailed.key() != plain.key() and tailed.shape_key() != plain.shape_key()
    assert TrainConfig(**tailed.as_dict()) == tailed  # read back from a record
    assert tailed.tail_steps(900) == (0, 300, 600) and tailed.tail_steps(901) == (300, 600, 900)
    assert tailed.tail_steps(1000) == (300, 600, 900) and tailed.tail_steps(250) == (0,)
    assert plain.tail_steps(900) == ()
    for bad in ([300], (0, 3), (300, 2.5), (True, 3)):  # a bool is an int to Python, and refused
        with pytest.raises(ValueError, match="keep_tail must be None or"):
            dataclasses.replace(plain, keep_tail=bad)


def test_a_run_that_may_give_up_is_another_run_and_its_rule_reads_the_best_counts():
    from geofact.training.config import GIVE_UP_MARGIN

    plain = TrainConfig(N=64, R=4, d=8, batch_size=16, max_steps=1000, stop_accuracy=(0.9, 100))  # 231 of 256 facts
    ruled = dataclasses.replace(plain, give_up=2)
    assert ruled.give_up == 2.0 and "give_up" not in plain.as_dict() and ruled.key() != plain.key()
    assert TrainConfig(**ruled.as_dict()) == ruled and ruled.shape_key() != plain.shape_key()
    # the rule's version: the first one's runs keep their keys; a later one would make other runs, and this code
    # refuses to stand for a rule it does not implement
    from geofact.training.config import GIVE_UP_RULE

    assert GIVE_UP_RULE == 1 and "give_up_rule" not in ruled.as_dict()
    with pytest.raises(ValueError, match="give_up_rule must be 1, the rule this code implements"):
        dataclasses.replace(ruled, give_up_rule=2)
    for bad in (0.5, True, float("inf"), "2"):
        with pytest.raises(ValueError, match="give_up must be None or a safety factor"):
            dataclasses.replace(plain, give_up=bad)
    with pytest.raises(ValueError, match="give_up must be None for a run without an accuracy stop"):
        dataclasses.replace(plain, stop_accuracy=None, give_up=2.0)
    # at check 5 of 10 (the middle of the budget, where the rule starts) the best gained 15 over checks 2-5 against 60
    # over checks 1-2: it projects 115 + 2 x 15 / 3 x 5 checks left = 165, and with the margin of 2 sqrt(256) = 32
    # facts, 197 < 231
    assert ruled.give_up_from == 5 and ruled.give_up_scale(5) == pytest.approx(10 / 3) and GIVE_UP_MARGIN * 16 == 32
    assert ruled.gives_up([40, 100, 105, 110, 115]) and not ruled.gives_up([40, 100, 105, 110])  # not in the first half
    assert ruled.gives_up([40, 100, 105, 110], start=4) and not ruled.gives_up([40, 100, 105], start=3)  # 110 + 60 + 32
    assert not ruled.gives_up([40, 100, 105, 110, 280])  # as fast as before: not slowing down
    assert not dataclasses.replace(ruled, give_up=4.0).gives_up([40, 100, 105, 110, 115])  # 115 + 100 + 32 >= 231
    assert not ruled.gives_up([40, 100, 105, 110, 125]) and ruled.gives_up([40, 100, 105, 110, 125], margin=0)  # 208
    assert not ruled.gives_up([20] * 5)  # never moved: it may yet take off
    assert ruled.gives_up([20, 80, 80, 80, 80]) and not plain.gives_up([20, 80, 80, 80, 80])  # a plateau; no rule without give_up


def test_a_run_with_an_accuracy_stop_is_another_run_whose_record_reads_back():
    plain = TrainConfig(N=16, R=2, d=8, batch_size=16)
    decided = dataclasses.replace(plain, stop_accuracy=[0.95, 250])  # as a profile's YAML gives it
    assert decided.stop_accuracy == (0.95, 250) and decided.as_dict()["stop_accuracy"] == [0.95, 250]
    assert "stop_accuracy" not in plain.as_dict() and decided.key() != plain.key()
    assert decided.shape_key() != plain.shape_key()  # one rule per stack
    assert TrainConfig(**decided.as_dict()) == decided
    for bad in ([0.95], (0, 250), (0.95, 0), (True, 250), (0.95, 2.5)):
        with pytest.raises(ValueError, match="stop_accuracy must be None or"):
            dataclasses.replace(plain, stop_accuracy=bad)


# The code of the hopeless rule at each of its versions (GIVE_UP_RULE): sha256 of its functions' syntax trees without
# prose (the host's rule, where it starts, its projection's scale, the level's count, the device's twin and its per-run
# inputs) and its margin, first 16 digits
GIVE_UP_RULE_CODE = {1: "d1547f4f839cd31f"}


def test_a_change_to_the_hopeless_rules_code_comes_with_its_version():
    """A run's cache key holds the rule's version, not its code: a change to which runs the rule stops, made without
    a new GIVE_UP_RULE, would serve records of the old rule as the new one's (it happened twice while the rule was
    written). This fails on any change to the rule's code: bump GIVE_UP_RULE if the change moves a stop, and add the
    new version's hash here; a change that moves none (a rename, a refactor) only updates the hash."""
    import hashlib
    import inspect
    import textwrap

    from geofact.code_hash import code_without_prose
    from geofact.training.config import GIVE_UP_MARGIN, GIVE_UP_RULE, facts_for
    from geofact.training.trainer import FactGroup, StopRuleStep

    digest = hashlib.sha256()
    for function in (TrainConfig.gives_up, TrainConfig.give_up_from.fget, TrainConfig.give_up_scale, facts_for,
                     StopRuleStep.stop_on_accuracy, FactGroup._counts):
        digest.update(code_without_prose(textwrap.dedent(inspect.getsource(function))).encode())
    digest.update(repr(GIVE_UP_MARGIN).encode())
    assert GIVE_UP_RULE_CODE.get(GIVE_UP_RULE) == digest.hexdigest()[:16], (
        f"the hopeless rule's code is {digest.hexdigest()[:16]}, not version {GIVE_UP_RULE}'s: bump GIVE_UP_RULE if "
        "the change moves any stop, and record the hash in GIVE_UP_RULE_CODE")
