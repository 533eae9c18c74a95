"""Shape specialisation built (specialized.py): each variant lowered for its
condition, shown in the IR, compiled for sim and cuda, chosen on the host at each
call by the inputs' shapes."""
import os

import numpy as np
import pytest

import tcomp
from tcomp.schedule import templates

ROW = "def scale(float(M, D) X) -> (O) { O(i, d) = X(i, d) * 2.0 }"
MM = "def mm(float16(M,K) A, float16(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
ALIGNED = "M % 32 == 0 and N % 32 == 0 and K % 16 == 0"


def row_schedule():
    """Rows on blocks; where D % 4 == 0, 4-float vectors on threads."""
    s = tcomp.Schedule(tcomp.op(ROW))
    s["O"].bind(s["O"].axes[0], "blockIdx.x")
    fast = s.specialize("D % 4 == 0")
    do, di = fast["O"].split(fast["O"].axes[1], 4)
    fast["O"].bind(do, "threadIdx.x")
    fast["O"].vectorize(di)
    return s


def gemm_schedule():
    """Tensor cores where the sizes are multiples of the tiles, SIMT tiles otherwise."""
    s = tcomp.Schedule(tcomp.op(MM))
    fast = s.specialize(ALIGNED)
    CF = fast.cache_write(fast["C"], "fragment")
    templates.tc_tiles(fast, fast["C"], CF, lambda: fast.cache_read("A", "shared", [CF]),
                       lambda: fast.cache_read("B", "shared", [CF]), 32, 32, 16, 32, 16, 32,
                       True, True, False, False)
    templates.simt_gemm(s, "C", "A", "B", 32, 32, 8, 4, 4)
    return s


def test_the_ir_shows_each_variant_as_lowered_for_its_condition(tmp_path):
    p = tcomp.lower(row_schedule(), dump=str(tmp_path))
    text = str(p)
    assert text.startswith("# specialized program scale: 2 variant(s), the first whose "
                           "condition holds at a call runs\n# variant 1: when D % 4 == 0 "
                           "(lowered with D as D / 4 * 4)\n# program scale\n")
    assert "\n# variant 2: otherwise\n# program scale\n" in text
    fast, general = (str(prog) for _, prog in p.variants)
    # D symbolic, yet the vectorized loop has its 16-byte accesses (it had none before
    # specialisation: a symbolic D hid the multiple of 4)
    assert "@vectorize(16 bytes: load X[i * (D / 4 * 4) + d_o * 4]" in fast
    assert "# remark" not in text and "if " not in fast
    assert sorted(os.listdir(tmp_path)) == ["otherwise", "variant1"]
    assert "11_vectorize.txt" in os.listdir(tmp_path / "variant1")


@pytest.mark.parametrize("D, ran", [(8, "when D % 4 == 0"), (6, "otherwise"),
                                    (0, "when D % 4 == 0")])
def test_the_sim_kernel_runs_the_variant_the_sizes_choose(D, ran):
    k = tcomp.build(row_schedule(), target="sim")
    assert k.ran is None and [v.name for v in k.variants] == ["when D % 4 == 0", "otherwise"]
    X = np.random.default_rng(D).standard_normal((3, D)).astype(np.float32)
    np.testing.assert_array_equal(k(X), X * 2)
    assert k.ran == ran and k.variant_for({"D": D}).name == ran
    assert k.remarks == ("specialized: 2 variant(s), the first whose condition holds at a call "
                         "runs: [1] when D % 4 == 0; [2] otherwise",)


def test_the_cuda_kernel_compiles_each_variant():
    k = tcomp.build(row_schedule(), target="cuda")
    fast, general = k.variants
    assert "float4" in fast.source and "float4" not in general.source
    assert k.source.startswith("// variant 1: when D % 4 == 0\n")
    assert "\n// variant 2: otherwise\n" in k.source and ".entry" in k.ptx
    assert repr(k) == "<tcomp specialized cuda kernel scale: when D % 4 == 0, otherwise>"


@pytest.mark.parametrize("sizes, names", [({"D": 8}, ["when D % 4 == 0"]),
                                          ({"D": 6}, ["otherwise"]),
                                          ({"M": 3}, ["when D % 4 == 0", "otherwise"])])
def test_sizes_fixed_at_build_decide_the_conditions_then(sizes, names):
    k = tcomp.build(row_schedule(), target="sim", sizes=sizes)
    assert [v.name for v in k.variants] == names
    X = np.ones((3, sizes.get("D", 4)), np.float32)
    np.testing.assert_array_equal(k(X), X * 2)


def test_a_tensor_core_gemm_for_aligned_sizes_and_simt_tiles_for_the_rest():
    s = gemm_schedule()
    k = tcomp.build(s, target="sim")
    rng = np.random.default_rng(0)
    for (M, N, K), ran in (((64, 32, 32), f"when {ALIGNED}"), ((37, 45, 29), "otherwise")):
        A = rng.standard_normal((M, K)).astype(np.float16)
        B = rng.standard_normal((K, N)).astype(np.float16)
        np.testing.assert_allclose(k(A, B).astype(np.float64),
                                   tcomp.evaluate(s.op, A, B).astype(np.float64),
                                   rtol=1e-2, atol=1e-2)
        assert k.ran == ran
    c = tcomp.build(s, target="cuda")
    fast = str(c.variants[0].program)
    # symbolic sizes, but no tail guard and no zero-filled tile edge: the aligned variant's
    # copies are 16-byte vectors; the same schedule lowered without the condition keeps both
    assert "mma" in c.variants[0].source and "if " not in fast and " ? " not in fast
    assert fast.count("@vectorize(16 bytes") == 2
    assert not [r for r in c.remarks if r.startswith(f"[when {ALIGNED}]")], c.remarks
    plain = str(tcomp.lower(s.specializations[0][1]))
    assert "if " in plain and " ? " in plain and "@vectorize(16 bytes" not in plain


@pytest.mark.cuda
@pytest.mark.parametrize("D, ran", [(4096, "when D % 4 == 0"), (4098, "otherwise")])
def test_on_the_gpu_the_aligned_rows_run_the_vector_variant(D, ran):
    k = tcomp.build(row_schedule(), target="cuda")
    X = np.random.default_rng(1).standard_normal((5, D)).astype(np.float32)
    np.testing.assert_array_equal(k(X), X * 2)
    assert k.ran == ran
