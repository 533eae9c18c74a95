"""DLPack against real JAX (its CPU backend; skipped where JAX is absent): our
consumer reads JAX's buffers in place, and JAX imports our capsules without a
copy and hands them back through our deleter."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tcomp.lang import dtypes
from tcomp.target_cuda import arrays as A
from tcomp.target_cuda import cuda_api
from tcomp.target_cuda import dlpack as D

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def test_jax_buffers_are_read_in_place():
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    assert A._is_jax(x)
    t = D.consume("A", x)
    assert t.ptr == x.unsafe_buffer_pointer() and t.shape == (3, 4)
    assert t.device == (D.kDLCPU, 0) and t.dtype == dtypes.float32
    np.testing.assert_array_equal(A.host_copy("A", t), np.arange(12).reshape(3, 4))
    t.release()
    t = D.consume("B", jnp.ones((2, 3), dtype=jnp.bfloat16))
    assert t.dtype == dtypes.bfloat16
    t.release()


def test_jax_cpu_arrays_are_copied_like_numpy(monkeypatch):
    sent = []
    monkeypatch.setattr(cuda_api, "mem_alloc", lambda n: 8192)
    monkeypatch.setattr(cuda_api, "memcpy_htod", lambda dst, src, n, stream: sent.append(n))
    w = A.wrap_input("A", jnp.ones((4, 5), jnp.float32), dtypes.float32)
    assert (w.kind, w.shape, w.owned, sent) == ("numpy", (4, 5), True, [80])


def test_jax_imports_our_capsules_without_copying():
    # XLA's CPU client takes foreign buffers in place when they are 64-byte aligned
    raw = np.zeros(6 + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    host = raw[start:start + 6]
    host[:] = np.arange(6)
    asked = []

    class Producer:
        def __dlpack_device__(self):
            return (D.kDLCPU, 0)

        def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
            asked.append(stream)
            return D.make_capsule(host.ctypes.data, (2, 3), dtypes.float32, (D.kDLCPU, 0), host,
                                  D.wants_versioned(max_version))

    j = jax.dlpack.from_dlpack(Producer())
    assert asked == [None]
    assert j.unsafe_buffer_pointer() == host.ctypes.data  # zero-copy
    np.testing.assert_array_equal(np.asarray(j), host.reshape(2, 3))
    assert len(D._LIVE) == 1  # JAX holds the tensor ...
    del j
    gc.collect()
    assert not D._LIVE  # ... and handed it back through our deleter
