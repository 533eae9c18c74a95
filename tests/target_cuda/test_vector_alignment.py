"""8/16-byte vector accesses only where every address is aligned.

The CUDA codegen turns a vectorized loop into `float4`/`float2` accesses when
an index is `base + v` with `base` a multiple of the vector width (in
elements), i.e. for every value of the other loop variables and for every
row (codegen.py `contiguous`). A misaligned vector access is undefined
behaviour on a GPU (a misaligned-address fault, or wrong data), so these
tests pin both sides: odd row strides and odd offsets get scalar accesses, and
the aligned cases still get vectors (else the tests above them would pass on a
codegen that never vectorizes). The buffers accessed with vectors are listed
in the sidecar (`aligned_buffers`), and a call whose pointer for one of them is
not 16-byte aligned fails with a CudaError before anything is launched
(mocked driver here; a torch view offset by one float on a GPU).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcomp

from .test_launch_plan import VOID, DeviceArrayLike, Driver

ARCH = "cuda:sm_90a"


def vectorized(op, vec: int):
    s = tcomp.Schedule(op)
    O = s["O"]
    i, j = O.axes
    jo, ji = O.split(j, vec)
    O.vectorize(ji)
    O.bind(i, "threadIdx.x")
    return s


def vector_accesses(src: str):
    """{buffer: vector kind} of every reinterpret_cast access of the kernel body."""
    found = re.findall(r"reinterpret_cast<(?:const )?(float[24])\*>\(&(\w+)\[", src)
    out = {}
    for kind, buf in found:
        out.setdefault(buf, set()).add(kind)
    return out


# O (M x `cols`) reads A (M x W) at column j + shift; O's columns split by `vec`, vectorized.
SHIFT = "def shift(float(M,W) A) -> (O) {{ O(i, j) = A(i, j + {shift}) where j in 0:{cols} }}"


def build(shift: int, cols: int, w, vec: int = 4, m: int = 4):
    op = tcomp.op(SHIFT.format(shift=shift, cols=cols))
    sizes = {"M": m, "W": w} if w is not None else None
    k = tcomp.build(vectorized(op, vec), target=ARCH, sizes=sizes)
    return op, k


# (shift, output columns, A's row length W, vector elements) -> buffers read/written as vectors
CASES = {
    # the probe's case: O(i, j) = A(i, j + 1) on rows of 9: A[i*9 + j_o*4 + j_i + 1]
    "rows_of_9_shift_1": ((1, 8, 9, 4), {"O": {"float4"}}),
    # odd row stride alone: A[i*9 + j_o*4 + j_i] is aligned in row 0 only
    "rows_of_9_shift_0": ((0, 8, 9, 4), {"O": {"float4"}}),
    # odd offset alone, aligned rows of 8: A[i*8 + j_o*4 + j_i + 1]
    "rows_of_8_shift_1": ((1, 4, 8, 4), {"O": {"float4"}}),
    # 2 floats off: misaligned for float4 ...
    "rows_of_8_shift_2": ((2, 4, 8, 4), {"O": {"float4"}}),
    # ... aligned for float2 (8 bytes: the width is the vector's, not always 4)
    "rows_of_8_shift_2_float2": ((2, 4, 8, 2), {"A": {"float2"}, "O": {"float2"}}),
    # aligned on both sides: float4 loads of A and stores of O
    "rows_of_8_shift_4": ((4, 4, 8, 4), {"A": {"float4"}, "O": {"float4"}}),
    "rows_of_12_shift_0": ((0, 8, 12, 4), {"A": {"float4"}, "O": {"float4"}}),
    # a row length known only at run time may be anything: no vector of A
    "symbolic_rows_shift_4": ((4, 4, None, 4), {"O": {"float4"}}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vector_accesses_only_where_aligned(name):
    (shift, cols, w, vec), want = CASES[name]
    op, k = build(shift, cols, w, vec)
    got = vector_accesses(k.source)
    # A store with a misaligned load next to it is written from scalars: a vector
    # store needs every varying load as a vector, so O is vectorized only when A is.
    if "A" not in want:
        want = {}
    assert got == want, k.source
    (kd,) = k.meta["kernels"]
    assert kd["aligned_buffers"] == sorted(want)
    # and the kernel computes the right thing (on the sim: same schedule, same IR)
    a = np.arange(4 * (w or 9), dtype=np.float32).reshape(4, w or 9)
    got = tcomp.build(vectorized(op, vec), target="sim",
                      sizes=None if w is None else {"M": 4, "W": w})(a)
    np.testing.assert_array_equal(got, a[:, shift:shift + cols])


def test_misaligned_float4_of_the_probe_is_not_emitted():
    """The mutation probe's case in words: with rows of 9 no A access is a vector
    cast, so no float4 load can straddle a 16-byte boundary."""
    _, k = build(1, 8, 9)
    assert "reinterpret_cast<const float4*>(&A[" not in k.source
    assert "reinterpret_cast<const float2*>(&A[" not in k.source


def test_emulated_shift_kernels_compute_the_shift():
    """The generated C++ of each case, run on the CPU emulator: right values."""
    from .emulator import HAVE_CXX, run_emulated
    if not HAVE_CXX:
        pytest.skip("no host C++ compiler (g++)")
    for name, ((shift, cols, w, vec), _) in sorted(CASES.items()):
        if w is None:
            continue
        _, k = build(shift, cols, w, vec)
        a = np.arange(4 * w, dtype=np.float32).reshape(4, w)
        np.testing.assert_array_equal(run_emulated(k, a), a[:, shift:shift + cols], err_msg=name)


# ------------------------------------------------------------------ the host check
SCALE = "def scale(float(N) A) -> (O) { O(i) = A(i) * 2.0 }"


def scale_kernel():
    s = tcomp.Schedule(tcomp.op(SCALE))
    O = s["O"]
    (i,) = O.axes
    io, ii = O.split(i, 4)
    O.vectorize(ii)
    O.bind(io, "threadIdx.x")
    return tcomp.build(s, target="cuda", sizes={"N": 64})


def test_vector_kernel_lists_its_aligned_buffers():
    k = scale_kernel()
    assert vector_accesses(k.source) == {"A": {"float4"}, "O": {"float4"}}
    assert k.meta["kernels"][0]["aligned_buffers"] == ["A", "O"]


@pytest.mark.parametrize("offset", [4, 8, 12])
def test_misaligned_input_pointer_is_refused_before_launch(monkeypatch, offset):
    d = Driver(monkeypatch, [VOID, VOID])
    k = scale_kernel()
    with pytest.raises(tcomp.CudaError, match="kernel scale_O accesses 'A' with 16-byte vectors, "
                                              "but its pointer is not 16-byte aligned"):
        k(DeviceArrayLike(64, 0xA000 + offset))
    assert not d.launches


def test_aligned_input_pointer_is_launched(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID])
    k = scale_kernel()
    k(DeviceArrayLike(64, 0xA010))
    (launch,) = d.launches
    assert launch["params"][0] == 0xA010 and launch["params"][1] % 16 == 0


def test_scalar_kernel_takes_any_pointer(monkeypatch):
    """Rows of 9 (no vectors): a pointer 4 bytes into an allocation is fine."""
    d = Driver(monkeypatch, [VOID, VOID])
    _, k = build(1, 8, 9)

    class Rows:
        __cuda_array_interface__ = {"shape": (4, 9), "typestr": "<f4", "data": (0xA004, False),
                                    "version": 3, "strides": None, "stream": None}
    k(Rows())
    (launch,) = d.launches
    assert launch["params"][0] == 0xA004


# ------------------------------------------------------------------ on a GPU
@pytest.mark.cuda
def test_gpu_misaligned_view_is_refused_and_aligned_one_runs():
    torch = pytest.importorskip("torch")
    k = scale_kernel()
    buf = torch.arange(68, dtype=torch.float32, device="cuda")
    with pytest.raises(tcomp.CudaError, match="'A' with 16-byte vectors, but its pointer is not "
                                              "16-byte aligned"):
        k(buf[1:65])
    got = k(buf[4:68])  # 16 bytes in: aligned
    torch.testing.assert_close(got, buf[4:68] * 2.0)


@pytest.mark.cuda
def test_gpu_shift_kernels_on_offset_views():
    """Each shift case on the GPU, its input a view one float into a larger
    buffer where the kernel has no vector of A (any pointer is fine), and a
    fresh aligned tensor otherwise."""
    torch = pytest.importorskip("torch")
    for name, ((shift, cols, w, vec), want) in sorted(CASES.items()):
        w_run = w or 9
        _, k = build(shift, cols, w, vec)
        host = np.arange(4 * w_run, dtype=np.float32).reshape(4, w_run)
        expect = torch.from_numpy(host[:, shift:shift + cols].copy()).cuda()
        if "A" in want:
            a = torch.from_numpy(host).cuda()
        else:
            flat = torch.zeros(4 * w_run + 1, dtype=torch.float32, device="cuda")
            flat[1:] = torch.from_numpy(host.reshape(-1)).cuda()
            a = flat[1:].view(4, w_run)
        got = k(a)
        torch.testing.assert_close(got, expect, rtol=0, atol=0, msg=name)
