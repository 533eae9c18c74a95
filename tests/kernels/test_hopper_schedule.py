"""The Hopper path from a schedule on the CPU (issue 24): the sim runs every
layout and type at awkward sizes against `tcomp.evaluate`; the plan in the
dump; JSON round trip; NVRTC compiles each variant; lowering stays fast."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule

from .hopper_ops import LAYOUTS, data, op, reference

SMALL = GemmConfig(bm=128, bn=64, consumers=2, stages=2)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype,out", [("bfloat16", None), ("float16", "float")])
def test_sim_matches_evaluate(layout, dtype, out):
    o = op(layout, dtype, out)
    sizes = {"M": 136, "N": 72, "K": 80}  # partial tiles in M and N, a K tail of 16
    k = tcomp.build(hopper_schedule(o, SMALL), target="sim", sizes=sizes)
    A, B = data(layout, 136, 72, 80, dtype)
    got = np.asarray(k(A, B)).astype(np.float64)
    want = np.asarray(tcomp.evaluate(o, A, B)).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-3)
    np.testing.assert_allclose(want, reference(layout, A, B), rtol=2 ** -7, atol=0.1)


def test_sim_k_zero_and_k_shorter_than_the_ring():
    o = op("NN")
    k = tcomp.build(hopper_schedule(o, GemmConfig(bm=64, consumers=1, bn=64, stages=4)),
                    target="sim")
    for K in (0, 8):
        A, B = data("NN", 64, 64, K)
        np.testing.assert_allclose(np.asarray(k(A, B)).astype(np.float64),
                                   reference("NN", A, B), rtol=2 ** -7, atol=1e-3)


def test_plan_in_the_dump_and_only_flatten_runs():
    prog = tcomp.lower(hopper_schedule(op("TN")), sizes={"M": 256, "N": 256, "K": 128})
    text = str(prog)
    assert ("# plan: hopper_gemm: tile 128x256x64, 4-slot TMA ring, 1 producer (40 regs) + 2 "
            "consumer warpgroups (232 regs), wgmma m64n256k16 bfloat16, A MN-major, B MN-major, "
            "persistent over the SMs, group_m=8, TMA-store epilogue (bfloat16)") in text
    # MN-major tiles: blocks of 64 columns, loaded box by box, read transposed
    assert "alloc shared bfloat16 A_s[4, 2, 64, 64] swizzle(128)" in text
    assert "tensor_map(B, box=[64, 64], swizzle=128)" in text
    assert ", 1, 1)" in text.split("wgmma_m64n256k16_bf16(")[1].split("\n")[0]
    assert "barrier()" not in text.split("specialize")[1]  # no block barrier inside a role


def test_json_round_trip_lowers_to_the_same_program():
    s = hopper_schedule(op("NT"))
    again = tcomp.Schedule.from_json(op("NT"), s.to_json())
    assert str(tcomp.lower(again)) == str(tcomp.lower(s))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_cuda_compiles_each_layout(layout):
    k = tcomp.build(hopper_schedule(op(layout)), target="cuda",
                    sizes={"M": 512, "N": 512, "K": 512})
    trans = {"NN": "0, 1", "NT": "0, 0", "TN": "1, 1", "TT": "1, 0"}[layout]
    assert f"p, 1, 1, {trans};" in k.source
    assert len(k.cubin) > 0


def test_non_persistent_grid():
    s = tcomp.Schedule(op("NT"))
    C = s["C"]
    m, n = C.axes
    (kx,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 64, 64)
    w, mw = C.split(mi, 64)
    ko, ki = C.split(kx, 64)
    C.reorder(mo, no, ko, w, mw, ni, ki)
    for t in ("A", "B"):
        c = s.cache_read(t, "shared", [C])
        c.compute_at(C, ko)
        c.tma()
    C.pipeline(ko, 3)
    C.warp_specialize(w, 40, 232)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.tensorize(mw, "wgmma_m64n64k16")
    prog = tcomp.lower(s, sizes={"M": 100, "N": 72, "K": 64})
    assert "one block per tile" in str(prog)
    k = tcomp.build(s, target="sim", sizes={"M": 100, "N": 72, "K": 64})
    A, B = data("NT", 100, 72, 64)
    np.testing.assert_allclose(np.asarray(k(A, B)).astype(np.float64), reference("NT", A, B),
                               rtol=2 ** -7, atol=1e-3)


BIAS_GELU = """def gbg(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D) {
  T(m, n) +=! float(A(m, k)) * float(B(k, n))
  D(m, n) = bfloat16(0.5 * x * (1.0 + erf(x * 0.70710678118654752))) where x = T(m, n) + bias(n)
}"""
RESIDUAL = """def res(bfloat16(M,K) A, bfloat16(N,K) B, bfloat16(M,N) R) -> (float(M, N) D) {
  T(m, n) +=! A(m, k) * B(n, k)
  D(m, n) = max(T(m, n), 0.0) + float(R(m, n))
}"""


@pytest.mark.parametrize("src,layout", [(BIAS_GELU, "NN"), (RESIDUAL, "NT")])
def test_sim_fused_epilogue(src, layout):
    o = tcomp.op(src)
    s = hopper_schedule(o, SMALL, stage="T")
    s["T"].epilogue(s["D"])
    sizes = {"M": 136, "N": 72, "K": 80}
    text = str(tcomp.lower(s, sizes=sizes))
    assert "TMA-store epilogue" in text and "computed from the accumulators and " in text
    assert "buffer temp" not in text  # T lives in the accumulators only
    k = tcomp.build(s, target="sim", sizes=sizes)
    A, B = data(layout, 136, 72, 80)
    rng = np.random.default_rng(3)
    extra = (rng.standard_normal(72).astype(np.float32) if "bias" in src else
             rng.standard_normal((136, 72)).astype(A.dtype))
    got = np.asarray(k(A, B, extra)).astype(np.float64)
    want = np.asarray(tcomp.evaluate(o, A, B, extra)).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-2)
    again = tcomp.Schedule.from_json(o, s.to_json())
    assert str(tcomp.lower(again, sizes=sizes)) == text


@pytest.mark.parametrize("layout", ["NN", "TT"])
@pytest.mark.parametrize("config", [GemmConfig(bm=128, bn=128, stages=3, pingpong=True),
                                    GemmConfig(bm=64, bn=256, stages=2, pingpong=True)])
def test_sim_pingpong(layout, config):
    """Two consumers taking whole tiles in turn: an odd number of tiles per
    block (the sim runs 3 multiprocessors), partial tiles, a K tail."""
    o = op(layout)
    s = hopper_schedule(o, config)
    sizes = {"M": 200, "N": 264, "K": 80}
    text = str(tcomp.lower(s, sizes=sizes))
    assert "ping-ponging on tiles" in text
    k = tcomp.build(s, target="sim", sizes=sizes)
    A, B = data(layout, 200, 264, 80, seed=6)
    np.testing.assert_allclose(np.asarray(k(A, B)).astype(np.float64), reference(layout, A, B),
                               rtol=2 ** -7, atol=1e-3)


def test_sim_pingpong_consumers_take_turns():
    """K of 6 slots on a ring of 2: without the consumers' turn barriers the
    second consumer waits on ring phases a tile ahead, where the parity it
    waits for names an earlier phase, and reads another tile's operands."""
    o = op("NN")
    s = hopper_schedule(o, GemmConfig(bm=64, bn=128, stages=2, pingpong=True))
    sizes = {"M": 256, "N": 256, "K": 384}
    assert "mbarrier_wait(&turn[" in str(tcomp.lower(s, sizes=sizes))
    k = tcomp.build(s, target="sim", sizes=sizes)
    A, B = data("NN", 256, 256, 384, seed=8)
    np.testing.assert_allclose(np.asarray(k(A, B)).astype(np.float64), reference("NN", A, B),
                               rtol=2 ** -7, atol=1e-3)


def test_sim_pingpong_fused_epilogue_and_k_zero():
    o = tcomp.op(BIAS_GELU)
    s = hopper_schedule(o, GemmConfig(bm=128, bn=128, stages=2, pingpong=True), stage="T")
    s["T"].epilogue(s["D"])
    k = tcomp.build(s, target="sim")
    rng = np.random.default_rng(7)
    for K in (72, 0):
        A, B = data("NN", 136, 200, K, seed=K)
        bias = rng.standard_normal(200).astype(np.float32)
        np.testing.assert_allclose(np.asarray(k(A, B, bias)).astype(np.float64),
                                   np.asarray(tcomp.evaluate(o, A, B, bias)).astype(np.float64),
                                   rtol=2 ** -7, atol=1e-2)


BATCHED = {  # name -> (signature, product, reference)
    "bmm_nn": ("bfloat16(Z,M,K) A, bfloat16(Z,K,N) B", "A(z, m, k) * B(z, k, n)",
               lambda A, B: A @ B),
    "shared_nt": ("bfloat16(Z,M,K) A, bfloat16(N,K) B", "A(z, m, k) * B(n, k)",
                  lambda A, B: A @ B.T),
    "tt": ("bfloat16(Z,K,M) A, bfloat16(Z,N,K) B", "A(z, k, m) * B(z, n, k)",
           lambda A, B: np.swapaxes(A, 1, 2) @ np.swapaxes(B, 1, 2)),
}


def batched(name):
    sig, prod, ref = BATCHED[name]
    o = tcomp.op(f"def {name}({sig}) -> (C) {{ C(z, m, n) +=! {prod} }}")
    return o, ref


def batched_data(o, sizes, seed=0):
    import ml_dtypes
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(int(sizes[d.name]) for d in t.shape))
            .astype(ml_dtypes.bfloat16) for t in o.inputs]


@pytest.mark.parametrize("name", list(BATCHED))
@pytest.mark.parametrize("config", [GemmConfig(bm=128, bn=64, stages=2),
                                    GemmConfig(bm=64, bn=128, stages=2, pingpong=True)])
def test_sim_batched(name, config):
    """One batch axis: 3-D TMA boxes of one matrix, an operand shared by the
    batch as a 2-D one; tiles of every matrix walked together (partial
    tiles, tiles of two matrices on one multiprocessor)."""
    o, ref = batched(name)
    s = hopper_schedule(o, config)
    sizes = {"Z": 3, "M": 72, "N": 80, "K": 80}
    assert "a batch of 3 products" in str(tcomp.lower(s, sizes=sizes))
    A, B = batched_data(o, sizes)
    got = np.asarray(tcomp.build(s, target="sim", sizes=sizes)(A, B)).astype(np.float64)
    want = ref(A.astype(np.float64), B.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max())


def test_the_sim_refuses_rows_the_tma_engine_cannot_move():
    """The sim runs the CUDA target's encoding check of each tensor map: A given as
    (K, M) with M = 37 has rows of 74 bytes (the mutation run's one real gap: without
    the check the sim ran the kernel silently)."""
    from .hopper_ops import data, op
    k = tcomp.build(hopper_schedule(op("TN")), target="sim")
    A, B = data("TN", 37, 72, 40)
    with pytest.raises(tcomp.SimError, match="a row of 'A' is 74 bytes"):
        k(A, B)
