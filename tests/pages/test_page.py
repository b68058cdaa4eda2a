import pytest
import torch

from geofact.pages.page import Page


def test_a_page_resolves_its_device_and_precision_once():
    page = Page("test-page", device="cpu", precision="fp32")
    assert page.device == torch.device("cpu") and page.precision == "fp32"
    assert Page("test-page").device is None  # a page that computes on no device resolves none


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is absent")
def test_a_page_fails_at_its_first_cell_on_a_device_this_machine_lacks():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        Page("test-page", device="cuda")


def test_a_page_refuses_a_precision_its_device_cannot_run():
    with pytest.raises(ValueError, match="precision='tf32' needs a CUDA device"):
        Page("test-page", device="cpu", precision="tf32")
    with pytest.raises(ValueError, match="precision must be one of"):
        Page("test-page", device="cpu", precision="fp8")
