"""The register-row kernels of bench/row_schedules.py on the sim, against
`tcomp.evaluate`, at small and awkward row lengths (not multiples of the
vector width or of the thread count), float32 and bfloat16; what their
lowering must show (rows in compact register arrays, 16-byte accesses)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcomp
from tests.lower.util import inputs_for, run_sim

from .common import BENCH, _load

R = _load("bench_row_schedules", BENCH / "row_schedules.py")

ROWS = [(3, 256, 32), (2, 1000, 64), (2, 4099, 128), (3, 257, 32)]  # (N, D, threads)


@pytest.mark.parametrize("dtype", R.DTYPES)
@pytest.mark.parametrize("kind", sorted(R.ROW_KINDS))
@pytest.mark.parametrize("n,d,threads", ROWS, ids=[f"{n}x{d}/{t}t" for n, d, t in ROWS])
def test_row_kernels_match_evaluate(kind, dtype, n, d, threads):
    op, s = R.ROW_KINDS[kind](d, dtype, threads=threads)
    sizes = {"N": n, "D": d}
    run_sim(s, inputs_for(op, sizes, seed=d), sizes=sizes)


def _local_allocs(text):
    return dict(re.findall(r"alloc local \w+ (\w+)\[(\d+)\]", text))


@pytest.mark.parametrize("dtype,vec", [("float32", 4), ("bfloat16", 8)])
def test_the_row_lives_in_registers(dtype, vec):
    """256 threads over a 4096-element row: each thread holds 4096 / 256 = 16
    elements of X and of the exponentials, at constant subscripts."""
    op, s = R.softmax(4096, dtype, threads=256)
    text = str(tcomp.lower(s, sizes={"N": 8, "D": 4096}))
    allocs = _local_allocs(text)
    assert allocs["X_local"] == "16" and allocs["e"] == "16"
    for sub in re.findall(r"\b(?:X_local|e)\[([^\]]*)\]", text):
        assert "threadIdx" not in sub and "_o_i" not in sub, sub  # constants (+ vector lanes)
    assert text.count("@vectorize(16 bytes: load X[") == 4096 // (256 * vec)
    assert text.count("@vectorize(16 bytes: store O[") == 4096 // (256 * vec)


def test_bfloat16_rows_load_16_bytes_into_float32_registers():
    op, s = R.add_layernorm(2048, "bfloat16", threads=64)
    k = tcomp.build(s, target="cuda", sizes={"N": 4, "D": 2048})
    assert "float h[32];" in k.source  # the float32 sum, in registers
    assert "__nv_bfloat16 tc_vec" in k.source
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.\w32", k.ptx)) == 2 * 4 + 2 * 4
    # (X and R, gamma and beta: 4 pieces of 8 bfloat16 each)
    assert len(re.findall(r"st\.global\.v4", k.ptx)) == 2 * 4  # S and Y
    assert ".local" not in k.ptx
    assert k.source.count("__syncthreads") == 4  # two block-wide reductions, no more


def test_awkward_row_lengths_keep_vectors_where_the_guard_is_uniform():
    """D = 1000 (a multiple of 4): the tail guard holds for all 4 lanes or none
    and moves outside the vector loop; D = 1001: scalar accesses."""
    op, s = R.layernorm(1000, "float32", threads=64)
    k = tcomp.build(s, target="cuda", sizes={"N": 4, "D": 1000})
    assert "reinterpret_cast<const float4*>(&X[" in k.source
    op, s = R.layernorm(1001, "float32", threads=64)
    k = tcomp.build(s, target="cuda", sizes={"N": 4, "D": 1001})
    assert "reinterpret_cast<const float4*>(&X[" not in k.source


@pytest.mark.parametrize("v,chunk,threads", [(3000, 1024, 64), (2048, 1024, 128), (257, 512, 32)])
def test_cross_entropy(v, chunk, threads):
    op, s = R.cross_entropy(chunk, threads)
    sizes = {"N": 5, "V": v}
    args = inputs_for(op, sizes, seed=v, ints={"T": v})
    k = run_sim(s, args, sizes=sizes)
    x = args[0].astype(np.float64)
    want = (np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
            - x[np.arange(5), args[1]])
    np.testing.assert_allclose(k(*args), want, rtol=1e-5, atol=1e-5)


def test_cross_entropy_reads_each_chunk_once_in_16_byte_pieces():
    op, s = R.cross_entropy(16384, 1024)
    k = tcomp.build(s, target="cuda", sizes={"N": 8, "V": 128256})
    assert len(k.program.kernels) == 2  # the chunks' log-sum-exp, then the rows'
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.\w32", k.ptx)) == 2  # 16384 / 1024 / 8
    assert ".local" not in k.ptx


def test_chunk_must_fill_whole_pieces():
    with pytest.raises(ValueError, match="chunk 1000 must be a multiple of threads"):
        R.cross_entropy(1000, 64)


@pytest.mark.parametrize("d,threads", [(4096, 64), (1000, 32), (257, 32)])
def test_rowsum(d, threads):
    op, s = R.rowsum(d, threads)
    sizes = {"N": 3, "D": d}
    run_sim(s, inputs_for(op, sizes, seed=1), sizes=sizes)


@pytest.mark.parametrize("dtype", R.DTYPES)
@pytest.mark.parametrize("n", [4096, 1000, 4099])
def test_chain(dtype, n):
    op, s = R.chain(dtype, threads=32, per_thread=4)
    sizes = {"N": n}
    run_sim(s, inputs_for(op, sizes, seed=2, scalars={"w": 0.75, "b": -0.25}), sizes=sizes)


def test_default_threads():
    assert R.default_threads(4096, "float32") == 512
    assert R.default_threads(32768, "float32") == 1024
    assert R.default_threads(4096, "bfloat16") == 256
    assert R.default_threads(32768, "bfloat16") == 1024
    assert R.default_threads(100, "float32") == 32
    with pytest.raises(ValueError, match="dtype must be one of"):
        R.softmax_src("float16")


# ------------------------------------------------------------------ issue 14's variants
@pytest.mark.parametrize("dtype", R.DTYPES)
@pytest.mark.parametrize("n,d,threads", ROWS, ids=[f"{n}x{d}/{t}t" for n, d, t in ROWS])
def test_softmax_exp2_matches_evaluate(dtype, n, d, threads):
    op, s = R.softmax(d, dtype, threads=threads, exp2=True)
    sizes = {"N": n, "D": d}
    run_sim(s, inputs_for(op, sizes, seed=d), sizes=sizes)


def test_softmax_exp2_is_fewer_instructions_with_the_same_accesses():
    plain = tcomp.build(R.softmax(4096, "bfloat16", 256)[1], target="cuda",
                        sizes={"N": 8, "D": 4096})
    fast = tcomp.build(R.softmax(4096, "bfloat16", 256, exp2=True)[1], target="cuda",
                       sizes={"N": 8, "D": 4096})
    assert "exp2f(" in fast.source and "expf(" not in fast.source.replace("exp2f(", "")
    assert len(fast.ptx.splitlines()) < len(plain.ptx.splitlines())
    for k in (plain, fast):
        assert len(re.findall(r"ld\.global(?:\.nc)?\.v4", k.ptx)) == 2
        assert ".local" not in k.ptx


@pytest.mark.parametrize("dtype", R.DTYPES)
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("n,d,threads", ROWS, ids=[f"{n}x{d}/{t}t" for n, d, t in ROWS])
def test_shared_weights_match_evaluate(kind, dtype, n, d, threads):
    op, s = R.ROW_KINDS[kind](d, dtype, threads=threads, shared_weights=True)
    sizes = {"N": n, "D": d}
    run_sim(s, inputs_for(op, sizes, seed=d), sizes=sizes)


def test_shared_weights_are_stored_before_the_first_barrier():
    """gamma and beta are copied into shared memory (16-byte loads and
    stores) before the row's first reduction, not loaded after the second."""
    op, s = R.layernorm(32768, "bfloat16", shared_weights=True)
    k = tcomp.build(s, target="cuda", sizes={"N": 4, "D": 32768})
    src = k.source
    first_barrier = src.index("__syncthreads")
    for w in ("gamma", "beta"):
        assert src.index(f"{w}_shared[") < first_barrier
        assert src.rindex(f"&{w}[") < first_barrier  # every global read of it
    assert "extern __shared__" in src  # 128 KiB: dynamic shared memory
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4", k.ptx)) == 3 * 4
    assert ".local" not in k.ptx


def _ce_want(args, n):
    x = args[0].astype(np.float64)
    return (np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
            - x[np.arange(n), args[1]])


@pytest.mark.parametrize("exp2", [True, False])
@pytest.mark.parametrize("v,threads,per_thread", [(3000, 64, 16), (2048, 32, 32), (257, 32, 8),
                                                   (1500, 32, 16)])
def test_cross_entropy_one_kernel(v, threads, per_thread, exp2):
    op, s = R.cross_entropy_one_kernel(threads, per_thread, exp2=exp2)
    sizes = {"N": 5, "V": v}
    args = inputs_for(op, sizes, seed=v, ints={"T": v})
    k = run_sim(s, args, sizes=sizes)
    np.testing.assert_allclose(k(*args), _ce_want(args, 5), rtol=1e-5, atol=1e-5)


def test_cross_entropy_one_kernel_has_two_reductions_and_no_second_kernel():
    """4096 x 128256 logits, 512 threads of 32 per chunk: 8 chunks, each
    thread 4 16-byte loads per chunk, all in registers; the only barriers are
    the row's two reductions (two each)."""
    op, s = R.cross_entropy_one_kernel(512, 32)
    k = tcomp.build(s, target="cuda", sizes={"N": 8, "V": 128256})
    assert len(k.program.kernels) == 1
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.\w32", k.ptx)) == 8 * 4
    assert k.source.count("__syncthreads") == 4
    assert ".local" not in k.ptx
    assert "exp2f(" in k.source


def test_cross_entropy_per_thread_must_fill_whole_pieces():
    with pytest.raises(ValueError, match="per_thread 12 must be a multiple of 8"):
        R.cross_entropy_one_kernel(64, 12)


@pytest.mark.parametrize("m,n", [(64, 64), (70, 130), (129, 65)])
def test_transpose_vec(m, n):
    op, s = R.transpose_vec(64, 16, 4)
    sizes = {"M": m, "N": n}
    run_sim(s, inputs_for(op, sizes, seed=m), sizes=sizes)


def test_transpose_vec_loads_16_bytes():
    op, s = R.transpose_vec(64, 16, 4)
    k = tcomp.build(s, target="cuda", sizes={"M": 8192, "N": 8192})
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.f32", k.ptx)) == 4
    assert len(re.findall(r"st\.shared\.v4\.f32", k.ptx)) == 4
