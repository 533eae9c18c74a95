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
    assert R.default_threads(4096, "float32") == 256
    assert R.default_threads(32768, "float32") == 1024
    assert R.default_threads(4096, "bfloat16") == 128
    assert R.default_threads(32768, "bfloat16") == 1024
    assert R.default_threads(100, "float32") == 32
    with pytest.raises(ValueError, match="dtype must be one of"):
        R.softmax_src("float16")
