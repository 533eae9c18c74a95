"""Golden Kernel IR, one small example per scheduling primitive.

tests/lower/golden/<name>.txt holds `str(tcomp.lower(s, sizes=...))` of each
example: the IR after the whole pipeline (storage flattened to row-major
offsets). Each test's docstring gives the loop nest before and after the
primitive. Run `pytest tests/lower --update-golden` to rewrite the files after
an intended change, then REVIEW THE DIFF: loop bounds, tail guards, barriers
between shared writes and reads, and subscripts are what these files pin.

Every example is also run on the sim target against `tcomp.evaluate`, lowered
with the IR verifier after every pass (check=True), and dumped pass by pass.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import tcomp
import dataclasses

from tcomp.lower import pipeline as pipeline_module
from tcomp.lower.pipeline import PASSES
from tcomp.lower.rewriter import Rewriter
from tcomp.lower.pipeline import lower as lower_pipeline

from .util import inputs_for, run_sim

GOLDEN = Path(__file__).parent / "golden"

ADD1 = tcomp.op("def add1(float(M) A) -> (O) { O(i) = A(i) + 1.0 }")
SCALE = tcomp.op("def scale(float(M,N) A) -> (O) { O(i, j) = A(i, j) * 2.0 }")
MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
ROWEXP = tcomp.op("""def rowexp(float(M,N) A) -> (C, B) {
  B(i, j) = exp(A(i, j))
  C(i, j) = B(i, j) + 1.0
}""")
STENCIL = tcomp.op("def sten(float(M) A) -> (C) { C(i) = A(i) + A(i + 1) }")


# --------------------------------------------------------------------- examples
# Each returns (schedule, sizes). Registered by name for the parametrized tests.
EXAMPLES = {}


def example(fn):
    EXAMPLES[fn.__name__[3:]] = fn
    return fn


@example
def ex_split_factor():
    s = tcomp.Schedule(ADD1)
    (i,) = s["O"].axes
    s["O"].split(i, 4)
    return s, {"M": 8}


@example
def ex_split_nparts():
    s = tcomp.Schedule(ADD1)
    (i,) = s["O"].axes
    s["O"].split(i, nparts=2)
    return s, {"M": 8}


@example
def ex_split_nondividing():
    s = tcomp.Schedule(ADD1)
    (i,) = s["O"].axes
    s["O"].split(i, 3)
    return s, {"M": 8}


@example
def ex_split_nparts_nondividing():
    s = tcomp.Schedule(ADD1)
    (i,) = s["O"].axes
    s["O"].split(i, nparts=3)
    return s, {"M": 8}


@example
def ex_tile():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.tile(i, j, 4, 4)
    return s, {"M": 8, "N": 6}


@example
def ex_reorder():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.reorder(j, i)
    return s, {"M": 8, "N": 6}


@example
def ex_reorder_reduction():
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    C.reorder(m, k, n)
    return s, {"M": 4, "N": 3, "K": 5}


@example
def ex_fuse():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.fuse(i, j)
    return s, {"M": 8, "N": 6}


@example
def ex_bind():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(i, "blockIdx.x")
    O.bind(j, "threadIdx.x")
    return s, {"M": 8, "N": 6}


@example
def ex_bind_tail():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    f = O.fuse(i, j)
    fo, fi = O.split(f, 16)
    O.bind(fo, "blockIdx.x")
    O.bind(fi, "threadIdx.x")
    return s, {"M": 7, "N": 5}


@example
def ex_unroll():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    jo, ji = O.split(j, 3)
    O.unroll(ji)
    return s, {"M": 8, "N": 6}


@example
def ex_unroll_tail():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    jo, ji = O.split(j, 4)
    O.unroll(ji)
    return s, {"M": 2, "N": 6}


@example
def ex_vectorize():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    jo, ji = O.split(j, 2)
    O.vectorize(ji)
    return s, {"M": 8, "N": 6}


@example
def ex_compute_at():
    s = tcomp.Schedule(ROWEXP)
    C = s["C"]
    i, j = C.axes
    s["B"].compute_at(C, i)
    return s, {"M": 4, "N": 3}


@example
def ex_compute_inline():
    s = tcomp.Schedule(ROWEXP)
    s["B"].compute_inline()
    return s, {"M": 4, "N": 3}


@example
def ex_compute_root():
    s = tcomp.Schedule(ROWEXP)
    C = s["C"]
    i, j = C.axes
    s["B"].compute_at(C, i)
    s["B"].compute_root()
    return s, {"M": 4, "N": 3}


@example
def ex_cache_read_local_halo():
    s = tcomp.Schedule(STENCIL)
    C = s["C"]
    (i,) = C.axes
    io, ii = C.split(i, 4)
    AL = s.cache_read("A", "local", [C])
    AL.compute_at(C, io)
    return s, {"M": 10}


def _shared_matmul(align=None):
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    ko, ki = C.split(k, 4)
    C.reorder(mo, no, ko, mi, ni, ki)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    for t in ("A", "B"):
        X = s.cache_read(t, "shared", [C])
        X.compute_at(C, ko)
        a0, a1 = X.axes
        if align is not None:
            X.storage_align(a0, *align)
        f = X.fuse(a0, a1)
        fo, fi = X.split(f, 4)
        X.bind(fo, "threadIdx.y")
        X.bind(fi, "threadIdx.x")
    return s


@example
def ex_cache_read_shared():
    return _shared_matmul(), {"M": 8, "N": 8, "K": 8}


@example
def ex_cache_read_shared_tail():
    return _shared_matmul(), {"M": 8, "N": 8, "K": 6}


@example
def ex_cache_write_local():
    s = tcomp.Schedule(MM)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, mi = C.split(m, 2)
    C.bind(mo, "blockIdx.x")
    C.bind(mi, "threadIdx.x")
    CL.compute_at(C, mi)
    return s, {"M": 4, "N": 3, "K": 5}


@example
def ex_storage_align():
    return _shared_matmul(align=(4, 1)), {"M": 8, "N": 8, "K": 8}


def _kmajor_matmul(align=None, order=True):
    """Blocks of 8x4 outputs, one per thread; A's 8x4 (m x k) tile cached in
    shared memory at k_o, stored k-major (storage_order(ax1, ax0)), one element
    per thread (ax0 -> threadIdx.y, ax1 -> threadIdx.x); B read from global."""
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 8, 4)
    ko, ki = C.split(k, 4)
    C.reorder(mo, no, ko, mi, ni, ki)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    AS = s.cache_read("A", "shared", [C])
    AS.compute_at(C, ko)
    a0, a1 = AS.axes
    if order:
        AS.storage_order(a1, a0)
    if align is not None:
        AS.storage_align(a1, *align)
    AS.bind(a0, "threadIdx.y")
    AS.bind(a1, "threadIdx.x")
    return s


@example
def ex_storage_order():
    return _kmajor_matmul(), {"M": 16, "N": 8, "K": 8}


@example
def ex_storage_order_align():
    return _kmajor_matmul(align=(8, 1)), {"M": 16, "N": 8, "K": 8}


def _tc(**kw):
    from ..bench.common import S as bench
    op = tcomp.op("def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                  "{ C(m, n) +=! A(m, k) * B(k, n) }")
    return bench.tc_gemm(op, bm=32, bn=32, wm=16, wn=32, bk=16, **kw)[1]


@example
def ex_tensorize_mma():
    """ldmatrix into fragments, mma_m16n8k16, the accumulator stored by its layout."""
    return _tc(), {"M": 32, "N": 32, "K": 32}


@example
def ex_tensorize_cp_async_ring():
    """The same with a cp.async ring of 3 K tiles and an awkward M (zero-filled tile rows)."""
    return _tc(pipeline=3), {"M": 30, "N": 32, "K": 64}


@example
def ex_tensorize_conv_im2col():
    """conv2d 3x3 pad 1 as a GEMM over an im2col stage gathered into a shared ring
    by cp.async (0 source bytes in the padding and past the last pixel)."""
    from ..bench.common import S as bench
    s = bench.tc_conv2d(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)[1]
    return s, {"N": 1, "H": 5, "W": 6, "C": 8, "K": 32, "R": 72}


# --------------------------------------------------------------------- checking
def _check(name, update_golden):
    s, sizes = EXAMPLES[name]()
    text = str(tcomp.lower(s, sizes=sizes))
    path = GOLDEN / f"{name}.txt"
    if update_golden:
        GOLDEN.mkdir(exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    else:
        assert path.exists(), f"missing golden file {path}; run pytest with --update-golden"
        assert text == path.read_text(), (
            f"lowered IR of '{name}' differs from {path} (rerun with --update-golden if the "
            f"change is intended, and review the diff)")
    # The golden IR must also compute the right thing.
    run_sim(s, inputs_for(s.op, sizes), sizes=sizes)
    return text


def _body(text: str, kernel: str | None = None) -> list[str]:
    """The lines of one kernel (the only one when `kernel` is None), indentation kept."""
    lines = text.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith("kernel ")]
    if kernel is None:
        assert len(starts) == 1, text
        i = starts[0]
    else:
        i = next(i for i in starts if lines[i].startswith(f"kernel {kernel}("))
    end = next((j for j in starts if j > i), len(lines))
    return lines[i:end]


def test_split_factor(update_golden):
    """Before: for i in 0:8: O[i] = A[i] + 1
    After split(i, 4): for i_o in 0:2, for i_i in 0:4: O[i_o*4 + i_i] = ...
    4 divides 8, so there is no tail guard."""
    text = _check("split_factor", update_golden)
    assert "for i_o in 0:2" in text and "for i_i in 0:4" in text and " if " not in text


def test_split_nparts(update_golden):
    """Before: for i in 0:8
    After split(i, nparts=2): for i_o in 0:2 (the 2 parts), for i_i in 0:4 (= 8/2); no guard."""
    text = _check("split_nparts", update_golden)
    assert "for i_o in 0:2" in text and "for i_i in 0:4" in text and " if " not in text


def test_split_nondividing(update_golden):
    """Before: for i in 0:8
    After split(i, 3): for i_o in 0:3 (ceil(8/3)), for i_i in 0:3,
    if i_o*3 + i_i < 8 (the 9th iteration is guarded off)."""
    text = _check("split_nondividing", update_golden)
    assert "for i_o in 0:3" in text and "if i_o * 3 + i_i < 8" in text


def test_split_nparts_nondividing(update_golden):
    """Before: for i in 0:8
    After split(i, nparts=3): for i_o in 0:3, for i_i in 0:3 (ceil(8/3)),
    if i_o*3 + i_i < 8."""
    text = _check("split_nparts_nondividing", update_golden)
    assert "for i_o in 0:3" in text and "if i_o * 3 + i_i < 8" in text


def test_tile(update_golden):
    """Before: for i in 0:8, for j in 0:6
    After tile(i, j, 4, 4): for i_o in 0:2, j_o in 0:2, i_i in 0:4, j_i in 0:4,
    guarded by j_o*4 + j_i < 6 only (4 divides 8 but not 6)."""
    text = _check("tile", update_golden)
    order = [re.search(r"for (\w+) in", l).group(1) for l in text.splitlines() if "for " in l]
    assert order == ["i_o", "j_o", "i_i", "j_i"]
    assert "if j_o * 4 + j_i < 6" in text and "i_i < 8" not in text


def test_reorder(update_golden):
    """Before: for i in 0:8, for j in 0:6
    After reorder(j, i): for j in 0:6, for i in 0:8 (column-major traversal)."""
    text = _check("reorder", update_golden)
    assert text.index("for j in 0:6") < text.index("for i in 0:8")


def test_reorder_reduction(update_golden):
    """Before: for m, n: acc = 0; for k: acc += A[m,k]*B[k,n]; C[m,n] = acc
    After reorder(m, k, n): for m: (for n: C[m,n] = 0); for k: for n: C[m,n] += A[m,k]*B[k,n]
    (the reduction loop is no longer innermost, so it accumulates in C itself)."""
    text = _check("reorder_reduction", update_golden)
    assert "_acc" not in text
    assert text.index("C[m * 3 + n] = 0.0") < text.index("for k in 0:5")


def test_fuse(update_golden):
    """Before: for i in 0:8, for j in 0:6
    After fuse(i, j): for i_j_f in 0:48 with i = i_j_f / 6, j = i_j_f % 6."""
    text = _check("fuse", update_golden)
    assert "for i_j_f in 0:48" in text
    # Flattening folds (f / 6) * 6 + f % 6 back to f; before it, the split is visible.
    s, sizes = EXAMPLES["fuse"]()
    unflat = str(lower_pipeline(s, sizes, until="flatten_storage"))
    assert "O[i_j_f / 6, i_j_f % 6] = A[i_j_f / 6, i_j_f % 6] * 2.0" in unflat


def test_bind(update_golden):
    """Before: for i in 0:8, for j in 0:6
    After bind(i, blockIdx.x), bind(j, threadIdx.x): no loops; grid=(8,1,1),
    block=(6,1,1); i = blockIdx.x, j = threadIdx.x."""
    text = _check("bind", update_golden)
    assert "grid=(8, 1, 1) block=(6, 1, 1)" in text
    assert "let i = blockIdx.x" in text and "let j = threadIdx.x" in text and "for " not in text


def test_bind_tail(update_golden):
    """Before: for i in 0:7, for j in 0:5 (35 points)
    After fuse + split(16) + bind: grid=(3,1,1) (ceil(35/16)), block=(16,1,1),
    the store guarded by i_j_f_o*16 + i_j_f_i < 35 (13 threads of the last block idle)."""
    text = _check("bind_tail", update_golden)
    assert "grid=(3, 1, 1) block=(16, 1, 1)" in text
    assert "< 35" in text


def test_unroll(update_golden):
    """Before: for i in 0:8, for j in 0:6
    After split(j, 3), unroll(j_i): for i, for j_o in 0:2: three stores with
    offsets +0, +1, +2 (no j_i loop left)."""
    body = "\n".join(_body(_check("unroll", update_golden)))
    assert "j_i" not in body and body.count("O[") == 3


def test_unroll_tail(update_golden):
    """Before: for i in 0:2, for j in 0:6
    After split(j, 4), unroll(j_i): for j_o in 0:2: four guarded copies
    (if j_o*4 + c < 6 for c = 0..3); simplification drops the guards it can
    decide (c = 0, 1 are always inside)."""
    text = _check("unroll_tail", update_golden)
    body = "\n".join(_body(text))
    assert "j_i" not in body and body.count("O[") == 4
    assert "if j_o * 4 + 2 < 6" in text and "if j_o * 4 + 3 < 6" in text


def test_vectorize(update_golden):
    """Before: for i in 0:8, for j in 0:6
    After split(j, 2), vectorize(j_i): for i, for j_o in 0:3, for j_i in 0:2 @vectorize."""
    text = _check("vectorize", update_golden)
    assert "for j_i in 0:2  @vectorize" in text


def test_compute_at(update_golden):
    """Before: B: for i, j: B = exp(A);  C: for i, j: C = B + 1  (two kernels)
    After B.compute_at(C, i): one kernel: for i: (for B_j in 0:3: B[i, B_j] = ...);
    (for j in 0:3: C[i, j] = B[i, j] + 1): one row of B per row of C."""
    text = _check("compute_at", update_golden)
    assert text.count("kernel ") == 1
    body = "\n".join(_body(text))
    assert body.index("for B_j in 0:3") < body.index("for j in 0:3")


def test_compute_inline(update_golden):
    """Before: C[i, j] = B[i, j] + 1 reads B
    After B.compute_inline(): C[i, j] = exp(A[i, j]) + 1; B (an output) is still
    written by its own kernel."""
    text = _check("compute_inline", update_golden)
    c = "\n".join(_body(text, "rowexp_C"))
    assert "exp(A[" in c and "B[" not in c
    assert "kernel rowexp_B(" in text


def test_compute_root(update_golden):
    """Before: B computed at C's loop i (one kernel)
    After B.compute_root(): back to two kernels, B's own full loop nest first."""
    text = _check("compute_root", update_golden)
    assert text.index("kernel rowexp_B(") < text.index("kernel rowexp_C(")


def test_cache_read_local_halo(update_golden):
    """Before: for i in 0:9: C[i] = A[i] + A[i+1]
    After split(i, 4), cache_read(A, local).compute_at(C, i_o): for i_o in 0:3:
    alloc local A_local[5] (4 + 1 halo), for ax0 in 0:5: if i_o*4 + ax0 < 10:
    A_local[ax0] = A[i_o*4 + ax0]; for i_i in 0:4: if i_o*4+i_i < 9:
    C[...] = A_local[i_i] + A_local[i_i + 1]."""
    text = _check("cache_read_local_halo", update_golden)
    assert "alloc local float32 A_local[5]" in text
    assert "A_local[i_i] + A_local[i_i + 1]" in text


def test_cache_read_shared(update_golden):
    """Before: for m, n, k: C[m,n] += A[m,k]*B[k,n]
    After tile(4x4) bound to blocks/threads, split(k, 4), A/B cached in shared at k_o,
    each fetched cooperatively (fused 4x4 tile = one element per thread):
    for k_o in 0:2: barrier (WAR on the buffers of the previous k_o);
    A_shared[ty, tx] = A[m_o*4 + ty, k_o*4 + tx]; B_shared[...] = ...; barrier (RAW);
    for k_i in 0:4: C += A_shared[m_i, k_i] * B_shared[k_i, n_i]."""
    text = _check("cache_read_shared", update_golden)
    body = _body(text)
    assert "grid=(2, 2, 1) block=(4, 4, 1)" in body[0]
    joined = "\n".join(body)
    loop = joined.index("for k_o in 0:2")
    first = joined.index("barrier()", loop)
    wa, wb = joined.index("A_shared[", first), joined.index("B_shared[", first)
    second = joined.index("barrier()", max(wa, wb))
    use = joined.index("for k_i in 0:4", second)
    assert loop < first < min(wa, wb) and second < use
    assert joined.count("barrier()") == 2


def test_cache_read_shared_tail(update_golden):
    """As cache_read_shared with K = 6: the second k_o tile is half empty, so the
    fetches of A (columns) and B (rows) are guarded by k_o*4 + .. < 6, and so is
    the k_i update (it never reads the unwritten half of the shared tiles)."""
    text = _check("cache_read_shared_tail", update_golden)
    assert text.count("< 6") == 3


def test_cache_write_local(update_golden):
    """Before: for m, n: C[m,n] = sum_k A[m,k]*B[k,n]
    After cache_write(C, local), split(m, 2) bound to blocks/threads,
    C.local.compute_at(C, m_i): per thread: alloc local C_local[1, 3];
    for C_local_n: acc over k into C_local; then for n: C[m, n] = C_local[0, n]."""
    text = _check("cache_write_local", update_golden)
    assert "alloc local float32 C_local[1, 3]" in text
    assert text.index("C_local[C_local_n] = ") < text.index("= C_local[n]")


def test_storage_align(update_golden):
    """As cache_read_shared, with storage_align(ax0, 4, 1) on both shared
    copies: the 4x4 tiles are padded to rows of 5 (stride 5 = 1 mod 4),
    A_shared[4, 5], subscripts row*5 + col."""
    text = _check("storage_align", update_golden)
    assert "alloc shared float32 A_shared[4, 5]" in text
    assert "alloc shared float32 B_shared[4, 5]" in text
    assert "A_shared[m_i * 5 + k_i]" in text and "B_shared[k_i * 5 + n_i]" in text


def test_storage_order(update_golden):
    """Before: A_shared[ax0, ax1] (8 x 4: m x k), A_shared[ax0, ax1] = A[m_o*8 + ax0,
    k_o*4 + ax1], read as A_shared[m_i, k_i].
    After storage_order(ax1, ax0): the buffer is k-major, A_shared[4, 8]; the
    same logical element is stored and read with the subscripts swapped:
    A_shared[ax1, ax0] = ...; ... A_shared[k_i, m_i] (flattened: ax1*8 + ax0,
    k_i*8 + m_i). The global subscripts of A do not change."""
    text = _check("storage_order", update_golden)
    assert "alloc shared float32 A_shared[4, 8]" in text
    assert "A_shared[ax1 * 8 + ax0] = A[m_o * 64 + ax0 * 8 + k_o * 4 + ax1]" in text
    assert "A_shared[k_i * 8 + m_i] * B[" in text
    # Before flattening, the two subscripts are the logical ones in buffer order.
    s, sizes = EXAMPLES["storage_order"]()
    unflat = str(lower_pipeline(s, sizes, until="flatten_storage"))
    assert "A_shared[ax1, ax0] = A[m_o * 8 + ax0, k_o * 4 + ax1]" in unflat
    assert "A_shared[k_i, m_i]" in unflat
    # Without storage_order: the m-major 8 x 4 tile; nothing but A_shared's
    # shape and subscripts differs.
    plain = str(tcomp.lower(_kmajor_matmul(order=False), sizes=sizes))
    assert "alloc shared float32 A_shared[8, 4]" in plain
    assert "A_shared[ax0 * 4 + ax1] = A[" in plain and "A_shared[m_i * 4 + k_i]" in plain
    diff = [(a, b) for a, b in zip(text.splitlines(), plain.splitlines()) if a != b]
    assert len(text.splitlines()) == len(plain.splitlines())
    assert len(diff) == 3 and all("A_shared" in a and "A_shared" in b for a, b in diff)


def test_storage_order_align(update_golden):
    """As storage_order, with storage_align(ax1, 8, 1): ax1 (k) is the outer
    buffer dimension, so its stride (a row of 8 m values) is padded to 9
    (9 = 1 mod 8): A_shared[4, 9], subscripts ax1*9 + ax0 and k_i*9 + m_i.
    (In the m-major layout ax1 is the innermost dimension: nothing to pad.)"""
    text = _check("storage_order_align", update_golden)
    assert "alloc shared float32 A_shared[4, 9]" in text
    assert "A_shared[ax1 * 9 + ax0] = A[m_o * 64 + ax0 * 8 + k_o * 4 + ax1]" in text
    assert "A_shared[k_i * 9 + m_i] * B[" in text
    sizes = EXAMPLES["storage_order_align"]()[1]
    plain = str(tcomp.lower(_kmajor_matmul(align=(8, 1), order=False), sizes=sizes))
    assert "alloc shared float32 A_shared[8, 4]" in plain


def test_every_example_has_a_test():
    names = {n[5:] for n in globals() if n.startswith("test_")}
    assert set(EXAMPLES) <= names


def test_no_stale_golden_files():
    stale = sorted(p.name for p in GOLDEN.glob("*.txt") if p.stem not in EXAMPLES)
    assert not stale, f"golden files without an example: {stale}"


# --------------------------------------------------------------------- passes
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_verifier_after_every_pass(name, monkeypatch):
    """check=True runs the verifier on every kernel after construction and after
    each pass (flat subscripts from flatten_storage on), and every example's IR
    passes it at each step."""
    s, sizes = EXAMPLES[name]()
    calls = []
    real = pipeline_module.verify

    def spy(k, prog, flat=False):
        calls.append((k.name, flat))
        return real(k, prog, flat=flat)

    monkeypatch.setattr(pipeline_module, "verify", spy)
    prog = lower_pipeline(s, sizes, check=True)
    names = [k.name for k in prog.kernels]
    assert [n for n, _ in calls] == names * (1 + len(PASSES))
    flat_from = [n for n, _ in PASSES].index("flatten_storage") + 1  # (the build comes first)
    assert [f for _, f in calls] == ([False] * (len(names) * flat_from) +
                                     [True] * (len(names) * (1 + len(PASSES) - flat_from)))


def _breaks_a_buffer_name(k, prog):
    """A deliberately wrong pass: every Store writes a buffer that does not exist."""
    class Rename(Rewriter):
        def stmt_Store(self, st):
            return dataclasses.replace(st, buffer="no_such_buffer")
    return dataclasses.replace(k, body=Rename().stmt(k.body))


@pytest.mark.parametrize("name", ["split_factor", "cache_read_shared", "compute_at"])
def test_verifier_catches_a_broken_pass(name, monkeypatch):
    """The verifier between passes is not vacuous: a pass that writes an unknown
    buffer is reported with check=True, right after that pass."""
    s, sizes = EXAMPLES[name]()
    broken = list(PASSES)
    broken.insert(2, ("break_buffers", _breaks_a_buffer_name))
    monkeypatch.setattr(pipeline_module, "PASSES", broken)
    with pytest.raises(tcomp.LoweringError, match="unknown buffer 'no_such_buffer'"):
        lower_pipeline(s, sizes, check=True)


# Examples whose schedule needs a compile-time size: refused with this message
# when every size is left symbolic.
NEEDS_CONSTANT_SIZES = {
    "cache_write_local": "stage 'C.local' (local) computed at 'C.m_i' needs a region of "
                         "non-constant extent N in dimension 1",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_verifier_symbolic_sizes(name):
    """The same schedules with every size left symbolic verify after each pass
    and compute the oracle's answer at the example's sizes (passed at run time);
    the few that need a constant size are refused with a message naming why."""
    s, sizes = EXAMPLES[name]()
    if name in NEEDS_CONSTANT_SIZES:
        with pytest.raises(tcomp.LoweringError) as e:
            lower_pipeline(s, None, check=True)
        assert NEEDS_CONSTANT_SIZES[name] in str(e.value)
        return
    prog = lower_pipeline(s, None, check=True)
    assert set(prog.sizes) == set(s.op.size_vars)  # nothing was fixed at compile time
    run_sim(s, inputs_for(s.op, sizes, seed=5))


@pytest.mark.parametrize("name", ["cache_read_shared", "compute_inline", "split_nondividing"])
def test_dump_writes_one_file_per_pass(name, tmp_path):
    s, sizes = EXAMPLES[name]()
    prog = tcomp.lower(s, sizes=sizes, dump=str(tmp_path))
    files = sorted(os.listdir(tmp_path))
    want = ["00_build.txt"] + [f"{i:02d}_{n}.txt" for i, (n, _) in enumerate(PASSES, 1)]
    assert files == want
    # The last dump is the returned program; every dump is a whole program.
    assert (tmp_path / want[-1]).read_text() == str(prog)
    for f in want:
        text = (tmp_path / f).read_text()
        assert text.startswith(f"# program {s.op.name}\n")
        assert text.count("kernel ") == str(prog).count("kernel ")
    # Before bind_threads the bound loops are still loops; after it, lets.
    build = (tmp_path / "00_build.txt").read_text()
    bound = (tmp_path / "01_bind_threads.txt").read_text()
    if name == "cache_read_shared":
        assert "@threadIdx.x" in build and "@threadIdx.x" not in bound
        assert "barrier()" not in (tmp_path / "02_simplify.txt").read_text()
        assert "barrier()" in (tmp_path / "05_insert_barriers.txt").read_text()


def test_dump_until(tmp_path):
    """`until=` stops before the named pass; the dump holds only the passes run."""
    s, sizes = EXAMPLES["cache_read_shared"]()
    prog = lower_pipeline(s, sizes, dump=str(tmp_path), until="flatten_storage")
    assert "flatten" not in " ".join(os.listdir(tmp_path))
    assert "A_shared[ax0_ax1_f_o, ax0_ax1_f_i]" in str(prog)


def test_tensorize_mma(update_golden):
    text = _check("tensorize_mma", update_golden)
    assert text.count("mma_m16n8k16(&C_fragment[") == 4  # 2 k16 steps x 2 n8 tiles, unrolled
    assert "ldmatrix_x4(&A_shared_fragment[" in text and "ldmatrix_x4_trans(" in text
    assert "alloc fragment float32 C_fragment[16]" in text  # a 16 x 32 warp tile: 16 per lane


def test_tensorize_cp_async_ring(update_golden):
    text = _check("tensorize_cp_async_ring", update_golden)
    assert "alloc shared bfloat16 A_shared[3, " in text
    assert "cp_async_wait(1)" in text and "cp_async_commit()" in text
    assert "? 16 : 0)" in text  # rows past M = 30: zero-filled pieces


def test_tensorize_conv_im2col(update_golden):
    text = _check("tensorize_conv_im2col", update_golden)
    assert "alloc shared float16 Acol[3, 32, 24]" in text  # rows padded to 24: 16 + 8
    assert "buffer temp" not in text  # the im2col matrix never reaches global memory
    gathers = [line for line in text.splitlines() if "cp_async(&Acol[" in line]
    assert gathers and all("&X[" in line and "? 16 : 0)" in line for line in gathers)
    assert text.count("mma_m16n8k16(&O_fragment[") == 4
