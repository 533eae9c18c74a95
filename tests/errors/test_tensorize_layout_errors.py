"""Stage.tensorize's messages for products it cannot take (schedule/matmul_shape.py):
batched products and transposed operands are accepted, so each refusal says
which part of C[..., m, n] += A[..., m, k] * B[..., k, n] the stage misses; and
the tensor_cores pass's messages for fragments it cannot place on the lanes."""
from __future__ import annotations

import pytest

import tcomp

TAIL = ("(mma_m16n8k16 computes C[..., m, n] += A[..., m, k] * B[..., k, n]: batch variables "
        "first, either operand in either major order)")


def _tensorize(src):
    s = tcomp.Schedule(tcomp.op(src))
    CF = s.cache_write(s["C"], "fragment")
    with pytest.raises(tcomp.ScheduleError) as e:
        CF.tensorize(CF.axes[0], "mma_m16n8k16")
    return str(e.value)


def test_output_rows_not_last():
    msg = _tensorize("def f(bfloat16(NB,M,K) A, bfloat16(NB,K,N) B) -> (C) "
                     "{ C(m, b, n) +=! A(b, m, k) * B(b, k, n) }")
    assert msg == ("tensorize: stage 'C.fragment' is not a product mma_m16n8k16 can compute: "
                   "its last two dimensions, 'b' and 'n', are not the rows of one operand and "
                   "the columns of the other (write the output with its batch dimensions "
                   "first: C(b, m, n)) " + TAIL)


def test_operand_matrix_subscripts_not_last():
    msg = _tensorize("def f(bfloat16(M,NB,K) A, bfloat16(NB,K,N) B) -> (C) "
                     "{ C(b, m, n) +=! A(m, b, k) * B(b, k, n) }")
    assert msg == ("tensorize: stage 'C.fragment' is not a product mma_m16n8k16 can compute: "
                   "operand A is read as A[m, b, k]: its last two subscripts must be 'm' and "
                   "'k' (in either order) " + TAIL)


def test_operand_leading_subscripts_not_batch_variables():
    msg = _tensorize("def f(bfloat16(NB,NB,M,K) A, bfloat16(NB,K,N) B) -> (C) "
                     "{ C(b, m, n) +=! A(b, b, m, k) * B(b, k, n) }")
    assert msg == ("tensorize: stage 'C.fragment' is not a product mma_m16n8k16 can compute: "
                   "operand A is read as A[b, b, m, k]: the subscripts before its last two must "
                   "be distinct batch variables of the output (b) " + TAIL)


def test_product_of_more_than_two_tensors():
    msg = _tensorize("def f(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                     "{ C(m, n) +=! A(m, k) * B(k, n) * A(m, k) }")
    assert msg == ("tensorize: stage 'C.fragment' is not a product mma_m16n8k16 can compute: "
                   "its value is not a product of two tensors indexed by the loop variables "
                   + TAIL)


def test_two_reduction_variables():
    msg = _tensorize("def f(bfloat16(M,K,L) A, bfloat16(K,L,N) B) -> (C) "
                     "{ C(m, n) +=! A(m, k, l) * B(k, l, n) }")
    assert msg == ("tensorize: stage 'C.fragment' is not a product mma_m16n8k16 can compute: "
                   "it is not a sum over one reduction variable into two or more output "
                   "dimensions " + TAIL)


def test_batch_loop_inside_the_tensorized_nest():
    s = tcomp.Schedule(tcomp.op("def f(bfloat16(NB,M,K) A, bfloat16(NB,K,N) B) -> (C) "
                                "{ C(b, m, n) +=! A(b, m, k) * B(b, k, n) }"))
    CF = s.cache_write(s["C"], "fragment")
    b, m, n = CF.axes
    (k,) = CF.reduce_axes
    mo, mi = CF.split(m, 16)
    no, ni = CF.split(n, 8)
    ko, ki = CF.split(k, 16)
    CF.reorder(ko, mo, no, mi, b, ni, ki)
    with pytest.raises(tcomp.ScheduleError) as e:
        CF.tensorize(mi, "mma_m16n8k16")
    assert str(e.value) == (
        "tensorize: loop 'b' inside Axis(C.fragment.m_i) runs over the batch variable 'b'; "
        "mma_m16n8k16 takes the m, n and k loops of one product: reorder the loops of 'b' "
        "outside Axis(C.fragment.m_i) (bind them to blockIdx.z, or fuse them into a block "
        "index)")


def _two_batches_per_fragment(at_batch_loop: bool):
    """A bmm whose block computes 2 products (C's batch loop split by 2, its
    inner half inside the block's tile loops); the accumulator is computed
    at the block's loop `no` (covering both products) or inside `bi`."""
    op = tcomp.op("def f(bfloat16(NB,M,K) A, bfloat16(NB,K,N) B) -> (C) "
                  "{ C(b, m, n) +=! A(b, m, k) * B(b, k, n) }")
    s = tcomp.Schedule(op)
    C = s["C"]
    CF = s.cache_write(C, "fragment")
    b, m, n = C.axes
    bo, bi = C.split(b, 2)
    mo, mi = C.split(m, 16)
    no, ni = C.split(n, 16)
    C.reorder(bo, mo, no, bi, mi, ni)
    for ax, tag in ((bo, "blockIdx.z"), (mo, "blockIdx.y"), (no, "blockIdx.x")):
        C.bind(ax, tag)
    CF.compute_at(C, bi if at_batch_loop else no)
    fb, fm, fn = CF.axes
    (fk,) = CF.reduce_axes
    fmo, fmi = CF.split(fm, 16)
    fno, fni = CF.split(fn, 8)
    ko, ki = CF.split(fk, 16)
    CF.reorder(ko, fb, fmo, fno, fmi, fni, ki)
    CF.tensorize(fmi, "mma_m16n8k16")
    for name in ("A", "B"):
        S = s.cache_read(name, "shared", [CF])
        S.compute_at(CF, ko)
        s.cache_read(S, "fragment", [CF]).compute_at(CF, ko)
        _, lane = S.split(S.fuse(*S.axes), 32)
        S.bind(lane, "threadIdx.x")
    return op, s


def test_accumulator_holding_several_products():
    op, s = _two_batches_per_fragment(at_batch_loop=False)
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes={"NB": 4, "M": 32, "N": 32, "K": 32})
    assert str(e.value) == (
        "tensorize mma_m16n8k16: the accumulator fragment 'C_fragment' is 2 x 16 x 16: it holds "
        "the tiles of several products of the batch; compute it at a loop inside its "
        "consumer's batch loops (or bind those to block indices) so that it holds one "
        "product's m x n tile")


def test_accumulator_inside_the_batch_loop_follows_the_remedy():
    import numpy as np
    op, s = _two_batches_per_fragment(at_batch_loop=True)
    sizes = {"NB": 4, "M": 32, "N": 32, "K": 32}
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(tuple(sizes[d.name] for d in t.shape)).astype(t.dtype.numpy)
          for t in op.inputs]
    got = tcomp.build(s, target="sim", sizes=sizes)(*xs).astype(np.float64)
    np.testing.assert_allclose(got, tcomp.evaluate(op, *xs).astype(np.float64), rtol=1e-2)


def test_fragment_read_by_a_fused_loop_is_refused():
    """The accumulator read by one fused loop over its tile (not a row loop
    and a column loop the pass can place on the lanes): before, the access
    kept its tile subscripts and was flattened as an array, so the CUDA
    kernel read other registers than the lane's own (a silent wrong answer;
    the sim stopped with a SimError). Now a LoweringError names the access."""
    op = tcomp.op("def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                  "{ C(m, n) +=! A(m, k) * B(k, n) }")
    s = tcomp.Schedule(op)
    C = s["C"]
    CF = s.cache_write(C, "fragment")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 16, 16)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    CF.compute_at(C, no)
    fm, fn = CF.axes
    (fk,) = CF.reduce_axes
    fmo, fmi = CF.split(fm, 16)
    fno, fni = CF.split(fn, 8)
    ko, ki = CF.split(fk, 16)
    CF.reorder(ko, fmo, fno, fmi, fni, ki)
    CF.tensorize(fmi, "mma_m16n8k16")
    for name in ("A", "B"):
        S = s.cache_read(name, "shared", [CF])
        S.compute_at(CF, ko)
        s.cache_read(S, "fragment", [CF]).compute_at(CF, ko)
        _, lane = S.split(S.fuse(*S.axes), 32)
        S.bind(lane, "threadIdx.x")
    _, lane = C.split(C.fuse(mi, ni), 32)  # the tile's 256 elements over the 32 lanes
    C.bind(lane, "threadIdx.x")
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(s, target="cuda", sizes={"M": 32, "N": 32, "K": 32})
    assert str(e.value) == (
        "fragment 'C_fragment': access C_fragment[m_i_n_i_f_o * 2 + m_i_n_i_f_i / 16, "
        "m_i_n_i_f_i % 16] is not over the lanes' own elements: a stage that reads or writes "
        "a fragment must loop over its 16 x 16 tile with one loop of its rows and one of its "
        "columns (no fused loop over both), each a whole number of mma tiles")
