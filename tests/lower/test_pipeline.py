"""Software pipelining (double buffering) of shared-memory copies: `pipeline`."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")


def shared_mm(pipeline=True, bk=4):
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 8, 8)
    ko, ki = C.split(k, bk)
    C.reorder(mo, no, ko, mi, ni, ki)
    for ax, tag in ((mo, "blockIdx.y"), (no, "blockIdx.x"), (mi, "threadIdx.y"),
                    (ni, "threadIdx.x")):
        C.bind(ax, tag)
    for t in ("A", "B"):
        S = s.cache_read(t, "shared", [C])
        S.compute_at(C, ko)
        a0, a1 = S.axes
        f = S.fuse(a0, a1)
        fo, fi = S.split(f, 8)
        S.bind(fi, "threadIdx.x")
    if pipeline:
        C.pipeline(ko)
    return s


@pytest.mark.parametrize("shape", [(16, 16, 8), (13, 11, 7), (9, 17, 3), (8, 8, 4)])
def test_double_buffered_matmul_matches(shape):
    m, n, k = shape
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    got = tcomp.build(shared_mm(), target="sim")(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_structure_one_barrier_per_iteration_and_prefetch_registers():
    text = str(tcomp.lower(shared_mm(), sizes={"M": 16, "N": 16, "K": 16}))
    assert "alloc shared float32 A_shared[2, 8, 4]" in text
    assert "alloc local float32 A_shared_prefetch[4]" in text
    loop = text[text.index("for k_o"):]
    assert loop.count("barrier()") == 1
    assert "A_shared[k_o % 2 * 32" in loop or "k_o % 2" in loop
    plain = str(tcomp.lower(shared_mm(False), sizes={"M": 16, "N": 16, "K": 16}))
    assert plain[plain.index("for k_o"):].count("barrier()") == 2


def test_pipeline_replays_from_json():
    s = shared_mm()
    s2 = tcomp.Schedule.from_json(MM, s.to_json())
    assert s2.to_json() == s.to_json()
    assert str(tcomp.lower(s2, sizes={"M": 8, "N": 8, "K": 8})) == \
        str(tcomp.lower(s, sizes={"M": 8, "N": 8, "K": 8}))


def test_pipeline_compiles_for_cuda():
    k = tcomp.build(shared_mm(), target="cuda", sizes={"M": 64, "N": 64, "K": 64})
    assert "A_shared_prefetch" in k.source and k.cubin[:4] == b"\x7fELF"


def test_pipeline_errors():
    s = shared_mm(False)
    C = s["C"]
    ko = C.leaf_axes[2]
    with pytest.raises(tcomp.ScheduleError, match="stages must be an int from 2 to 5"):
        C.pipeline(ko, stages=6)
    with pytest.raises(tcomp.ScheduleError, match="must be a serial loop"):
        C.pipeline(C.leaf_axes[0])
    s = tcomp.Schedule(MM)
    C = s["C"]
    (k,) = C.reduce_axes
    C.pipeline(k)
    with pytest.raises(tcomp.LoweringError, match="no shared-memory copy is computed at that "
                                                  "loop"):
        tcomp.lower(s)
