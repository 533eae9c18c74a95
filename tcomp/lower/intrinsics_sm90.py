"""The Hopper (sm_90a) intrinsics: barrier objects (mbarriers), the tensor
memory accelerator (TMA) and warpgroup MMA (wgmma). Entries of the one
registry (intrinsics.py); their CUDA in target_cuda/sm90_ops.py, their sim
rules in target_sim.

Barrier objects are buffers of scope "barrier" (one 8-byte mbarrier per
element, in shared memory). A phase completes when its expected arrivals
(the count given at init) have arrived and the transaction bytes announced
by `mbarrier_expect_tx` have been delivered by the TMA engine; waiters
name the phase by its parity (0, 1, 0, ...).

A TMA copy moves one box of a tensor map (ir.TensorMap: a kernel
parameter, named by `Var(map)`) between global memory and a shared tile;
coordinates are element offsets in the buffer's dimension order (outermost
first), a box past the buffer's end reads zeros and writes nothing. A load
completes on an mbarrier (complete_tx); stores complete by bulk groups.

wgmma multiplies a 64 x N x 16 tile on the four warps of a warpgroup: A
and B from shared memory (tiles of 128-byte rows in the 128-byte swizzle,
addressed by descriptors the target forms from the references): K-major
(rows along M or N, 64 K-elements each) or, where `trans_a` / `trans_b` is
1, MN-major (rows along K, 64 M- or N-elements each, in blocks of 64
columns: the buffer's dimension -3 counts the blocks),
accumulators in per-thread float32 registers (64 x N over 128 threads: the
layout of arch/fragments.py's wgmma accumulator), completing at
`wgmma_wait`.
"""
from __future__ import annotations

from ..lower.intrinsics import READ, READWRITE, WRITE, Intrinsic, Operand, register

_BAR = ("barrier",)
_I32 = ("int32",)
HOPPER = 90
WGMMA_N = (64, 128, 176, 256)  # (176: attention's key blocks, lower/hopper_attention.py)


def _entry(name, description, operands=(), effects=(), noun="", feature=None, instruction=""):
    """An entry needing machine-model `feature` (tcomp/arch/target.py): by
    default "mbarrier_tx" for the mbarrier entries (their shared::cta forms
    and transaction counts: sm_90), none for a named barrier (every GPU), else
    "tma" (sm_90); wgmma names "wgmma" (sm_90a only)."""
    if feature is None:
        feature = ("mbarrier_tx" if name.startswith(("mbarrier", "fence_mbarrier")) else
                   "" if name.startswith("named_barrier") else "tma")
    register(Intrinsic(name, description, operands=tuple(operands), effects=frozenset(effects),
                       noun=noun, feature=feature, instruction=instruction))


ARCH_SPECIFIC = "wgmma"  # the feature of wgmma: sm_90a only (not sm_90, not sm_100a)


_entry("mbarrier_init", "initialise an mbarrier to expect `count` arrivals per phase",
       [Operand("bar", ref=True, access=WRITE, scopes=_BAR), Operand("count", dtypes=_I32)],
       {"writes"}, noun="mbarrier init")
_entry("fence_mbarrier_init", "make initialised mbarriers visible to the async proxy and "
       "to other threads (before the barrier that follows the inits)", (), {"fence"})
_entry("mbarrier_arrive", "arrive on an mbarrier (one of the phase's expected arrivals)",
       [Operand("bar", ref=True, access=READWRITE, scopes=_BAR)], {"reads", "writes"})
_entry("mbarrier_expect_tx", "arrive on an mbarrier and announce `bytes` of TMA "
       "transactions the phase waits for (arrive.expect_tx)",
       [Operand("bar", ref=True, access=READWRITE, scopes=_BAR), Operand("bytes", dtypes=_I32)],
       {"reads", "writes"})
_entry("mbarrier_wait", "wait until the mbarrier's phase of parity `parity` completes",
       [Operand("bar", ref=True, access=READ, scopes=_BAR), Operand("parity", dtypes=_I32)],
       {"reads", "blocking"}, noun="mbarrier wait")
_entry("fence_proxy_async", "order this thread's shared-memory writes before later "
       "async-proxy (TMA, wgmma) accesses", (), {"fence"})
_entry("named_barrier", "wait until `count` threads (whole warps) reach barrier `id` "
       "(bar.sync id, count; id 0 is the block's __syncthreads)",
       [Operand("id", dtypes=_I32), Operand("count", dtypes=_I32)], {"blocking"})

_entry("named_barrier_arrive", "arrive at barrier `id` without waiting (bar.arrive id, count): "
       "the phase completes when `count` threads (whole warps) have arrived or waited",
       [Operand("id", dtypes=_I32), Operand("count", dtypes=_I32)], ())
_entry("tma_load_2d", "copy one box of a 2-D tensor map from global to shared memory; "
       "completes on the mbarrier with the box's bytes",
       [Operand("dst", ref=True, access=WRITE, scopes=("shared",)), Operand("map"),
        Operand("bar", ref=True, access=READWRITE, scopes=_BAR),
        Operand("c0", dtypes=_I32), Operand("c1", dtypes=_I32)],
       {"writes", "async", "async_proxy"}, noun="TMA load")
_entry("tma_store_2d", "copy a shared tile to one box of a 2-D tensor map in global memory "
       "(in a bulk group)",
       [Operand("map"), Operand("src", ref=True, access=READ, scopes=("shared",)),
        Operand("c0", dtypes=_I32), Operand("c1", dtypes=_I32)],
       {"reads", "async", "async_proxy"}, noun="TMA store")
_entry("tma_load_3d", "copy one box of a 3-D tensor map (one matrix of a batch: a box of 1 in "
       "the outermost dimension) from global to shared memory; completes on the mbarrier",
       [Operand("dst", ref=True, access=WRITE, scopes=("shared",)), Operand("map"),
        Operand("bar", ref=True, access=READWRITE, scopes=_BAR),
        Operand("c0", dtypes=_I32), Operand("c1", dtypes=_I32), Operand("c2", dtypes=_I32)],
       {"writes", "async", "async_proxy"}, noun="TMA load")
_entry("tma_load_im2col_4d", "copy the windows of an im2col tensor map (ir.Im2col) over an "
       "(N, H, W, C) buffer from global to shared memory: the box's pixels consecutive window "
       "starts from (n, h, w), channels c.., each pixel read at the start plus the filter "
       "offsets (off_h, off_w), zeros outside the buffer; completes on the mbarrier",
       [Operand("dst", ref=True, access=WRITE, scopes=("shared",)), Operand("map"),
        Operand("bar", ref=True, access=READWRITE, scopes=_BAR),
        Operand("n", dtypes=_I32), Operand("h", dtypes=_I32), Operand("w", dtypes=_I32),
        Operand("c", dtypes=_I32), Operand("off_h", dtypes=_I32), Operand("off_w", dtypes=_I32)],
       {"writes", "async", "async_proxy"}, noun="TMA load")
_entry("tma_store_3d", "copy a shared tile to one box of a 3-D tensor map (a box of 1 in the "
       "outermost dimension) in global memory (in a bulk group)",
       [Operand("map"), Operand("src", ref=True, access=READ, scopes=("shared",)),
        Operand("c0", dtypes=_I32), Operand("c1", dtypes=_I32), Operand("c2", dtypes=_I32)],
       {"reads", "async", "async_proxy"}, noun="TMA store")
_entry("tma_store_commit", "close this thread's group of TMA stores", (), {"async"})
_entry("tma_store_wait", "wait until all but the `n` newest groups of TMA stores have "
       "read their shared source", [Operand("n", dtypes=_I32)], {"async", "blocking"})

_entry("wgmma_fence", "order register and shared-memory accesses before the wgmma that "
       "follow (wgmma.fence)", (), {"fence", "warpgroup_collective"})
_entry("wgmma_commit", "close the warpgroup's group of issued wgmma", (),
       {"async", "warpgroup_collective"})
_entry("wgmma_wait", "wait until all but the `n` newest wgmma groups have completed",
       [Operand("n", dtypes=_I32)], {"async", "blocking", "warpgroup_collective"})
WGMMA_DTYPES = {"bf16": "bfloat16", "f16": "float16"}  # name suffix -> input dtype


def _wgmma_entry(n: int, sfx: str, registers_a: bool) -> None:
    """wgmma m64n{n}k16 on `sfx` inputs: A and B in shared memory, or (the "RS"
    form, `registers_a`) A as the warpgroup's 64 x 16 tile held as 8 16-bit
    values per thread from `a` on, in the layout of arch/fragments.py's
    WGMMA_A_K16 (the layout of a 16-column slice of the accumulators:
    attention's P = softmax(S) feeds P . V without leaving the registers)."""
    dt = WGMMA_DTYPES[sfx]
    where = ("A as 8 values per thread in the wgmma A-fragment layout, B in shared memory "
             "(128-byte swizzle), K-major or MN-major where trans_b is 1" if registers_a else
             "A and B tiles in shared memory (128-byte swizzle), K-major, or MN-major where "
             "trans_a / trans_b is 1; D in registers")
    trans = (Operand("trans_b", dtypes=_I32),) if registers_a else (
        Operand("trans_a", dtypes=_I32), Operand("trans_b", dtypes=_I32))
    _entry(f"wgmma{'_rs' if registers_a else ''}_m64n{n}k16_{sfx}",
           f"D(64x{n}, float32) = A(64x16, {dt}{', registers' if registers_a else ''}) . "
           f"B({n}x16, {dt})^T + scale_d * D; {where}",
           [Operand("d", ref=True, access=READWRITE, scopes=("local",), dtypes=("float32",)),
            Operand("a", ref=True, scopes=("local" if registers_a else "shared",), dtypes=(dt,)),
            Operand("b", ref=True, scopes=("shared",), dtypes=(dt,)),
            Operand("scale_d", dtypes=_I32), *trans],
           {"reads", "writes", "async", "async_proxy", "warpgroup_collective"},
           noun="wgmma", feature=ARCH_SPECIFIC, instruction=f"wgmma_m64n{n}k16")


for _registers_a in (False, True):
    for _sfx in WGMMA_DTYPES:
        for _n in WGMMA_N:
            _wgmma_entry(_n, _sfx, _registers_a)


# fp8 wgmma (m64nNk32): A and B K-major only (the PTX ISA's 8-bit wgmma has no transpose
# operands), e4m3 or e5m2 each; the name's suffix gives A's type, then B's where it differs
WGMMA_FP8 = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
_PTX_OF = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def wgmma_intrinsic(n: int, a_dtype, b_dtype) -> str:
    """The registry name of the shared-memory wgmma of N = n on A, B of these
    types: wgmma_m64n{n}k16_{bf16,f16} or wgmma_m64n{n}k32_{e4m3,e5m2}[_{e4m3,e5m2}]."""
    ta, tb = _PTX_OF[a_dtype.name], _PTX_OF[b_dtype.name]
    if not a_dtype.is_fp8:
        return f"wgmma_m64n{n}k16_{ta}"
    return f"wgmma_m64n{n}k32_{ta}" + (f"_{tb}" if tb != ta else "")


def wgmma_types(fn: str) -> tuple[int, int, str, str]:
    """(N, K, A's PTX type, B's) of a wgmma registry name (also wgmma_rs_)."""
    shape, *types = fn.split("m64n", 1)[1].split("_")
    n, k = (int(x) for x in shape.split("k"))
    return n, k, types[0], types[-1]


def _wgmma_fp8_entry(n: int, ta: str, tb: str) -> None:
    da, db = WGMMA_FP8[ta], WGMMA_FP8[tb]
    _entry(f"wgmma_m64n{n}k32_{ta}" + (f"_{tb}" if tb != ta else ""),
           f"D(64x{n}, float32) = A(64x32, {da}) . B({n}x32, {db})^T + scale_d * D; A and B "
           f"tiles in shared memory (128-byte swizzle, rows of 128 values), K-major "
           f"(trans_a = trans_b = 0); D in registers",
           [Operand("d", ref=True, access=READWRITE, scopes=("local",), dtypes=("float32",)),
            Operand("a", ref=True, scopes=("shared",), dtypes=(da,)),
            Operand("b", ref=True, scopes=("shared",), dtypes=(db,)),
            Operand("scale_d", dtypes=_I32), Operand("trans_a", dtypes=_I32),
            Operand("trans_b", dtypes=_I32)],
           {"reads", "writes", "async", "async_proxy", "warpgroup_collective"},
           noun="wgmma", feature=ARCH_SPECIFIC, instruction=f"wgmma_m64n{n}k32_fp8")


for _ta in WGMMA_FP8:
    for _tb in WGMMA_FP8:
        for _n in WGMMA_N:
            _wgmma_fp8_entry(_n, _ta, _tb)
