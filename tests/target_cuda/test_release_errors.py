"""`arrays.release` after a fault: the first CUDA error is the one raised.

On the H200, a kernel reading an illegal address made every later driver call
fail; the free after it (CUDA_ERROR_INVALID_ADDRESS_SPACE) used to replace the
launch's own error (CUDA_ERROR_ILLEGAL_ADDRESS), so the user and the search's
records saw the wrong cause. No GPU needed: the driver calls are replaced."""
import pytest

from tcomp.errors import CudaError
from tcomp.target_cuda import arrays as A


@pytest.fixture
def faulted(monkeypatch):
    freed = []

    def sync(stream):
        raise CudaError("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")

    def free(ptr):
        freed.append(ptr)
        raise CudaError("cuMemFree failed: CUDA_ERROR_INVALID_ADDRESS_SPACE")

    monkeypatch.setattr(A.cuda_api, "stream_synchronize", sync)
    monkeypatch.setattr(A.cuda_api, "mem_free", free)
    arrays = [A.DeviceArray(ptr, (4,), "float32", "numpy", owned=True) for ptr in (16, 32)]
    return arrays, freed


def test_the_synchronize_error_is_raised_not_the_free_after_it(faulted):
    arrays, freed = faulted
    with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        A.release(arrays)
    assert freed == [16, 32]  # every array is still handed back
    assert not any(a.owned for a in arrays)


def test_quiet_release_raises_nothing_so_the_error_on_its_way_is_kept(faulted):
    arrays, freed = faulted
    A.release(arrays, quiet=True)
    assert freed == [16, 32]


def test_a_failing_free_alone_is_raised(monkeypatch):
    monkeypatch.setattr(A.cuda_api, "stream_synchronize", lambda stream: None)

    def free(ptr):
        raise CudaError("cuMemFree failed: CUDA_ERROR_INVALID_VALUE")

    monkeypatch.setattr(A.cuda_api, "mem_free", free)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        A.release([A.DeviceArray(8, (1,), "float32", "numpy", owned=True)])
