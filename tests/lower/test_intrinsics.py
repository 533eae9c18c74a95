"""Intrinsics as data: the registry (tcomp/lower/intrinsics.py), the target
tables keyed by its names, `tcomp.intrinsics()`, and what passes read from an
entry (accesses through address operands, collectives, operand kinds)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcomp
from tcomp.errors import CudaError, LoweringError, SimError
from tcomp.lang import dtypes
from tcomp.lower import intrinsics as I
from tcomp.lower import ir
from tcomp.lower.accesses import accesses
from tcomp.lower.verify import verify
from tcomp.target_cuda.codegen import _Kernel
from tcomp.target_cuda.intrinsics import EMIT
from tcomp.target_sim import run_program
from tcomp.target_sim.intrinsics import RULES

F32 = dtypes.float32
TX = ir.Var("threadIdx.x")


def c(v):
    return ir.const(v)


def program(body, buffers, block=4):
    bufs = tuple(ir.Buffer(n, F32, tuple(c(d) for d in shape), "global", "output")
                 for n, shape in buffers.items())
    k = ir.Kernel("k", tuple(buffers), (), (c(1), c(1), c(1)), (c(block), c(1), c(1)), body)
    return ir.Program("p", bufs, (k,), (), tuple(buffers), ()), k


def copy(dst, src):
    return ir.Evaluate(ir.Call("test_copy", (dst, src), F32))


# ------------------------------------------------------------------ the registry
def test_every_intrinsic_has_a_cuda_emitter_and_a_sim_rule():
    assert set(I.REGISTRY) == set(EMIT) == set(RULES)
    for entry in I.REGISTRY.values():
        assert entry.description and "\n" not in entry.description
        assert entry.effects <= I.EFFECTS and entry.kind in I.KINDS


def test_the_node_backed_intrinsics():
    assert I.of(ir.Barrier()).name == "barrier"
    red = ir.AllReduce("+", "R", F32, "threadIdx.x", c(4))
    assert I.of(red).name == "allreduce"
    assert I.of(red).collective and I.of(ir.Barrier()).collective
    assert [(op.name, v) for op, v in I.operands(red)] == [("buffer", "R"), ("extent", c(4))]
    assert I.of(ir.Store("A", (c(0),), c(0))) is None
    assert I.of(ir.Evaluate(ir.Call("nothing_registered", (), F32))) is None


def test_public_listing_is_the_registrys_tensorize_entries(monkeypatch):
    """tcomp.intrinsics() (the schedule's table, which tensorize checks loop
    nests against) and the registry's tensorize entries agree; the compiler's
    own intrinsics (barriers, ldmatrix, cp.async) are not listed."""
    hopper = {n for n in tcomp.intrinsics() if n.startswith("wgmma_")}
    assert {n: d for n, d in tcomp.intrinsics().items() if n not in hopper} == \
        I.tensorize_intrinsics()
    # the Hopper path's (schedule/primitives_hopper.py): each a registered wgmma instruction
    # (k16 as its bf16 instruction, the fp8 k32 as its e4m3 one)
    assert hopper and all(I.REGISTRY[f"{n}_{'bf16' if n.endswith('k16') else 'e4m3'}"].kind
                          == "statement" for n in hopper)
    assert "mma_m16n8k16" in tcomp.intrinsics() and "barrier" not in tcomp.intrinsics()
    assert I.of(ir.Evaluate(ir.Call("mma_m16n8k16", (), F32))).kind == "tensorize"
    entry = I.Intrinsic("aa_tile", "a tile intrinsic (test)", (), frozenset({"pure"}),
                        kind="tensorize")
    monkeypatch.setitem(I.REGISTRY, entry.name, entry)
    got = I.tensorize_intrinsics()
    assert got["aa_tile"] == "a tile intrinsic (test)" and list(got)[0] == "aa_tile"


def test_tensor_core_and_async_copy_entries():
    mma = I.REGISTRY["mma_m16n8k16"]
    assert [(o.name, o.ref, o.access) for o in mma.operands] == [
        ("d", True, "write"), ("a", True, "read"), ("b", True, "read"), ("c", True, "read")]
    assert "warp_collective" in mma.effects
    ld = I.REGISTRY["ldmatrix_x4_trans"]
    assert ld.operands[1].scopes == ("shared",) and ld.collective
    cp = I.REGISTRY["cp_async"]
    assert "async" in cp.effects and not cp.collective
    # The barrier pass sees a copy's destination as written, its source as read.
    s = ir.Evaluate(ir.Call("cp_async", (ir.Ref("S", (TX,)), ir.Ref("G", (TX,)), c(16), c(16)),
                            ir.int32))
    assert accesses(s).writes == {"S"} and accesses(s).reads == {"G"}


def test_register_adds_an_entry_and_refuses_malformed_ones(monkeypatch):
    monkeypatch.setattr(I, "REGISTRY", dict(I.REGISTRY))
    e = I.register(I.Intrinsic("test_fence", "a fence (test)", (), frozenset({"reads"})))
    assert I.REGISTRY["test_fence"] is e
    with pytest.raises(ValueError, match="intrinsic 'test_fence' is registered twice"):
        I.register(e)
    with pytest.raises(ValueError, match=r"intrinsic 'x': unknown effects \['loud'\]"):
        I.register(I.Intrinsic("x", "d", (), frozenset({"loud"})))
    with pytest.raises(ValueError, match=r"intrinsic 'x': kind must be one of"):
        I.register(I.Intrinsic("x", "d", (), frozenset(), kind="magic"))
    with pytest.raises(ValueError, match=r"intrinsic 'x': operand 'v' has access 'write' "
                                         r"\(values are read; addresses read, write or both\)"):
        I.register(I.Intrinsic("x", "d", (I.Operand("v", access=I.WRITE),), frozenset()))
    with pytest.raises(ValueError, match=r"intrinsic 'x': unknown tensor-core instruction "
                                         r"'mma_m8n8k4'"):
        I.register(I.Intrinsic("x", "d", (), frozenset(), instruction="mma_m8n8k4"))


def test_tensor_core_entries_name_their_instruction():
    """What the cost model counts an mma by (search/feature_walk.py): the
    instruction's shape and the group that issues it, from the arch table."""
    from tcomp.arch.instructions import TENSOR_CORE
    named = {n: e.instruction for n, e in I.REGISTRY.items() if e.instruction}
    assert named["mma_m16n8k16"] == "mma_m16n8k16"
    assert named["wgmma_m64n256k16_bf16"] == named["wgmma_rs_m64n256k16_f16"] == \
        "wgmma_m64n256k16"
    assert all(i in TENSOR_CORE for i in named.values())
    assert {n for n, e in I.REGISTRY.items() if e.lane_bytes} == {
        f"ldmatrix_x{k}{t}" for k in (1, 2, 4) for t in ("", "_trans")}


# ------------------------------------------------------------------ passes read entries
def test_accesses_follow_the_operands(copy_intrinsic):
    s = copy(ir.Ref("A", (TX,), F32), ir.Ref("B", (ir.Load("P", (TX,), ir.int32),), F32))
    a = accesses(s)
    assert a.writes == {"A"} and a.reads == {"B", "P"}
    # A reference outside an intrinsic's address operand counts as read and written.
    loose = ir.Let("p", ir.Ref("C", (TX,), F32), ir.Seq(()))
    assert accesses(loose).reads == accesses(loose).writes == {"C"}


def test_verifier_checks_intrinsic_operands(copy_intrinsic):
    a, b = ir.Ref("A", (TX,), F32), ir.Ref("B", (TX,), F32)
    prog, k = program(copy(a, b), {"A": (4,), "B": (4,)})
    verify(k, prog)
    cases = [
        (ir.Evaluate(ir.Call("nothing_registered", (), F32)),
         "kernel k: 'nothing_registered' is not a registered intrinsic "
         "(tcomp/lower/intrinsics.py)"),
        (ir.Evaluate(ir.Call("test_copy", (a,), F32)),
         "kernel k: intrinsic 'test_copy' takes 2 operands, got 1"),
        (copy(a, ir.Load("B", (TX,), F32)),
         "kernel k: operand 'src' of intrinsic 'test_copy' must be an address (Ref), got "
         "B[threadIdx.x]"),
        (ir.Let("p", a, ir.Seq(())),
         "kernel k: &A[threadIdx.x] is an address, usable only as an operand of an intrinsic "
         "that takes one"),
        (copy(a, ir.Ref("B", (ir.Load("I", (ir.Ref("A", (c(0),), F32),), ir.int32),), F32)),
         "kernel k: &A[0] is an address, usable only as an operand of an intrinsic "),
    ]
    for body, msg in cases:
        prog, k = program(body, {"A": (4,), "B": (4,), "I": (4,)})
        with pytest.raises(LoweringError, match=re.escape(msg)):
            verify(k, prog)


def test_verifier_refuses_a_value_where_an_address_is_not_taken(monkeypatch):
    entry = I.Intrinsic("test_set", "set (test)", (I.Operand("v"),), frozenset({"pure"}))
    monkeypatch.setitem(I.REGISTRY, entry.name, entry)
    prog, k = program(ir.Evaluate(ir.Call("test_set", (ir.Ref("A", (TX,), F32),), F32)),
                      {"A": (4,)})
    with pytest.raises(LoweringError, match=r"kernel k: operand 'v' of intrinsic 'test_set' "
                                            r"must be a value, got &A\[threadIdx.x\]"):
        verify(k, prog)


def test_collective_intrinsic_under_a_thread_condition(monkeypatch):
    entry = I.Intrinsic("test_sync_warp", "a warp-wide sync (test)", (),
                        frozenset({"warp_collective"}), noun="warp synchronisation")
    monkeypatch.setitem(I.REGISTRY, entry.name, entry)
    cond = ir.Bin("<", TX, c(2), ir.bool_)
    prog, k = program(ir.If(cond, ir.Evaluate(ir.Call("test_sync_warp", (), F32))), {"A": (4,)})
    with pytest.raises(LoweringError, match="kernel k: warp synchronisation under a "
                                            "thread-dependent condition"):
        verify(k, prog)


# ------------------------------------------------------------------ targets
def test_an_intrinsic_without_target_rules(copy_intrinsic):
    prog, k = program(copy(ir.Ref("A", (TX,), F32), ir.Ref("B", (TX,), F32)),
                      {"A": (4,), "B": (4,)})
    with pytest.raises(CudaError, match="codegen: cannot emit test_copy"):
        _Kernel(k, prog).source()
    env = {"A": np.zeros(4, np.float32), "B": np.zeros(4, np.float32)}
    with pytest.raises(SimError, match="kernel k: the sim target has no meaning for intrinsic "
                                       "'test_copy'"):
        run_program(prog, env, {})


def test_barrier_emitted_through_the_table():
    prog, k = program(ir.Barrier(), {"A": (4,)})
    assert "  __syncthreads();" in _Kernel(k, prog).source()[0]
