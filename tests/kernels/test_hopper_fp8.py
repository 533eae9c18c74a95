"""The Hopper fp8 GEMM from a schedule on the CPU (issue 24's "fp8 e4m3 GEMM,
per-tensor scales, bf16 out"): the sim runs e4m3, e5m2 and mixed inputs at
awkward sizes (tails no tile divides, K shorter than one slot and than the
ring, K = 0) against `tcomp.evaluate` and the float64 product; the plan and
golden IR; the CUDA the plan prints (the 8-bit wgmma without transposes) and
its SASS (QGMMA ... E4M3)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tcomp
from tcomp.kernels.gemm_fp8_sm90 import fp8_schedule, source
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule

from tests.lower.util import check_golden

from .test_gemm_sm90_ir import GOLDEN

NP = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
SMALL = GemmConfig(bm=128, bn=64, consumers=2, stages=2)
PAIRS = [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e5m2"),
         ("float8_e4m3fn", "float8_e5m2")]


def fp8_data(M, N, K, a="float8_e4m3fn", b="float8_e4m3fn", seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(NP[a])
    B = rng.standard_normal((N, K)).astype(NP[b])
    return A, B, np.float32(0.75), np.float32(1.5)


def reference(A, B, sa, sb):
    return A.astype(np.float64) @ B.astype(np.float64).T * float(sa) * float(sb)


def plain(a, b):
    return tcomp.op(f"def mm({a}(M,K) A, {b}(N,K) B) -> (float32(M, N) C) "
                    f"{{ C(m, n) +=! A(m, k) * B(n, k) }}")


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("M,N,K", [(136, 72, 80), (200, 136, 272)])
def test_sim_plain_product_float32_out(a, b, M, N, K):
    """float32 out: the sums of exact fp8 products agree with float64 to float32."""
    o = plain(a, b)
    k = tcomp.build(hopper_schedule(o, SMALL), target="sim", sizes={"M": M, "N": N, "K": K})
    A, B, _, _ = fp8_data(M, N, K, a, b, seed=M)
    got = np.asarray(k(A, B), np.float64)
    np.testing.assert_allclose(got, np.asarray(tcomp.evaluate(o, A, B), np.float64),
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, reference(A, B, 1, 1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("a,b", PAIRS)
def test_sim_scaled_bfloat16_out(a, b):
    """The scaled product: partial tiles in M and N, K of one partial slot."""
    o = tcomp.op(source(a, b))
    sizes = {"M": 136, "N": 72, "K": 80}
    s = fp8_schedule(o, SMALL)
    text = str(tcomp.lower(s, sizes=sizes))
    assert "computed from the accumulators and sa, sb" in text and "buffer temp" not in text
    k = tcomp.build(s, target="sim", sizes=sizes)
    A, B, sa, sb = fp8_data(136, 72, 80, a, b, seed=2)
    got = k(A, B, sa, sb)
    assert got.dtype == ml_dtypes.bfloat16
    want = tcomp.evaluate(o, A, B, sa, sb)
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=2 ** -7, atol=1e-3)
    np.testing.assert_allclose(np.asarray(got, np.float64), reference(A, B, sa, sb),
                               rtol=2 ** -7, atol=1e-2)


@pytest.mark.parametrize("K", [0, 16, 48])
def test_sim_k_zero_and_k_shorter_than_the_ring(K):
    o = tcomp.op(source())
    k = tcomp.build(fp8_schedule(o, GemmConfig(bm=64, consumers=1, bn=64, stages=4)),
                    target="sim")
    A, B, sa, sb = fp8_data(72, 64, K, seed=K)
    np.testing.assert_allclose(np.asarray(k(A, B, sa, sb), np.float64),
                               reference(A, B, sa, sb), rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("config", [GemmConfig(bm=128, bn=128, stages=3, pingpong=True),
                                    GemmConfig(bm=64, bn=64, stages=2, persistent=False,
                                               consumers=1)])
def test_sim_pingpong_and_one_block_per_tile(config):
    o = tcomp.op(source())
    sizes = {"M": 200, "N": 264, "K": 400}
    k = tcomp.build(fp8_schedule(o, config), target="sim", sizes=sizes)
    A, B, sa, sb = fp8_data(200, 264, 400, seed=5)
    np.testing.assert_allclose(np.asarray(k(A, B, sa, sb), np.float64),
                               reference(A, B, sa, sb), rtol=2 ** -7, atol=1e-2)


def test_schedule_picks_the_k_tile_and_the_k32_wgmma():
    s = hopper_schedule(plain("float8_e4m3fn", "float8_e4m3fn"))
    assert [d for d in s.to_json().split('"') if d.startswith("wgmma")] == ["wgmma_m64n256k32"]
    text = str(tcomp.lower(s, sizes={"M": 256, "N": 256, "K": 256}))
    assert ("tile 128x256x128, 4-slot TMA ring, 1 producer (40 regs) + 2 consumer warpgroups "
            "(232 regs), wgmma m64n256k32 float8_e4m3fn, A K-major, B K-major") in text
    assert "alloc shared float8_e4m3fn A_s[4, 128, 128] swizzle(128)" in text
    assert "mbarrier_expect_tx(&full[slot], 49152)" in text  # (128 + 256) rows of 128 bytes
    mixed = str(tcomp.lower(hopper_schedule(plain("float8_e5m2", "float8_e4m3fn"))))
    assert "wgmma m64n256k32 float8_e5m2 x float8_e4m3fn" in mixed
    assert "wgmma_m64n256k32_e5m2_e4m3(" in mixed
    assert "alloc shared float8_e4m3fn B_s[4, 256, 128]" in mixed


def test_golden_ir(update_golden):
    o = tcomp.op(source())
    prog = tcomp.lower(fp8_schedule(o, GemmConfig(bn=128, stages=4)),
                       sizes={"M": 256, "N": 256, "K": 256})
    check_golden(GOLDEN / "gemm_fp8_sm90.txt", str(prog), update_golden)


def test_cuda_prints_the_fp8_wgmma_and_byte_tensor_maps():
    o = tcomp.op(source("float8_e4m3fn", "float8_e5m2"))
    k = tcomp.build(fp8_schedule(o), target="cuda", sizes={"M": 1024, "N": 1024, "K": 1024})
    src = k.source
    assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e5m2 " in src
    assert "p, 1, 1;" in src  # (8-bit types: no transpose operands)
    assert "__nv_bfloat16" in src and "#include <cuda_fp8.h>" in src
    maps = [p["tensor_map"] for p in k.meta["kernels"][0]["params"] if "tensor_map" in p]
    assert [(m["buffer"], m["dtype"], m["box"]) for m in maps] == [
        ("A", "float8_e4m3fn", [128, 128]), ("B", "float8_e5m2", [256, 128]),
        ("D", "bfloat16", [64, 64])]
    assert len(k.cubin) > 0


def test_sass_has_qgmma_e4m3():
    """The 8-bit warpgroup MMA (QGMMA) on E4M3 operands, TMA loads and stores, no
    spills (cuobjdump from the nvidia pip wheels; skipped without it)."""
    import subprocess
    import tempfile
    from tests.target_cuda.test_tc_epilogue_cuda import _cuobjdump, _sass
    o = tcomp.op(source())
    k = tcomp.build(fp8_schedule(o), target="cuda", sizes={"M": 8192, "N": 8192, "K": 8192})
    usage, ops = _sass(k.cubin)  # (skips without cuobjdump)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.cubin)
        f.flush()
        code = subprocess.run([_cuobjdump(), "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout
    assert code.count("QGMMA.64x256x32.F32.E4M3.E4M3") >= 4  # (4 k32 steps a slot)
    assert "HGMMA" not in code
    assert "UTMALDG.2D" in ops and "UTMASTG.2D" in ops
    assert usage.get("LOCAL", 0) == 0  # no spills


def test_json_round_trip_and_export_load_of_the_fp8_kernel(tmp_path):
    """The schedule replays from JSON to the same program; the exported kernel's
    sidecar carries the fp8 input types and loads back (no GPU needed to load)."""
    o = tcomp.op(source("float8_e5m2", "float8_e4m3fn"))
    s = fp8_schedule(o)
    again = tcomp.Schedule.from_json(o, s.to_json())
    assert str(tcomp.lower(again)) == str(tcomp.lower(s))
    k = tcomp.build(s, target="cuda", sizes={"M": 512, "N": 512, "K": 512})
    k.export(str(tmp_path / "g.cubin"))
    k2 = tcomp.load(str(tmp_path / "g.cubin"))
    assert [(i["name"], i["dtype"]) for i in k2.meta["inputs"]] == [
        ("A", "float8_e5m2"), ("B", "float8_e4m3fn"), ("sa", "float32"), ("sb", "float32")]
