import pytest
import torch

from geofact.host import as_device


def test_a_resolved_device_passes_through_and_a_name_is_resolved():
    """Below an entry a torch.device is taken as it is (it was resolved where it entered): no second
    resolution, even of one this machine lacks; a name is resolved, with the clear error."""
    elsewhere = torch.device("cuda:7")
    assert as_device(elsewhere) is elsewhere
    assert as_device("cpu") == torch.device("cpu")
    with pytest.raises((ValueError, RuntimeError), match="device"):
        as_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is absent")
def test_a_name_this_machine_lacks_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        as_device("cuda")
