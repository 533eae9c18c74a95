"""The search's register estimate (validate.resources) on kernels lowered only
up to `unroll`: a local buffer the `registers` pass compacts counts what that
pass keeps per thread (registers.kept), checked against the buffers the full
pipeline actually keeps; every other kernel's estimate is its declared
buffers, as before."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.lower import ir, registers
from tcomp.lower.pipeline import lower, run_passes
from tcomp.lower.rewriter import walk_stmts
from tcomp.schedule import templates
from tcomp.search import validate
from tcomp.search.validate import ANALYSIS_UNTIL, REGISTER_OVERHEAD, resources
from tests.bench.common import BENCH, S, SUITE_CASES, _load

R = _load("bench_row_schedules", BENCH / "row_schedules.py")


def _allocs(k: ir.Kernel, sizes: dict) -> dict:
    """{buffer: (scope, elements, bits)} of a kernel's local and fragment
    buffers (the largest allocation of each name)."""
    out = {}
    for st in walk_stmts(k.body):
        if isinstance(st, ir.Alloc) and st.buffer.scope in ("local", "fragment"):
            b = st.buffer
            n = 1
            for d in b.shape:
                n *= int(d.value) if isinstance(d, ir.Imm) else int(sizes[d.name])
            old = out.get(b.name, (b.scope, 0, b.dtype.bits))
            out[b.name] = (b.scope, max(old[1], n), b.dtype.bits)
    return out


def _declared(k: ir.Kernel, sizes: dict) -> int:
    """The estimate before registers.kept: every buffer at its declared size."""
    return sum(-(-n * max(bits, 8) // 32) for _, n, bits in _allocs(k, sizes).values()) \
        + REGISTER_OVERHEAD


def _s_softmax_in_registers(threads):
    op = tcomp.op(S.SOFTMAX)
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "O", threads, 4, cache=("X",), local=("mx", "sm"))
    return op, s


REGISTER_ROWS = [
    ("softmax f32 4096/256t", lambda: R.softmax(4096, "float32", threads=256), 8, 4096),
    ("softmax bf16 1000/64t", lambda: R.softmax(1000, "bfloat16", threads=64), 3, 1000),
    ("layernorm f32 257/32t", lambda: R.layernorm(257, "float32", threads=32), 3, 257),
    ("rmsnorm bf16 4099/128t shared w", lambda: R.rmsnorm(4099, "bfloat16", threads=128,
                                                          shared_weights=True), 2, 4099),
    ("add_layernorm bf16 2048/64t", lambda: R.add_layernorm(2048, "bfloat16", threads=64), 4,
     2048),
    ("rowsum 4096/256t", lambda: R.rowsum(4096, threads=256), 4, 4096),
    ("S.SOFTMAX in registers 32768/1024t", lambda: _s_softmax_in_registers(1024), 2, 32768),
]


@pytest.mark.parametrize("make,n,d", [c[1:] for c in REGISTER_ROWS],
                         ids=[c[0] for c in REGISTER_ROWS])
def test_estimate_is_what_the_registers_pass_keeps(make, n, d):
    op, s = make()
    sizes = {"N": n, "D": d}
    pre = lower(s, sizes, until=ANALYSIS_UNTIL)
    after = run_passes(pre, start=ANALYSIS_UNTIL, until="flatten_storage")  # just compacted
    full = run_passes(pre, start=ANALYSIS_UNTIL)
    for k_pre, k_after, k_full in zip(pre.kernels, after.kernels, full.kernels):
        kept = registers.kept(k_pre)
        assert kept, "a row split over the threads is compacted"
        declared, actual = _allocs(k_pre, sizes), _allocs(k_after, sizes)
        for name, (scope, size, _) in declared.items():
            assert kept.get(name, size) == actual[name][1], name
        assert all(kept[name] < declared[name][1] for name in kept)
        est = resources(k_pre, sizes)
        assert est.registers == resources(k_full, sizes, compacted=True).registers
        assert est.registers == _declared(k_after, sizes)
        assert est.registers <= 255


def test_the_row_of_s_softmax_passes_validation():
    """The obstacle this estimate removes: 32768 floats per row over 1024
    threads are 32 registers per thread, not the 4132 of the whole row."""
    op, s = _s_softmax_in_registers(1024)
    v = validate(op, s.to_json(), {"N": 4096, "D": 32768})
    assert v.ok, str(v)
    (r,) = v.resources
    assert r.registers == 32 + 4 + REGISTER_OVERHEAD  # the row's slice, mx, sm and accumulators


def test_full_lowering_counts_its_buffers_as_they_are():
    op, s = _s_softmax_in_registers(1024)
    sizes = {"N": 4, "D": 32768}
    v = validate(op, s.to_json(), sizes, full=True)
    assert v.ok and v.until is None
    (r,) = v.resources
    assert r.registers == _declared(v.program.kernels[0], sizes) == 32 + 4 + REGISTER_OVERHEAD


def _hand_schedules():
    cases = [(c.slug, c.schedule, c.sizes) for c in SUITE_CASES]
    gemm = {"M": 4096, "N": 4096, "K": 4096}
    cases += [("tc_gemm ring of 3", lambda: S.tc_gemm(bk=64, pipeline=3), gemm),
              ("tc_conv2d swizzled", lambda: S.tc_conv2d(bk=64, pipeline=3, swizzle=True),
               {"N": 32, "H": 56, "W": 56, "C": 256, "K": 256, "R": 2304})]
    return cases


@pytest.mark.parametrize("make,sizes", [c[1:] for c in _hand_schedules()],
                         ids=[c[0] for c in _hand_schedules()])
def test_estimate_of_the_hand_schedules_is_unchanged(make, sizes):
    """bench/schedules.py's schedules hold no row split over threads in a
    local buffer: their estimate stays every buffer at its declared size."""
    op, s = make()
    pre = lower(s, sizes, until=ANALYSIS_UNTIL)
    for k in pre.kernels:
        assert registers.kept(k) == {}
        assert resources(k, sizes).registers == _declared(k, sizes)


def test_a_refused_buffer_is_left_to_the_full_lowering():
    """A reader split over the threads differently from the writer: the
    estimate counts the buffer whole (no prediction), and the full lowering
    reports the ownership error."""
    op = tcomp.op(S.SOFTMAX)
    s2 = tcomp.Schedule(op)
    O = s2["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    templates.row_slices(O, d, 64, 2)  # pieces of 2, read from pieces of 4
    C = s2.cache_read("X", "local", [O])
    C.compute_at(O, n)
    templates.row_slices(C, C.axes[-1], 64, 4)
    sizes = {"N": 2, "D": 512}
    pre = lower(s2, sizes, until=ANALYSIS_UNTIL)
    (k,) = [k for k in pre.kernels if "X_local" in _allocs(k, sizes)]  # (O's; mx, sm apart)
    assert "X_local" not in registers.kept(k)
    assert resources(k, sizes).registers == _declared(k, sizes)
    with pytest.raises(tcomp.LoweringError, match="local buffer 'X_local' is"):
        run_passes(pre, start=ANALYSIS_UNTIL)
