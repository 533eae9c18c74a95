"""Hand-built Kernel IR programs that use the tensor-core intrinsics directly
(ldmatrix into fragments, mma.sync m16n8k16, fragment stores by the layout),
shared by the sim tests and the CUDA tests."""
from __future__ import annotations

from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.lower.warp_layouts import MMA_C

TX = ir.Var("threadIdx.x")
I32, BOOL = dtypes.int32, dtypes.bool_


def c(v):
    return ir.const(v)


def b(op, x, y, dt=I32):
    return ir.Bin(op, x, y, dt)


def one_tile(dtype=dtypes.bfloat16, warps=1, a_row=16, b_row=16, trans_b=True, zero_c=True):
    """C (16 x 16, float32) = A (16 x 16) @ B (16 x 16, k x n), per warp; warp w
    uses rows w*16.. of A and of C (A is (16 * warps) x 16, C (16 * warps) x 16).
    A and B go to shared memory row by row (one 16-byte row piece per thread
    and step), then ldmatrix.x4 loads the A fragment and ldmatrix.x4.trans the
    two B fragments (n 0-7 and 8-15), two mma produce the two 16 x 8 halves
    of C, and each lane stores its elements by the C layout.
    `a_row`/`b_row`: the row pitch (elements) of the shared tiles (16, or more
    for padding). With trans_b=False, B is given n x k (B^T) and loaded without .trans."""
    T = 32 * warps
    w = b("/", TX, c(32))
    lane = b("%", TX, c(32))
    A = ir.Buffer("A", dtype, (c(16 * warps * 16),), "global", "input")
    B = ir.Buffer("B", dtype, (c(256),), "global", "input")
    C = ir.Buffer("C", dtypes.float32, (c(16 * warps * 16),), "global", "output")
    AS = ir.Buffer("AS", dtype, (c(16 * warps * a_row),), "shared")
    BS = ir.Buffer("BS", dtype, (c(16 * b_row),), "shared")
    AF = ir.Buffer("AF", dtype, (c(8),), "fragment")
    BF = ir.Buffer("BF", dtype, (c(8),), "fragment")
    CF = ir.Buffer("CF", dtypes.float32, (c(8),), "fragment")
    i = ir.Var("i")
    # copies: element e = i*T + tx of the tile, row e // 16, column e % 16
    e = b("+", b("*", i, c(T)), TX)
    copy_a = ir.For("i", c(0), c(16 * warps * 16 // T), "serial", ir.Store(
        "AS", (b("+", b("*", b("/", e, c(16)), c(a_row)), b("%", e, c(16))),),
        ir.Load("A", (e,), dtype)))
    copy_b = ir.For("i", c(0), c(256 // T), "serial", ir.Store(
        "BS", (b("+", b("*", b("/", e, c(16)), c(b_row)), b("%", e, c(16))),),
        ir.Load("B", (e,), dtype)))
    # ldmatrix row addresses: lanes 0-15 rows 0-15 at column 0, lanes 16-31 at column 8
    a_addr = b("+", b("*", b("+", b("*", w, c(16)), b("%", lane, c(16))), c(a_row)),
               b("*", b("/", lane, c(16)), c(8)))
    if trans_b:
        b_addr = b("+", b("*", b("%", lane, c(16)), c(b_row)), b("*", b("/", lane, c(16)), c(8)))
    else:  # B^T (n x k): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
        n_row = b("+", b("%", lane, c(8)), b("*", b("/", lane, c(16)), c(8)))
        k_col = b("*", b("%", b("/", lane, c(8)), c(2)), c(8))
        b_addr = b("+", b("*", n_row, c(b_row)), k_col)
    void = dtypes.int32
    ld_b = "ldmatrix_x4_trans" if trans_b else "ldmatrix_x4"
    body = [copy_a, copy_b, ir.Barrier(),
            ir.Evaluate(ir.Call("ldmatrix_x4", (ir.Ref("AF", (c(0),)), ir.Ref("AS", (a_addr,))),
                                void)),
            ir.Evaluate(ir.Call(ld_b, (ir.Ref("BF", (c(0),)), ir.Ref("BS", (b_addr,))), void))]
    if zero_c:
        body.append(ir.For("r", c(0), c(8), "unroll",
                           ir.Store("CF", (ir.Var("r"),), ir.Imm(0.0, dtypes.float32))))
    for h in (0, 1):
        ref = ir.Ref("CF", (c(4 * h),))
        body.append(ir.Evaluate(ir.Call("mma_m16n8k16", (ref, ir.Ref("AF", (c(0),)),
                                                         ir.Ref("BF", (c(4 * h),)), ref), void)))
    # each lane's elements by the C layout: (g + 8 (e // 2), 2 t + e % 2), + 8 columns for h = 1
    r = ir.Var("r")
    g, t = b("/", lane, c(4)), b("%", lane, c(4))
    row = b("+", b("+", b("*", w, c(16)), g), b("*", b("/", r, c(2)), c(8)))
    for h in (0, 1):
        col = b("+", b("+", b("*", t, c(2)), b("%", r, c(2))), c(8 * h))
        body.append(ir.For("r", c(0), c(4), "unroll", ir.Store(
            "C", (b("+", b("*", row, c(16)), col),),
            ir.Load("CF", (b("+", r, c(4 * h)),), dtypes.float32))))
    stmt = ir.seq(*body)
    for buf in (CF, BF, AF, BS, AS):
        stmt = ir.Alloc(buf, stmt)
    k = ir.Kernel("one_tile", ("A", "B", "C"), (), (c(1), c(1), c(1)), (c(T), c(1), c(1)), stmt)
    return ir.Program("one_tile", (A, B, C), (k,), ("A", "B"), ("C",), ())


assert MMA_C.coords(5, 3) == (1 + 8, 2 * 1 + 1)  # (the layout the stores above spell out)


def async_copy(threads=64, wait=0, groups=1, zero_from=None, misalign=False, extra_store=False):
    """Each thread copies 8 bfloat16 (16 bytes) of G to shared S with cp_async
    (in `groups` commit groups: thread pieces split by group), commits, waits
    with `cp_async_wait(wait)`, a barrier, then writes the piece of thread
    (t + 1) % threads to O. Threads from `zero_from` on copy 0 source bytes
    (their piece is zero-filled). `misalign`: the destination is shifted by 4
    elements (8 bytes). `extra_store`: a plain store to S while the copy is pending."""
    T = threads
    dt = dtypes.bfloat16
    n = 8 * T * groups
    G = ir.Buffer("G", dt, (c(n),), "global", "input")
    O = ir.Buffer("O", dt, (c(n),), "global", "output")
    S = ir.Buffer("S", dt, (c(n + 8),), "shared")
    body = []
    for g in range(groups):
        base = b("*", b("+", TX, c(g * T)), c(8))
        dbase = b("+", base, c(4)) if misalign else base
        src_bytes = c(16) if zero_from is None else ir.Select(
            ir.Bin("<", TX, c(zero_from), BOOL), c(16), c(0), I32)
        body.append(ir.Evaluate(ir.Call("cp_async", (ir.Ref("S", (dbase,)), ir.Ref("G", (base,)),
                                                      c(16), src_bytes), I32)))
        if extra_store and g == 0:
            body.append(ir.Store("S", (base,), ir.Imm(1.0, dt)))
        body.append(ir.Evaluate(ir.Call("cp_async_commit", (), I32)))
    body.append(ir.Evaluate(ir.Call("cp_async_wait", (c(wait),), I32)))
    body.append(ir.Barrier())
    nxt = b("%", b("+", TX, c(1)), c(T))
    i = ir.Var("i")
    for g in range(groups):
        body.append(ir.For("i", c(0), c(8), "serial", ir.Store(
            "O", (b("+", b("*", b("+", TX, c(g * T)), c(8)), i),),
            ir.Load("S", (b("+", b("*", b("+", nxt, c(g * T)), c(8)), i),), dt))))
    k = ir.Kernel("async_copy", ("G", "O"), (), (c(1), c(1), c(1)), (c(T), c(1), c(1)),
                  ir.Alloc(S, ir.seq(*body)))
    return ir.Program("async_copy", (G, O), (k,), ("G",), ("O",), ())
