"""The precision policy (geofact.precision): what each policy computes in, where it is refused,
and that fp32 runs keep the cache keys they had before the policy existed."""

import dataclasses

import pytest
import torch

from geofact.pipeline.profiles import Profile
from geofact.store import record_key
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.model import forward, init_params
from geofact.precision import at_least_fp32, check_precision, computing_in, default_precision
from geofact.training.trainer import train_group


def test_fp32_runs_keep_their_key_and_other_policies_get_their_own():
    for config in (TrainConfig(N=32, R=2, d=8, batch_size=16), MultiHopConfig(N=32, R=2, d=8)):
        # the fields added since the first records, at their defaults, stay out of the key
        legacy = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("precision", "read_past_stop", "keep_tail", "stop_accuracy", "give_up", "give_up_rule")}
        assert config.key() == record_key(legacy)
        bf16 = dataclasses.replace(config, precision="bf16")
        assert bf16.as_dict()["precision"] == "bf16" and bf16.key() != config.key()
        assert bf16.shape_key() != config.shape_key()  # runs of two policies never share a stack


def test_bad_policies_are_refused_with_the_allowed_values():
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precision="fp16")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        check_precision("tf32", "cpu")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        train_group([TrainConfig(N=16, R=1, d=4, batch_size=8, max_steps=2, precision="tf32")])
    assert check_precision("tf32", "cuda:1") == "tf32"
    assert default_precision("cuda") == "tf32" and default_precision("cuda:0") == "tf32" and default_precision("cpu") == "fp32"


def test_bf16_autocasts_the_forward_and_the_loss_stays_float32():
    config = TrainConfig(N=16, R=2, d=8, batch_size=8)
    params = {k: v[None] for k, v in init_params(config).items()}
    tokens = torch.tensor([[[0, 16], [3, 17]]])
    before = torch.get_float32_matmul_precision()
    with computing_in("bf16", torch.device("cpu")):
        logits = forward(params, tokens)
    assert logits.dtype == torch.bfloat16 and at_least_fp32(logits).dtype == torch.float32
    assert torch.get_float32_matmul_precision() == before
    with computing_in("fp32", torch.device("cpu")):
        assert forward(params, tokens).dtype == torch.float32
    assert at_least_fp32(torch.zeros(2, dtype=torch.float64)).dtype == torch.float64


def test_a_bf16_group_trains_with_float32_weights_and_losses():
    configs = [TrainConfig(N=16, R=2, d=8, batch_size=16, max_steps=30, seed=s, precision="bf16") for s in (0, 1)]
    results = train_group(configs, log_every=10)
    assert all(r.params["W_1"].dtype == torch.float32 for r in results)
    assert all(isinstance(loss, float) for r in results for _, loss in r.loss_curve)


def test_pages_get_the_policy_asked_for_or_the_devices_default():
    profile = Profile("p", "")
    declared = {"device", "precision"}
    assert profile.parameters_for("page", declared, "cpu")["precision"] == "fp32"
    assert profile.parameters_for("page", declared, "cuda")["precision"] == "tf32"
    assert profile.parameters_for("page", declared, "cuda", "bf16")["precision"] == "bf16"
    assert "precision" not in profile.parameters_for("page", {"device"}, "cuda")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        profile.parameters_for("page", declared, "cpu", "tf32")
