"""The `vectorize` pass: which vectorized loops move 8/16-byte vectors is
decided in lowering and recorded on the loop (`For.vector`), visible in the
IR text; the CUDA codegen prints exactly those accesses and decides nothing;
the verifier checks the record against the loop."""
from __future__ import annotations

import dataclasses
import re

import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.rewriter import Rewriter, walk_stmts
from tcomp.lower.verify import verify
from tcomp.target_cuda.codegen import CodegenOptions, program_source

from tests.target_cuda.test_codegen_vectors import tiled, vec_accesses

SIZES = {"M": 64, "N": 64, "K": 64}


def vector_loops(prog):
    """(store buffer, load buffers read as vectors, whether the store is a vector)
    of every loop that carries vector accesses."""
    out = []
    for k in prog.kernels:
        for s in walk_stmts(k.body):
            if isinstance(s, ir.For) and s.vector is not None:
                out.append((s.body.buffer, tuple(ld.buffer for ld in s.vector.loads),
                            s.vector.store_base is not None))
    return out


def test_decisions_are_in_the_ir():
    prog = tcomp.lower(tiled(True, True), sizes=SIZES)
    loops = set(vector_loops(prog))
    # A's k-major tile: a vector load of A, stored lane by lane (transposed);
    # B's tile: vector load and vector store; the register fragments: vector loads
    # of the shared tiles, stored lane by lane (local arrays are never vectors).
    assert loops == {("A_shared", ("A",), False), ("B_shared", ("B",), True),
                     ("A_shared_local", ("A_shared",), False),
                     ("B_shared_local", ("B_shared",), False)}
    text = str(prog)
    assert re.search(r"@vectorize\(16 bytes: load A\[[^\]]+\], store per lane\)", text)
    assert re.search(r"@vectorize\(16 bytes: load B\[[^\]]+\], store B_shared\[[^\]]+\]\)",
                     text)


def test_unaligned_rows_get_no_global_vectors():
    """K = 63: rows of A start at offsets that are not multiples of 4. (B's rows,
    N long, stay aligned: its copy's guard k < 63 holds for all lanes or none and
    moves outside the vector loop.)"""
    prog = tcomp.lower(tiled(True, True), sizes=dict(SIZES, K=63))
    loops = vector_loops(prog)
    assert not [x for x in loops if set(x[1]) & {"A"}]
    assert ("B_shared", ("B",), True) in loops
    assert ("B_shared_local", ("B_shared",), False) in loops  # constant strides stay vectors


class _DropVectors(Rewriter):
    def stmt_For(self, s):
        s = self.generic_stmt(s)
        return dataclasses.replace(s, vector=None) if s.vector is not None else s


def _without_vectors(prog):
    return dataclasses.replace(prog, kernels=tuple(
        dataclasses.replace(k, body=_DropVectors().stmt(k.body)) for k in prog.kernels))


def test_codegen_prints_what_the_ir_says():
    """The same program without the pass's records prints no vector access; with
    them, 32- and 64-bit indices print the same vector accesses."""
    prog = tcomp.lower(tiled(True, True), sizes=SIZES)
    src32, meta32 = program_source(prog)
    src64, meta64 = program_source(prog, CodegenOptions(64))
    assert vec_accesses(src32) == vec_accesses(src64) == (
        {"A": 1, "B": 1, "A_shared": 8, "B_shared": 8}, {"B_shared": 1})
    assert meta32 == meta64
    bare, meta = program_source(_without_vectors(prog))
    assert "reinterpret_cast" not in bare and vec_accesses(bare) == ({}, {})
    assert all(m["aligned"] == [] for m in meta.values())


def _first_vector_loop(k):
    return next(s for s in walk_stmts(k.body) if isinstance(s, ir.For) and s.vector is not None)


def _replace_loop(k, old, new):
    class R(Rewriter):
        def stmt_For(self, s):
            return new if s is old else self.generic_stmt(s)
    return dataclasses.replace(k, body=R().stmt(k.body))


@pytest.mark.parametrize("break_it, message", [
    (lambda s: dataclasses.replace(s, vector=dataclasses.replace(
        s.vector, loads=(ir.Load("B", (ir.const(0),), s.vector.loads[0].dtype),))),
     "vectorized loop '{var}' names a vector load of 'B' that its body does not read"),
    (lambda s: dataclasses.replace(s, body=ir.Seq((s.body, s.body))),
     "vectorized loop '{var}' carries vector accesses but its body is not one store with them"),
    (lambda s: dataclasses.replace(s, vector=dataclasses.replace(
        s.vector, store_base=ir.Var(s.var))),
     "variable '{var}' used but not defined"),
])
def test_verifier_checks_the_record(break_it, message):
    """A record that does not match its loop (a load the body does not read, a
    body that is not one store, a base that moves with the loop) is reported."""
    s = tcomp.Schedule(tcomp.op("def scale(float(M,N) A) -> (O) { O(i, j) = A(i, j) * 2.0 }"))
    i, j = s["O"].axes
    _, ji = s["O"].split(j, 4)
    s["O"].vectorize(ji)
    prog = tcomp.lower(s, sizes={"M": 8, "N": 8})
    k = prog.kernels[0]
    loop = _first_vector_loop(k)
    verify(k, prog, flat=True)
    broken = _replace_loop(k, loop, break_it(loop))
    with pytest.raises(tcomp.LoweringError, match=re.escape(
            f"kernel {k.name}: " + message.format(var=loop.var))):
        verify(broken, prog, flat=True)
