# pytest configuration of the tinycudann tests: the `gpu` marker (tests on CUDA tensors, skipped
# without a CUDA device or without a GPU backend in this build) and a fixed torch seed per test.
import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device and a tiny-rdna4-nn build with a GPU backend")


def pytest_collection_modifyitems(config, items):
    from tinycudann import _C

    if _C.has_gpu_backend() and torch.cuda.is_available():
        return
    reason = ("no CUDA device visible to torch" if _C.has_gpu_backend()
              else "this tinycudann build has no GPU backend (configure with TNN_CUDA=ON)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)
