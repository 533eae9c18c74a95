"""The multi-level tiling template (tcomp/schedule/tiling.py): the subscripts
it reads, the directives it writes for bmm_bt, its errors, and the CUDA it
compiles to at the real sizes (NVRTC, no GPU needed): shared memory, 16-byte
global and shared loads, no local memory."""
from __future__ import annotations

import json
import re

import pytest

import tcomp
from tcomp.errors import ScheduleError
from tcomp.schedule import tiling
from tcomp.target_cuda import cuda_api
from tcomp.target_cuda.compile import CompileOptions

BMM_BT = ("def bmm_bt(float(B, M, K) X, float(B, N, K) Y) -> (O) "
          "{ O(b, m, n) +=! X(b, m, k) * Y(b, n, k) }")
HAND = dict(bm=128, bn=128, bk=8, tm=8, tn=8, fragments=True, pipeline=2, vector=True,
            lanes=(4, 8), pad=True)


def stage_def(text, stage):
    return tcomp.Schedule(tcomp.op(text)).states[stage].definition


def test_affine_reads_of_a_window_and_a_transposed_product():
    d = stage_def("def c(float(N, H) I, float(KH) W) -> (O) { O(n, h) +=! I(n, 2 * h + kh - 1) "
                  "* W(kh) }", "O")
    assert tiling.affine_reads(d) == {
        "I": (((("n", 1),), True), ((("h", 2), ("kh", 1)), False)),
        "W": (((("kh", 1),), True),)}
    d = stage_def(BMM_BT, "O")
    r = tiling.affine_reads(d)
    assert r["Y"] == (((("b", 1),), True), ((("n", 1),), True), ((("k", 1),), True))
    ext = tiling.tile_extents(d.spatial, d.reduce, 128, 64, 8)
    assert ext == {"b": 1, "m": 128, "n": 64, "k": 8}
    assert tiling.footprint(r["Y"], ext) == (1, 64, 8)
    assert tiling.footprint(r["Y"], ext, shape=(4, 32, 256)) == (1, 32, 8)
    assert tiling.inner_dim(r["X"], "m", "n") == 1 and tiling.inner_dim(r["Y"], "m", "n") == 1
    assert tiling.padded(128) == 132 and tiling.padded(8) == 36 and tiling.padded(36) == 36


def test_affine_reads_refuses_gathers_and_two_subscripts():
    assert tiling.affine_reads(stage_def(
        "def e(float(V, D) E, int32(B) I) -> (O) { O(b, d) +=! E(I(b), d) * E(b, d) }",
        "O")) is None
    assert tiling.affine_reads(stage_def(
        "def s(float(N, K) A) -> (O) { O(i, j) +=! A(i, k) * A(j, k) }", "O")) is None
    d = stage_def("def q(float(N, K) A) -> (O) { O(i, j) +=! A(i, k) * A(i, k) + A(j, 0) * 0 "
                  "where j in 0:N }", "O")
    assert tiling.affine_reads(d) is None
    d = stage_def("def q(float(N, K) A) -> (O) { O(i, j) +=! A(i, k) * A(i, k) + j "
                  "where j in 0:N }", "O")
    assert set(tiling.affine_reads(d)) == {"A"}  # one tensor read twice at one subscript


def test_bmm_bt_directives():
    op = tcomp.op(BMM_BT)
    s = tcomp.Schedule(op)
    tiling.shared_tiles(s, "O", **HAND)
    directives = json.loads(s.to_json())["directives"]
    kinds = [d["kind"] for d in directives]
    for k in ("CacheWrite", "CacheRead", "StorageOrder", "StorageAlign", "Pipeline",
              "Vectorize", "ComputeAt"):
        assert k in kinds, k
    orders = [d for d in directives if d["kind"] == "StorageOrder"]
    # both tiles are read along k in global memory and along m / n by the threads
    assert [o["axes"] for o in orders] == [["ax0", "ax2", "ax1"], ["ax0", "ax2", "ax1"]]
    binds = {d["tag"] for d in directives if d["kind"] == "Bind"}
    assert binds == {"blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x"}


def test_bmm_bt_compiles_with_shared_tiles_vector_loads_and_no_spills():
    op = tcomp.op(BMM_BT)
    s = tcomp.Schedule(op)
    tiling.shared_tiles(s, "O", **HAND)
    k = tcomp.build(s, target="cuda", sizes={"B": 64, "M": 512, "N": 512, "K": 256})
    assert k.meta["kernels"][0]["grid"] == [4, 4, 64]
    ptx, _, log = cuda_api.nvrtc_compile(k.source, "bmm_bt.cu",
                                         CompileOptions().nvrtc_args() + ["--ptxas-options=-v"])
    assert "ld.global.nc.v4.f32" in ptx  # 16-byte loads of both inputs
    assert "ld.shared.v4.f32" in ptx  # 16-byte fragment loads from the k-major tiles
    assert "st.global.v4.f32" in ptx
    assert ".local" not in ptx
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                  log)
    assert m and m.groups() == ("0", "0", "0"), log
    smem = re.search(r"Used (\d+) registers, .*?(\d+) bytes smem", log)
    assert smem and int(smem.group(2)) == 2 * 2 * 8 * 132 * 4, log
    assert int(smem.group(1)) <= 168, log  # two blocks of 256 threads fit on an SM


@pytest.mark.parametrize("text,kw,message", [
    ("def r(float(N, D) X) -> (S) { S(n) +=! X(n, d) }", {},
     "shared_tiles: stage 'S' needs two or more spatial axes and a reduction, it has spatial (n) "
     "and reduce (d)"),
    ("def s(float(N, K) A) -> (O) { O(i, j) +=! A(i, k) * A(j, k) }", {},
     "shared_tiles: stage 'O' reads a tensor at a subscript that is not affine in its indices "
     "(or one tensor at two subscripts); shared tiles need affine reads"),
    (BMM_BT, {"rk": [4]},
     "shared_tiles: rk needs one factor (or None) per reduce axis after the first (0), got [4]"),
])
def test_errors(text, kw, message):
    op = tcomp.op(text)
    s = tcomp.Schedule(op)
    stage = list(s.states)[-1]
    before = s.to_json()
    with pytest.raises(ScheduleError) as e:
        tiling.shared_tiles(s, stage, 8, 8, 4, 2, 2, **kw)
    assert str(e.value) == message
    assert s.to_json() == before  # refused before any directive
