import pytest
import torch

from geofact.device import as_device, describe_device, resolve_device


def test_cpu_resolves():
    assert resolve_device("cpu").type == "cpu" and describe_device("cpu") == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is absent")
def test_missing_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        resolve_device("cuda")


def test_unknown_device_is_rejected():
    with pytest.raises((ValueError, RuntimeError), match="device|Expected one of"):
        resolve_device("tpu")


def test_a_resolved_device_passes_through_and_a_name_is_resolved():
    """Below an entry a torch.device is taken as it is (it was resolved where it entered): no second
    resolution, even of one this machine lacks; a name is resolved, with the clear error."""
    elsewhere = torch.device("cuda:7")
    assert as_device(elsewhere) is elsewhere
    assert as_device("cpu") == torch.device("cpu")
    with pytest.raises((ValueError, RuntimeError), match="device"):
        as_device("tpu")
