"""The fused decode kernels (lower/decode_attention.py, reached as
attention_decode(..., fused=True)) on the sim against tcomp.evaluate of the
plain attention comprehension (attention_sm90.source): T not a multiple of
anything, fewer keys than parts (empty parts), grouped-query K/V, several
query rows, fp16 and bf16, a large-magnitude score row, with and without the
register prefetch; the plan lines; every error message; NVRTC compiles the
CUDA with 16-byte vector loads of Q, K and V."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.errors import LoweringError
from tcomp.kernels import attention_decode
from tcomp.kernels.attention_decode_fused import decode_program
from tcomp.kernels.attention_sm90 import source
from tcomp.lang import dtypes


def inputs(z, s, t, d, g=1, seed=0, mag=1.0, dtype="float32"):
    rng = np.random.default_rng(seed)
    Q = (rng.standard_normal((z, s, d)) * mag).astype(np.float32)
    K = rng.standard_normal((z // g, t, d)).astype(np.float32)
    V = rng.standard_normal((z // g, t, d)).astype(np.float32)
    np_t = getattr(dtypes, dtype).numpy
    return tuple(x.astype(np_t) for x in (Q, K, V))


def check(T, parts, d=16, g=1, s=1, z=2, mag=1.0, dtype="float32", unroll=2, threads=16,
          prefetch=True, tol=(2e-5, 2e-6)):
    k = attention_decode(sizes={"D": d, "E": d, "S": s}, parts=parts, dtype=dtype, kv_group=g,
                         unroll=unroll, threads=threads, fused=True, prefetch=prefetch,
                         target="sim")
    Q, K, V = inputs(z, s, T, d, g, seed=T + parts, mag=mag, dtype=dtype)
    got = np.asarray(k(Q, K, V), np.float32)
    want = np.asarray(tcomp.evaluate(tcomp.op(source(dtype, None, False, d, g)), Q, K, V),
                      np.float32)
    assert got.shape == want.shape == (z, s, d)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=tol[0], atol=tol[1])


@pytest.mark.parametrize("T, parts", [(37, 3), (29, 2), (64, 4)])
def test_t_not_a_multiple_of_the_parts_or_the_step(T, parts):
    check(T, parts)


@pytest.mark.parametrize("T, parts", [(3, 8), (1, 4)])
def test_fewer_keys_than_parts(T, parts):
    check(T, parts)


@pytest.mark.parametrize("g", [2, 4])
def test_grouped_query_heads_share_the_loads(g):
    check(19, 3, g=g, z=4)


def test_several_query_rows_and_groups():
    check(23, 2, g=2, s=2, z=4)


def test_large_magnitude_scores():
    check(31, 3, mag=300.0)  # scores ~ +-2e3: exp2 overflows without the running max


def test_without_the_prefetch():
    check(37, 3, prefetch=False, unroll=3)


def test_unroll_one_and_a_wider_block():
    check(41, 2, unroll=1, threads=32)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_inputs(dtype):
    check(27, 3, d=16, g=2, z=4, dtype=dtype, tol=(2e-2, 2e-2))


def test_d128_bfloat16_one_block_row():
    check(9, 2, d=128, dtype="bfloat16", threads=16, unroll=1, tol=(2e-2, 2e-2))


def test_the_plan_lines():
    prog = decode_program({"D": 128, "E": 128, "S": 1}, parts=16, kv_group=4)
    split, comb = prog.kernels
    assert split.name == "attention_decode_split" and comb.name == "attention_decode_combine"
    assert split.plan == (
        "decode_attention: 16 parts of the keys x Z/4 K/V matrices, 8 key rows x 16 lanes of 8 "
        "(bfloat16, 16-byte loads), unroll 4, next step prefetched into registers: 16384 bytes "
        "of K and V in flight per block, 4 query rows sharing each load (g=4, S=1), online "
        "softmax in float32 registers (scale 0.0883883), 128 float32 partials per row")
    assert comb.plan == (
        "decode_attention combine: a block per query row, a thread per element of O, 128 "
        "partials (m = max m_q, L = sum c_q l_q, O = sum c_q W_q / L) to bfloat16")
    assert tuple(e.value for e in split.block) == (16, 8, 1)
    assert "# plan: decode_attention: 16 parts" in str(prog)


def test_the_loads_are_16_byte_vectors_in_the_ir():
    prog = decode_program({"D": 128, "E": 128, "S": 1}, parts=4)
    from tcomp.lower import ir
    from tcomp.lower.rewriter import walk_stmts
    vectors = [s.vector for s in walk_stmts(prog.kernels[0].body)
               if isinstance(s, ir.For) and s.vector is not None]
    assert sorted(v.loads[0].buffer for v in vectors) == ["K", "K", "Q", "V", "V"]
    assert {v.bytes for v in vectors} == {16}


@pytest.mark.parametrize("kw, msg", [
    (dict(sizes={"D": 64, "S": 1}), "give the head sizes D and E in sizes"),
    (dict(sizes={"D": 64, "E": 32, "S": 1}), "D = 64, E = 32; the lanes that hold a K row hold "
                                             "the V row: D must equal E"),
    (dict(sizes={"D": 64, "E": 64}), "give S (query rows per matrix) in sizes: the rows are "
                                     "kept in registers"),
    (dict(dtype="int8"), "dtype 'int8'; one of bfloat16, float16, float32"),
    (dict(sizes={"D": 12, "E": 12, "S": 1}), "D = 12 in 16-byte vectors of 8 bfloat16: D must be "
                                             "a multiple of 8 and D / 8 threads per row must "
                                             "divide 32"),
    (dict(sizes={"D": 24, "E": 24, "S": 1}), "D = 24 in 16-byte vectors of 8 bfloat16: D must be "
                                             "a multiple of 8 and D / 8 threads per row must "
                                             "divide 32"),
    (dict(parts=0), "parts = 0; at least 1"),
    (dict(kv_group=0), "kv_group = 0; at least 1"),
    (dict(unroll=0), "unroll = 0; at least 1"),
    (dict(kv_group=8, sizes={"D": 64, "E": 64, "S": 3}),
     "kv_group x S = 8 x 3 query rows per block; 1 to 16 (their state lives in registers)"),
    (dict(sizes={"D": 64, "E": 64, "S": 0}),
     "kv_group x S = 1 x 0 query rows per block; 1 to 16 (their state lives in registers)"),
    (dict(threads=12), "threads = 12; a multiple of the 8 threads of a key row, at most 1024"),
    (dict(threads=2048), "threads = 2048; a multiple of the 8 threads of a key row, at most 1024"),
    (dict(kv_group=4, sizes={"D": 64, "E": 64, "S": 1, "Z": 6}),
     "Z = 6 query matrices is not a multiple of kv_group = 4"),
    (dict(sizes={"D": 64, "E": 64, "S": 1, "Z": 65536}),
     "Z / kv_group = 65536 K/V matrices; the grid's y dimension takes at most 65535"),
    (dict(target="ptx"), "target 'ptx'; 'cuda' or 'sim'"),
])
def test_errors(kw, msg):
    kw = {"sizes": {"D": 64, "E": 64, "S": 1}, "target": "sim", "fused": True, **kw}
    with pytest.raises(LoweringError) as e:
        attention_decode(**kw)
    assert str(e.value) == "attention_decode(fused=True): " + msg


def test_the_cuda_kernels_compile_to_a_cubin():
    """NVRTC compiles the two kernels here (no GPU needed); the K and V rows
    are read as float4 (16-byte) vectors."""
    k = attention_decode(sizes={"D": 128, "E": 128, "S": 1}, parts=16, kv_group=4, fused=True)
    assert k.cubin[:4] == b"\x7fELF"
    assert k.source.count("__global__") == 2
    # Q's rows; K and V before the loop (the prefetch's first step) and in it
    assert k.source.count("reinterpret_cast<const float4*>") == 5


def test_no_keys_gives_nan_as_the_split_comprehension():
    """T = 0: every part empty, L = 0 and O = 0 / 0, as tcomp.evaluate of
    decode_source gives (the comprehension's combine)."""
    from tcomp.kernels import decode_source
    k = attention_decode(sizes={"D": 16, "E": 16, "S": 1}, parts=3, dtype="float32",
                         threads=16, fused=True, target="sim")
    Q = np.ones((2, 1, 16), np.float32)
    K = V = np.zeros((2, 0, 16), np.float32)
    want = tcomp.evaluate(tcomp.op(decode_source("float32", None, 16, 3)), Q, K, V)
    assert np.isnan(want).all() and np.isnan(k(Q, K, V)).all()


def test_fixed_sizes():
    k = attention_decode(sizes={"D": 16, "E": 16, "S": 1, "Z": 4, "T": 45}, parts=4,
                         dtype="float32", kv_group=2, unroll=2, threads=16, fused=True,
                         target="sim")
    assert not {"Z", "T"} & set(k.program.sizes)
    Q, K, V = inputs(4, 1, 45, 16, 2)
    want = tcomp.evaluate(tcomp.op(source("float32", None, False, 16, 2)), Q, K, V)
    np.testing.assert_allclose(k(Q, K, V), want, rtol=2e-5, atol=2e-6)


def _cuda_bin(tool):
    """A CUDA binary tool of the pip NVIDIA wheels (nvidia/cu13/bin), or None."""
    import os
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        path = os.path.join(root, "cu13", "bin", tool)
        if os.access(path, os.X_OK):
            return path
    return None


@pytest.mark.parametrize("g, bits", [(1, 32), (1, 64), (4, 32)])
def test_the_sass_loads_k_and_v_in_16_bytes_without_local_memory(g, bits, tmp_path):
    """The split kernel's SASS (32- and 64-bit index variants): LDG.E.128 for
    Q, K and V (1 or g for Q, unroll 4 x 2 before the loop and in it), no
    local memory (no spills)."""
    import re
    import subprocess
    nvdisasm, cuobjdump = _cuda_bin("nvdisasm"), _cuda_bin("cuobjdump")
    if nvdisasm is None or cuobjdump is None:
        pytest.skip("nvdisasm / cuobjdump of the nvidia cu13 wheels not installed")
    k = attention_decode(sizes={"D": 128, "E": 128, "S": 1}, parts=16, kv_group=g, fused=True)
    f = tmp_path / "k.cubin"
    f.write_bytes(k.variant(bits).cubin)
    sass = subprocess.run([nvdisasm, "-c", str(f)], capture_output=True, text=True,
                          check=True).stdout
    split = sass[sass.index(".text.attention_decode_split:"):]
    assert len(re.findall(r"LDG\.E\.128", split)) == g + 16
    assert not re.search(r"\bLDL|\bSTL", sass)
    usage = subprocess.run([cuobjdump, "-res-usage", str(f)], capture_output=True, text=True,
                           check=True).stdout
    assert re.search(r"attention_decode_split:\s*\n\s*REG:\d+ STACK:0 SHARED:0 LOCAL:0", usage)


def test_the_default_takes_the_fused_kernels_where_they_apply_and_says_so():
    """fused=None (the default): the fused kernels when `sizes` give S, the
    comprehension route otherwise, each named in the kernel's remarks; an
    explicit fused=True still raises where the fused kernels do not apply."""
    k = attention_decode(sizes={"D": 16, "E": 16, "S": 1}, parts=2, dtype="float32",
                         target="sim")
    assert k.remarks[0] == "attention_decode: the fused kernels (fused=None: they apply here)"
    assert [kk.name for kk in k.program.kernels] == ["attention_decode_split",
                                                     "attention_decode_combine"]
    k = attention_decode(sizes={"D": 16, "E": 16}, parts=2, dtype="float32", target="sim")
    assert k.remarks[0] == (
        "attention_decode: the comprehension route (seven kernels): the fused kernels do not "
        "apply here (attention_decode(fused=True): give S (query rows per matrix) in sizes: "
        "the rows are kept in registers)")
    assert len(k.program.kernels) == 7
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((2, 1, 16)).astype(np.float32)
    K, V = (rng.standard_normal((2, 9, 16)).astype(np.float32) for _ in range(2))
    want = tcomp.evaluate(tcomp.op(source("float32", None, False, 16, 1)), Q, K, V)
    assert np.allclose(k(Q, K, V), want, atol=1e-5)
    with pytest.raises(LoweringError, match="give S"):
        attention_decode(sizes={"D": 16, "E": 16}, parts=2, fused=True)
