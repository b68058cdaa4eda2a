import pytest

from geofact.training.config import TrainConfig


@pytest.mark.parametrize("kwargs,name", [
    (dict(d=0), "d"), (dict(N=8, R=9), "R"), (dict(N=8, R=2, batch_size=17), "batch_size"),
    (dict(lr=0), "lr"), (dict(attention="sparse"), "attention"), (dict(max_steps=0), "max_steps"),
    (dict(N=1), "N"), (dict(mlp_width=0), "mlp_width"),
])
def test_invalid_configs_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        TrainConfig(**kwargs)


def test_key_is_stable_and_distinguishes_configs():
    assert TrainConfig().key() == TrainConfig().key() != TrainConfig(seed=1).key()
    assert TrainConfig(d=32).width == 128 and TrainConfig(d=32, mlp_width=64).width == 64
