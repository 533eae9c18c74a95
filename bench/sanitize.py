"""Run a few generated kernels (shared-memory tiles, cross-thread reductions,
vector accesses, memory accumulation) so that compute-sanitizer can check them:

    compute-sanitizer --tool memcheck python3 bench/sanitize.py
    compute-sanitizer --tool racecheck python3 bench/sanitize.py [tensor_core_kernels ...]
"""
import os
import sys

import numpy as np

import tcomp

sys.path.insert(0, os.path.dirname(__file__))
import schedules as S  # noqa: E402


def mm_shared(op):
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 16, 16)
    ko, ki = C.split(k, 16)
    C.reorder(mo, no, ko, mi, ni, ki)
    for ax, tag in ((mo, "blockIdx.x"), (no, "blockIdx.y"), (mi, "threadIdx.y"), (ni, "threadIdx.x")):
        C.bind(ax, tag)
    for t in ("A", "B"):
        S = s.cache_read(t, "shared", [C])
        S.compute_at(C, ko)
        a0, a1 = S.axes
        S.bind(a0, "threadIdx.y")
        S.bind(a1, "threadIdx.x")
    return s


def mm_pipelined(op):
    s = mm_shared(op)
    C = s["C"]
    C.pipeline(C.leaf_axes[2])
    return s


def row_sum(op, threads=256):
    s = tcomp.Schedule(op)
    O = s["O"]
    (n,) = O.axes
    (k,) = O.reduce_axes
    ko, ki = O.split(k, threads)
    O.reorder(n, ki, ko)
    O.bind(n, "blockIdx.x")
    O.bind(ki, "threadIdx.x")
    return s


def vec(op):
    s = tcomp.Schedule(op)
    O = s["O"]
    (i,) = O.axes
    io, ii = O.split(i, 4)
    O.vectorize(ii)
    ioo, ioi = O.split(io, 128)
    O.bind(ioo, "blockIdx.x")
    O.bind(ioi, "threadIdx.x")
    return s


def main():
    rng = np.random.default_rng(0)
    mm = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
    a, b = rng.standard_normal((100, 70), np.float32), rng.standard_normal((70, 90), np.float32)
    got = tcomp.build(mm_shared(mm), target="cuda")(a, b)
    print("mm_shared", np.abs(got - a.astype(np.float64) @ b).max())
    got = tcomp.build(mm_pipelined(mm), target="cuda")(a, b)
    print("mm_pipelined", np.abs(got - a.astype(np.float64) @ b).max())
    sm = tcomp.op("""def softmax(float(N, D) X) -> (O) {
      mx(n) max=! X(n, d)
      sm(n) +=! exp(X(n, d) - mx(n))
      O(n, d) = exp(X(n, d) - mx(n)) / sm(n)
    }""")
    s = tcomp.Schedule(sm)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    do, di = O.split(d, 128)
    O.bind(di, "threadIdx.x")
    for t in ("mx", "sm"):
        s[t].compute_at(O, n)
        (r,) = s[t].reduce_axes
        ro, ri = s[t].split(r, 128)
        s[t].reorder(ri, ro)
        s[t].bind(ri, "threadIdx.x")
        s[t].set_scope("local")
    x = rng.standard_normal((37, 1000)).astype(np.float32)
    got = tcomp.build(s, target="cuda")(x)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    print("softmax", np.abs(got - e / e.sum(1, keepdims=True)).max())
    rs = tcomp.op("def rs(float(N,K) A) -> (O) { O(n) +=! A(n,k) }")
    x = rng.standard_normal((33, 1000), np.float32)
    for t in (32, 256):
        got = tcomp.build(row_sum(rs, t), target="cuda")(x)
        print(f"row_sum[{t}]", np.abs(got - x.astype(np.float64).sum(1)).max())
    ew = tcomp.op("def ew(float(N) A, float(N) B) -> (O) { O(i) = A(i) * 2.0 + B(i) }")
    x, y = rng.standard_normal(4096, np.float32), rng.standard_normal(4096, np.float32)
    got = tcomp.build(vec(ew), target="cuda", sizes={"N": 4096})(x, y)
    print("vector", np.abs(got - (2 * x + y)).max())
    # the benchmark schedules: the fastest GEMM (k-major padded A tile, float4 fragments,
    # warp-shaped lanes, double buffering, rasterized blocks), aligned and awkward
    for v in ("frag+warp+pad+pipe+g8", "shared+warp+pad+g8", "frag+scalar"):
        op, s = S.gemm({}, **S.gemm_variant(v))
        for m, n, k in ((256, 256, 64), (257, 131, 37)):
            a = rng.standard_normal((m, k), np.float32)
            b = rng.standard_normal((k, n), np.float32)
            got = tcomp.build(s, target="cuda", sizes={"M": m, "N": n, "K": k})(a, b)
            print(f"gemm[{v}] {m}x{n}x{k}", np.abs(got - a.astype(np.float64) @ b).max())
    # the vectorized row ops (softmax with the reciprocal), aligned and awkward rows
    for kind, v in (("softmax", "vec4+rcp"), ("layernorm", "vec4")):
        op, s = getattr(S, kind)({}, threads=256, **S.row_variant(v))
        for n, d in ((3, 4096), (5, 1031)):
            args = [rng.standard_normal((n, d), np.float32)]
            if kind == "layernorm":
                args += [rng.standard_normal(d, np.float32), rng.standard_normal(d, np.float32)]
            got = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})(*args)
            ref = tcomp.evaluate(op, *args)
            print(f"{kind}[{v}] {n}x{d}", np.abs(got - ref).max())


def new_kernels():
    """The kernels issue 9 added: in-place snapshots (threads and blocks), a
    runtime block size, all-reduces over counts that are not powers of two (and
    a runtime count), a float16 reduction rounded once on store."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.lower.test_inplace import A7, HOWS, SHIFT_WANT, shift_schedule
    from tests.lower.test_runtime_launch import CONV, conv_rows_on_threads
    from tests.lower.util import inputs_for
    from tests.target_cuda.test_allreduce import check, make, row_reduction, data
    for how in HOWS:
        sizes = {"N": 7} if how == "threads" else None
        got = tcomp.build(shift_schedule(how), target="cuda", sizes=sizes)(A7)
        assert (np.asarray(got) == SHIFT_WANT).all(), (how, got)
        print(f"in-place[{how}] ok")
    k = tcomp.build(conv_rows_on_threads(4), target="cuda")
    for h, w in ((5, 5), (40, 9)):
        args = inputs_for(CONV, {"N": 2, "C": 3, "H": h, "W": w, "K": 4, "KH": 3, "KW": 2})
        np.testing.assert_allclose(k(*args), tcomp.evaluate(CONV, *args), rtol=1e-4, atol=1e-4)
        print(f"runtime block conv H={h} ok")
    for n in (3, 24, 100, 1000):
        s, a = make(("rowred", ("+", "float32"), None, n))
        check(s.op, tcomp.build(s, target="cuda")(a), tcomp.evaluate(s.op, a))
        print(f"allreduce[{n}] ok")
    s = row_reduction("def rm(float(M,N) A) -> (O) { O(i) max=! A(i, j) }", None)
    k = tcomp.build(s, target="cuda")
    for n in (1, 77, 1024):
        a = data(s.op, 5, n)
        assert (k(a) == tcomp.evaluate(s.op, a)).all()
        print(f"allreduce[runtime {n}] ok")
    hs = tcomp.op("def hs(float16(M, N) A) -> (O) { O(i) +=! A(i, j) }")
    s = tcomp.Schedule(hs)
    i, = s["O"].axes
    j, = s["O"].reduce_axes
    jo, ji = s["O"].split(j, 96)
    s["O"].reorder(i, ji, jo)
    s["O"].bind(i, "blockIdx.x")
    s["O"].bind(ji, "threadIdx.x")
    a = np.random.default_rng(1).standard_normal((7, 1000)).astype(np.float16)
    got = tcomp.build(s, target="cuda")(a)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64).sum(1), rtol=2e-3,
                               atol=2e-2)
    print("fp16 cross-thread sum ok")


def tensor_core_kernels():
    """The tensor-core GEMMs (issue 12): ldmatrix + mma.sync, padded or swizzled tiles,
    register double buffering, cp.async rings of 3 and 4 stages; bf16 and fp16;
    aligned and awkward sizes (zero-filled tiles); the fused bias + GELU epilogue."""
    rng = np.random.default_rng(2)
    for dt, kw in (("bfloat16", dict(bm=64, bn=64, wm=32, wn=32, bk=32)),
                   ("float16", dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=True)),
                   ("bfloat16", dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3)),
                   ("bfloat16", dict(bm=128, bn=128, wm=64, wn=32, bk=32, pipeline=4)),
                   # XOR-swizzled tiles (Stage.swizzle) instead of padded rows
                   ("bfloat16", dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3,
                                     swizzle=True)),
                   ("float16", dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=True,
                                    swizzle=True)),
                   # paired epilogue stores (bf16x2) and fragments double-buffered across
                   # the k16 steps (N = 136 even: pairs; the float32-output case below: float2)
                   ("bfloat16", dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3,
                                     swizzle=True, pair_stores=True, fragment_pipeline=2)),
                   ("float16", dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=True,
                                    pair_stores=True, fragment_pipeline=2)),
                   # the epilogue through shared memory: fragments -> a staging tile
                   # (swizzled / padded), a barrier, 16-byte copies out (N = 136: vectors
                   # only where a row's pieces stay aligned, element copies at N = 300)
                   ("bfloat16", dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3,
                                     swizzle=True, pair_stores=True, smem_epilogue=True)),
                   ("float16", dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=4,
                                    smem_epilogue=True))):
        op = tcomp.op(S.TC_GEMM.replace("bfloat16", dt))
        op, s = S.tc_gemm(op, **kw)
        npdt = tcomp.lang.dtypes.BY_NAME[dt].numpy
        for sizes in ({"M": 256, "N": 256, "K": 256}, {"M": 300, "N": 136, "K": 200}):
            check_tc(s, npdt, sizes, rng, dt, kw)
    op, s = S.tc_gemm(tcomp.op(S.TC_GEMM_GELU), bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3)
    sizes = {"M": 300, "N": 136, "K": 200}
    a = rng.standard_normal((300, 200)).astype(tcomp.lang.dtypes.bfloat16.numpy)
    b = rng.standard_normal((200, 136)).astype(tcomp.lang.dtypes.bfloat16.numpy)
    bias = rng.standard_normal(136).astype(np.float32)
    got = tcomp.build(s, target="cuda", sizes=sizes)(a, b, bias).astype(np.float64)
    want = tcomp.evaluate(op, a, b, bias).astype(np.float64)
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
    print("tensor cores fused bias + GELU ok")
    # the fused epilogue with paired stores (a float2 bias load, a bf16x2 store), and an
    # odd N (pairs fall back to element stores under the column guard)
    for sizes in ({"M": 300, "N": 136, "K": 200}, {"M": 129, "N": 135, "K": 72}):
        op, s = S.tc_gemm(tcomp.op(S.TC_GEMM_GELU), bm=128, bn=128, wm=64, wn=64, bk=64,
                          pipeline=3, swizzle=True, pair_stores=True, fragment_pipeline=2)
        a = rng.standard_normal((sizes["M"], sizes["K"])).astype(tcomp.lang.dtypes.bfloat16.numpy)
        b = rng.standard_normal((sizes["K"], sizes["N"])).astype(tcomp.lang.dtypes.bfloat16.numpy)
        bias = rng.standard_normal(sizes["N"]).astype(np.float32)
        got = tcomp.build(s, target="cuda", sizes=sizes)(a, b, bias).astype(np.float64)
        want = tcomp.evaluate(op, a, b, bias).astype(np.float64)
        assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
        print(f"tensor cores fused bias + GELU, paired stores {sizes} ok")
    # the fused epilogue computed from the fragments into the staging tile, copied out in
    # 16-byte vectors (N = 136) and element by element (N = 135)
    for sizes in ({"M": 300, "N": 136, "K": 200}, {"M": 129, "N": 135, "K": 72}):
        op, s = S.tc_gemm(tcomp.op(S.TC_GEMM_GELU), bm=128, bn=128, wm=64, wn=64, bk=32,
                          pipeline=4, swizzle=True, pair_stores=True, smem_epilogue=True)
        a = rng.standard_normal((sizes["M"], sizes["K"])).astype(tcomp.lang.dtypes.bfloat16.numpy)
        b = rng.standard_normal((sizes["K"], sizes["N"])).astype(tcomp.lang.dtypes.bfloat16.numpy)
        bias = rng.standard_normal(sizes["N"]).astype(np.float32)
        got = tcomp.build(s, target="cuda", sizes=sizes)(a, b, bias).astype(np.float64)
        want = tcomp.evaluate(op, a, b, bias).astype(np.float64)
        assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
        print(f"tensor cores fused bias + GELU through shared memory {sizes} ok")
    # a float32 output: each pair is one 64-bit (float2) store
    op = tcomp.op(S.TC_GEMM_F32_OUT)
    op, s = S.tc_gemm(op, bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3, pair_stores=True)
    for sizes in ({"M": 128, "N": 96, "K": 64}, {"M": 70, "N": 33, "K": 40}):
        check_tc(s, tcomp.lang.dtypes.bfloat16.numpy, sizes, rng, "bfloat16 -> float32",
                 "pair_stores")
    # conv2d over an im2col stage: cp.async gathers with zero-fill (C % 8 == 0), ring
    # stores of gathered pieces (C = 12), awkward H, W, N H W and K
    for (n, h, w, c, kf), kw in (((2, 9, 7, 32, 40), dict(bm=64, bn=64, wm=32, wn=32, bk=32,
                                                           pipeline=3)),
                                 ((2, 5, 7, 12, 24), dict(bm=64, bn=64, wm=32, wn=32, bk=32,
                                                          pipeline=4)),
                                 ((1, 6, 5, 16, 24), dict(bm=64, bn=64, wm=32, wn=32, bk=32,
                                                          pipeline=True)),
                                 ((2, 9, 7, 32, 40), dict(bm=64, bn=64, wm=32, wn=32, bk=32,
                                                          pipeline=3, swizzle=True))):
        op, s = S.tc_conv2d(**kw)
        x = rng.standard_normal((n, h, w, c)).astype(np.float16)
        wt = rng.standard_normal((9 * c, kf)).astype(np.float16)
        sizes = {"N": n, "H": h, "W": w, "C": c, "K": kf, "R": 9 * c}
        got = tcomp.build(s, target="cuda", sizes=sizes)(x, wt).astype(np.float64)
        want = tcomp.evaluate(op, x, wt).astype(np.float64)
        assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
        print(f"tensor cores conv2d {sizes} {kw} ok")


def check_tc(s, npdt, sizes, rng, dt, kw):
    a = rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt)
    b = rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt)
    got = tcomp.build(s, target="cuda", sizes=sizes)(a, b).astype(np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-2, (dt, kw, err)
    print(f"tensor cores {dt} {kw} {sizes}: rel err {err:.1e} ok")


def row_kernels():
    """The register-row kernels of issue 14 (bench/row_schedules.py): rows in
    registers over the block, float32 and bfloat16, aligned and awkward row
    lengths (tails inside a thread's slices), the fused add + layernorm with
    two outputs, the chunked cross-entropy (gather of the target's logit),
    row-sum and the elementwise chain."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import row_schedules as R
    from tests.lower.util import assert_matches, inputs_for
    for kind in sorted(R.ROW_KINDS):
        for dt in R.DTYPES:
            for n, d, t in ((3, 4096, None), (2, 1000, 64), (2, 4099, 128), (3, 257, 32)):
                op, s = R.ROW_KINDS[kind](d, dt, t)
                args = inputs_for(op, {"N": n, "D": d}, seed=d)
                got = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})(*args)
                assert_matches(op, got, tcomp.evaluate(op, *args))
                print(f"rows {kind} {dt} {n}x{d} ok")
    for v, chunk, t in ((3000, 1024, 64), (128256, 16384, 1024), (257, 512, 32)):
        op, s = R.cross_entropy(chunk, t)
        args = inputs_for(op, {"N": 3, "V": v}, seed=v, ints={"T": v})
        got = tcomp.build(s, target="cuda", sizes={"N": 3, "V": v})(*args)
        assert_matches(op, got, tcomp.evaluate(op, *args))
        print(f"rows cross_entropy V={v} ok")
    for d in (4096, 1000):
        op, s = R.rowsum(d, 64)
        args = inputs_for(op, {"N": 3, "D": d}, seed=d)
        assert_matches(op, tcomp.build(s, target="cuda", sizes={"N": 3, "D": d})(*args),
                       tcomp.evaluate(op, *args))
        print(f"rows rowsum {d} ok")
    for dt in R.DTYPES:
        for n in (8192, 4099):
            op, s = R.chain(dt, threads=64)
            args = inputs_for(op, {"N": n}, seed=n, scalars={"w": 0.75, "b": -0.25})
            assert_matches(op, tcomp.build(s, target="cuda", sizes={"N": n})(*args),
                           tcomp.evaluate(op, *args))
            print(f"rows chain {dt} {n} ok")
    # issue 14's variants: exp2 softmax, weights in shared memory, the
    # one-kernel cross-entropy, the 16-byte-load transpose
    for dt in R.DTYPES:
        for n, d, t in ((3, 32768, None), (2, 1000, 64), (3, 257, 32)):
            builds = [R.softmax(d, dt, t, exp2=True), R.rmsnorm(d, dt, t, shared_weights=True)]
            if dt == "bfloat16" or d < 32768:
                builds.append(R.layernorm(d, dt, t, shared_weights=True))
            for op, s in builds:
                args = inputs_for(op, {"N": n, "D": d}, seed=d)
                got = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})(*args)
                assert_matches(op, got, tcomp.evaluate(op, *args))
                print(f"rows {op.name} variant {dt} {n}x{d} ok")
    for v, t, p in ((128256, 512, 32), (128256, 1024, 32), (3000, 64, 16), (257, 32, 8)):
        op, s = R.cross_entropy_one_kernel(t, p)
        args = inputs_for(op, {"N": 3, "V": v}, seed=v, ints={"T": v})
        got = tcomp.build(s, target="cuda", sizes={"N": 3, "V": v})(*args)
        assert_matches(op, got, tcomp.evaluate(op, *args))
        print(f"rows cross_entropy one kernel V={v} {t}x{p} ok")
    for m, n in ((8192, 8192), (70, 130)):
        op, s = R.transpose_vec(64, 16, 4)
        args = inputs_for(op, {"M": m, "N": n}, seed=m)
        assert_matches(op, tcomp.build(s, target="cuda", sizes={"M": m, "N": n})(*args),
                       tcomp.evaluate(op, *args))
        print(f"rows transpose_vec {m}x{n} ok")


def row_kernels_2():
    """The later row schedules of issue 14: the streamed row (row_streamed),
    the shared row (bench/schedules.py), and persistent blocks prefetching
    their rows into a shared ring (row_pipelined, stages 2 and 3), on wide,
    awkward (not a multiple of the vector width) and ragged block-row counts."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import row_schedules as R
    import rows
    from tests.lower.util import assert_matches, inputs_for

    def check(what, op, s, sizes):
        args = inputs_for(op, sizes, seed=sum(sizes.values()))
        got = tcomp.build(s, target="cuda", sizes=sizes)(*args)
        assert_matches(op, got, tcomp.evaluate(op, *args))
        print(f"rows {what} {sizes} ok")
    for n, d, t in ((3, 32768, 512), (2, 1000, 64), (3, 257, 32)):
        for kind in ("layernorm", "rmsnorm"):
            check(f"{kind} streamed", *rows._streamed(kind, d, "bfloat16", t, 4),
                  {"N": n, "D": d})
    for kind in ("softmax", "layernorm", "rmsnorm"):
        for d, t in ((32768, 512), (1000, 64)):
            op, s = rows._shared_row(kind, "bfloat16", t, 4)
            check(f"{kind} shared row", op, s, {"N": 3, "D": d})
    for kind in ("softmax", "layernorm", "rmsnorm"):
        for dt, n, d, rows_, t, stages in (("bfloat16", 7, 32768, 3, 512, 3),
                                           ("bfloat16", 7, 32768, 2, 1024, 2),
                                           ("float32", 9, 4096, 4, 256, 3),
                                           ("bfloat16", 5, 1000, 2, 64, 3),
                                           ("float32", 5, 257, 3, 32, 2)):
            op, s = R.pipelined(kind, n, dt, rows_, t, stages)
            check(f"{kind} pipelined {dt} {rows_} rows {t}t stages {stages}", op, s,
                  {"N": n, "D": d})
    for kind in ("layernorm", "rmsnorm"):
        op, s = R.pipelined(kind, 7, "bfloat16", 3, 512, 3, x_regs=True)
        check(f"{kind} pipelined, x in registers", op, s, {"N": 7, "D": 32768})
    for n, d, rows_, t, stages in ((9, 8192, 4, 512, 3), (5, 1000, 2, 64, 2)):
        op, s = R.pipelined("add_layernorm", n, "bfloat16", rows_, t, stages)
        check(f"add_layernorm pipelined {rows_} rows {t}t stages {stages}", op, s,
              {"N": n, "D": d})


if __name__ == "__main__":
    # `python3 bench/sanitize.py [GROUP ...]`: only those groups (default: all)
    groups = {"main": main, "new_kernels": new_kernels,
              "tensor_core_kernels": tensor_core_kernels, "row_kernels": row_kernels,
              "row_kernels_2": row_kernels_2}
    for name in sys.argv[1:] or list(groups):
        if name not in groups:
            sys.exit(f"sanitize.py: unknown group {name!r} (groups: {', '.join(groups)})")
        groups[name]()
