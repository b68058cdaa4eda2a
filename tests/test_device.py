import pytest
import torch

from geofact.device import describe_device, resolve_device


def test_cpu_resolves():
    assert resolve_device("cpu").type == "cpu" and describe_device("cpu") == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is absent")
def test_missing_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        resolve_device("cuda")


def test_unknown_device_is_rejected():
    with pytest.raises((ValueError, RuntimeError), match="device|Expected one of"):
        resolve_device("tpu")
