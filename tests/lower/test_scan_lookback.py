"""Stage.scan(..., lookback=True) (schedule/scan.py, lower/scan_lookback.py,
target_sim/scan_lookback.py, target_cuda/scan_lookback.py): the multi-block
scan with decoupled look-back, on the sim at awkward sizes (one element, not
a multiple of the tile, several tiles, rows serial and on blockIdx.y) for every
combine against the loop, its IR and buffers, the sim's protocol errors, JSON
replay, NVRTC, the CPU emulator of the CUDA, and (marked cuda) the GPU against
torch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tcomp
from tcomp.errors import SimError
from ..target_cuda.emulator import HAVE_CXX, run_emulated


def recurrence(rhs: str, dtype: str = "float") -> tcomp.Op:
    return tcomp.op(f"""def f({dtype}(B, T) X, {dtype}(B, T) A) -> (O) {{
    O(b, t) = X(b, t)
    O(b, t) = {rhs} where t in 1:T, ordered t
}}""")


RHS = ["O(b, t - 1) + X(b, t)", "O(b, t - 1) * A(b, t)", "max(O(b, t - 1), X(b, t))",
       "fmin(X(b, t), O(b, t - 1))", "A(b, t) * O(b, t - 1) + X(b, t)"]


def scanned(op, threads=32, items=3, rows="blockIdx.y"):
    s = tcomp.Schedule(op)
    st = s["O.1"]
    b, t = st.axes
    st.scan(t, threads=threads, items=items, lookback=True)
    if rows is not None:
        st.bind(b, rows)
    return s


def loop_reference(op, X, A):
    """The recurrence as the C loop runs it, in float64."""
    return tcomp.evaluate(tcomp.op(op.to_text(notes=False).replace("float(", "double(")),
                          X.astype(np.float64), A.astype(np.float64))


def data(B, T, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, T)).astype(np.float32),
            rng.uniform(0.9, 1.1, (B, T)).astype(np.float32))


@pytest.mark.parametrize("rhs", RHS)
@pytest.mark.parametrize("T, items, rows", [(1, 3, "blockIdx.y"), (2, 1, None),
                                            (97, 3, "blockIdx.y"), (500, 3, None),
                                            (1000, 1, "blockIdx.y")])
def test_sim_against_the_loop(rhs, T, items, rows):
    """T - 1 scanned points: 0, 1, one tile of 96 and some, several tiles."""
    op = recurrence(rhs)
    X, A = data(3, T, T)
    got = tcomp.build(scanned(op, items=items, rows=rows), target="sim")(X, A)
    np.testing.assert_allclose(got, loop_reference(op, X, A), rtol=1e-4, atol=1e-4)


def test_one_long_row_over_many_blocks():
    """A single row (the issue's long vector), 1024 tiles over several batches of
    the sim, each look-back walking over aggregates before a prefix."""
    op = recurrence("O(b, t - 1) + X(b, t)", "int32")
    X = np.random.default_rng(5).integers(-100, 100, (1, 32 * 2 * 1024 + 7)).astype(np.int32)
    got = tcomp.build(scanned(op, items=2, rows=None), target="sim")(X, X)
    np.testing.assert_array_equal(got, np.cumsum(X, 1))


def test_integer_scans_are_exact():
    X = np.random.default_rng(2).integers(-1000, 1000, (2, 777)).astype(np.int32)
    for rhs, ref in (("O(b, t - 1) + X(b, t)", np.cumsum(X, 1)),
                     ("max(O(b, t - 1), X(b, t))", np.maximum.accumulate(X, 1))):
        got = tcomp.build(scanned(recurrence(rhs, "int32"), 64, 4), target="sim")(X, X)
        np.testing.assert_array_equal(got, ref)


def test_the_lowered_scan_and_its_buffers():
    text = str(tcomp.lower(scanned(recurrence("A(b, t) * O(b, t - 1) + X(b, t)")),
                           sizes={"B": 3, "T": 150}))
    # one slot a tile of 96 of every row, 3 * ceil(149 / 96), two status words a slot
    # (the linear pair a, b of float32)
    assert "buffer temp global uint64 O_1_status[12]" in text
    kernel = text[text.index("kernel f_O_1"):]
    assert "grid=(2, 3, 1) block=(32, 1, 1)" in kernel
    assert "let t_o = blockIdx.x" in kernel and "let b = blockIdx.y" in kernel
    assert "if t_o == 0\n" in kernel and "O_1_carry[0] = O[b * 150]" in kernel
    assert "O_1_items[1] = O_1_coefs[1] * O_1_items[0] + O_1_items[1]" in kernel
    assert ("scan_lookback_linear(&O_1_coef[0], &O_1_scan[0], &O_1_carry[0], "
            "&O_1_status[b * 4 + t_o * 2], t_o, 32)") in kernel
    # the tile through shared memory: a warp's loads and stores are 32 consecutive
    # elements (e = j * 32 + t_i at stage[e + e / 32]), the items read back blocked
    assert "alloc shared float32 O_1_stage[99]" in kernel
    assert "alloc shared float32 O_1_stage_coef[99]" in kernel
    assert ("if t_o * 96 + t_i + 32 < 149\n    O_1_stage[t_i + 33] = X[b * 150 + t_o * 96 + "
            "t_i + 33]\n    O_1_stage_coef[t_i + 33] = A[b * 150 + t_o * 96 + t_i + 33]") in kernel
    assert "barrier()\n  O_1_items[0] = O_1_stage[t_i * 3 + t_i * 3 / 32]" in kernel
    assert ("barrier()\n  O_1_stage[t_i * 3 + t_i * 3 / 32] = O_1_coefs[0] * O_1_scan[0] + "
            "O_1_items[0]") in kernel
    assert "barrier()\n  O[b * 150 + t_o * 96 + t_i + 1] = O_1_stage[t_i]\n" in kernel
    assert kernel.count("barrier()") == 3
    # a 32-bit combine: one uint64 status word a tile; 64 bits: two
    prog = tcomp.lower(scanned(recurrence("O(b, t - 1) + X(b, t)")), sizes={"B": 3, "T": 150})
    assert prog.zero_fill == {"O_1_status"}
    text = str(prog)
    assert "buffer temp global uint64 O_1_status[6]" in text
    assert ("scan_lookback_add(&O_1_scan[0], &O_1_carry[0], &O_1_status[b * 2 + t_o], "
            "t_o, 32)") in text
    op = tcomp.op("""def f(double(B, T) X) -> (O) {
        O(b, t) = X(b, t)
        O(b, t) = O(b, t - 1) + X(b, t) where t in 1:T, ordered t
    }""")
    text = str(tcomp.lower(scanned(op), sizes={"B": 3, "T": 150}))
    assert "buffer temp global uint64 O_1_status[12]" in text
    assert "&O_1_status[b * 4 + t_o * 2]" in text


def test_json_replays_the_lookback_scan():
    import json
    op = recurrence("A(b, t) * O(b, t - 1) + X(b, t)")
    s = scanned(op)
    again = tcomp.Schedule.from_json(op, s.to_json())
    assert again.to_json() == s.to_json()
    (scan,) = [d for d in json.loads(s.to_json())["directives"] if d["kind"] == "Scan"]
    assert scan["items"] == 3 and scan["lookback"] is True
    assert [a.name for a in again["O.1"].leaf_axes] == ["t_i", "t_o", "b", "t_k"]
    # a schedule written before the fields existed replays as the single-block scan
    old = json.loads(s.to_json())
    old["directives"] = [{k: v for k, v in d.items() if k not in ("items", "lookback")}
                         for d in old["directives"] if d["kind"] == "Scan"]
    assert tcomp.Schedule.from_json(op, json.dumps(old))["O.1"]._s.lookback is None


def _fresh_env(prog, X, A):
    env = {"X": X, "A": A}
    for b in prog.buffers:
        if b.role != "input":
            env[b.name] = np.zeros(tuple(int(d.value) for d in b.shape), b.dtype.numpy)
    return env


def test_flags_not_reset_are_a_sim_error():
    """The flags must start zeroed (the program's temporaries are, before each
    call): the program run twice on the same buffers finds its slots published."""
    from tcomp.target_sim import run_program
    op = recurrence("O(b, t - 1) + X(b, t)")
    prog = tcomp.build(scanned(op, items=1, rows=None), target="sim",
                       sizes={"B": 1, "T": 100}).program
    env = _fresh_env(prog, *data(1, 100, 0))
    run_program(prog, env, {})
    np.testing.assert_allclose(env["O"], np.cumsum(env["X"], 1), rtol=1e-5, atol=1e-5)
    with pytest.raises(SimError, match=r"multi-block scan: the flag of slot 0 is 2 before its "
                                       r"tile ran \(the flags must start zeroed, one slot a "
                                       r"tile\)"):
        run_program(prog, env, {})


def test_a_lookback_that_meets_an_unpublished_tile_is_a_sim_error():
    """A tile whose predecessor never ran would spin forever on the GPU: the sim
    says so. Here the kernel is edited to run tiles 2 and 3 of 4 only."""
    import dataclasses
    from tcomp.lower import ir
    from tcomp.lower.rewriter import Rewriter

    class Shift(Rewriter):  # t_o = blockIdx.x + 2
        def stmt_Let(self, x):
            x = self.generic(x)
            if x.var == "t_o":
                x = dataclasses.replace(x, value=ir.Bin("+", x.value, ir.const(2), ir.int32))
            return x

    op = recurrence("O(b, t - 1) + X(b, t)")
    k = tcomp.build(scanned(op, items=1, rows=None), target="sim", sizes={"B": 1, "T": 129})
    first, kern = k.unflattened.kernels
    broken = dataclasses.replace(kern, body=Shift().stmt(kern.body),
                                 grid=(ir.const(2), ir.ONE, ir.ONE))
    k.set_unflattened(dataclasses.replace(k.unflattened, kernels=(first, broken)))
    with pytest.raises(SimError, match=r"multi-block scan: tile [23] looks back at tile 1 "
                                       r"\(slot 1\), which has published nothing \(it never "
                                       r"ran, or runs after this one: on the GPU it would wait "
                                       r"forever\)"):
        k(*data(1, 129, 0))


def test_nvrtc_compiles_the_lookback_scans():
    for rhs in RHS:  # double: two words a value, the linear pair four
        k = tcomp.build(scanned(recurrence(rhs, "double")), target="cuda")
        w = 4 if "A(b, t) *" in rhs else 2
        assert k.cubin and f"tc_load_words<{w}>(" in k.source
        assert f"tc_store_words<{w}>(" in k.source
        assert 'asm volatile("st.relaxed.gpu.b64 [%0], %1;"' in k.source
        assert 'asm volatile("ld.relaxed.gpu.b64 %0, [%1];"' in k.source
    op = tcomp.op("""def f(bfloat16(B, T) A, bfloat16(B, T) X) -> (float32(B, T) O) {
        O(b, t) = X(b, t)
        O(b, t) = A(b, t) * O(b, t - 1) + X(b, t) where t in 1:T, ordered t
    }""")
    s = tcomp.Schedule(op)
    st = s["O.1"]
    st.scan(st.axes[1], threads=512, items=8, lookback=True)
    assert tcomp.build(s, target="cuda", sizes={"B": 1, "T": 1 << 20}).cubin


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulator needs g++")
def test_emulated_cuda_lookback_scans():
    X, A = data(2, 300, 9)
    for rhs in ("A(b, t) * O(b, t - 1) + X(b, t)", "O(b, t - 1) + X(b, t)",
                "fmin(X(b, t), O(b, t - 1))"):
        op = recurrence(rhs)
        got = run_emulated(tcomp.build(scanned(op, 64, 3, rows=None), target="cuda"), X, A)
        np.testing.assert_allclose(got, loop_reference(op, X, A), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulator needs g++")
@pytest.mark.parametrize("rhs, dtype", [("A(b, t) * O(b, t - 1) + X(b, t)", "float"),
                                        ("O(b, t - 1) + X(b, t)", "float"),
                                        ("max(O(b, t - 1), X(b, t))", "float"),
                                        ("O(b, t - 1) + X(b, t)", "double")])
def test_emulated_lookback_over_windows_of_32_tiles(rhs, dtype):
    """Warp 0 looks back 32 tiles at a time (lane l at the l + 1-th predecessor),
    combines the window from the nearest published prefix, and goes on to the
    next window when none has one. The emulator runs blocks in order, so only
    every 40th (then 7th, 33rd) prefix is published: a tile walks back up to 40
    tiles, across a window's end; 97 tiles a row, rows serial and on blockIdx.y.
    float32 '+' and max: one status word a tile; the linear pair and double: two
    (each carrying the flag)."""
    op = recurrence(rhs, dtype)
    X, A = data(2, 32 * 2 * 97, 5)
    if dtype == "double":
        X, A = X.astype(np.float64), A.astype(np.float64)
    want = loop_reference(op, X, A)
    for every, rows in ((40, None), (7, "blockIdx.y"), (33, None)):
        k = tcomp.build(scanned(op, 32, 2, rows=rows), target="cuda")
        got = run_emulated(k, X, A, prefix_every=every)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.cuda
@pytest.mark.parametrize("B, T", [(1, 1), (1, 1000), (3, 150_001), (1, 1 << 24)])
def test_gpu_lookback_cumsum_against_torch(B, T):
    import torch
    x = torch.randn(B, T, device="cuda")
    s = scanned(recurrence("O(b, t - 1) + X(b, t)"), 256, 8, rows="blockIdx.y")
    got = torch.as_tensor(tcomp.build(s, target="cuda")(x, x))
    want = torch.cumsum(x.double(), 1)
    err = float((got.double() - want).norm() / max(float(want.norm()), 1e-30))
    assert err < 1e-5, err
    k = tcomp.build(scanned(recurrence("max(O(b, t - 1), X(b, t))"), 128, 4), target="cuda")
    torch.testing.assert_close(torch.as_tensor(k(x, x)), torch.cummax(x, 1).values, rtol=0,
                               atol=0)
    xi = torch.randint(-100, 100, (B, T), device="cuda", dtype=torch.int32)
    ki = tcomp.build(scanned(recurrence("O(b, t - 1) + X(b, t)", "int32"), 256, 8), "cuda")
    assert torch.equal(torch.as_tensor(ki(xi, xi)), torch.cumsum(xi, 1, dtype=torch.int32))


@pytest.mark.cuda
def test_gpu_lookback_linear_recurrence():
    import torch
    op = tcomp.op("""def f(bfloat16(B, T) A, bfloat16(B, T) X) -> (float32(B, T) O) {
        O(b, t) = X(b, t)
        O(b, t) = A(b, t) * O(b, t - 1) + X(b, t) where t in 1:T, ordered t
    }""")
    s = tcomp.Schedule(op)
    st = s["O.1"]
    b, t = st.axes
    st.scan(t, threads=256, items=8, lookback=True)
    st.bind(b, "blockIdx.y")
    a = (torch.rand(2, 200_003, device="cuda") * 0.5 + 0.5).to(torch.bfloat16)
    x = torch.randn(2, 200_003, device="cuda").to(torch.bfloat16)
    got = torch.as_tensor(tcomp.build(s, target="cuda")(a, x)).cpu().numpy()
    A, X = a.float().cpu().numpy().astype(np.float64), x.float().cpu().numpy().astype(np.float64)
    want = X.copy()
    for t in range(1, X.shape[1]):
        want[:, t] = A[:, t] * want[:, t - 1] + X[:, t]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("second, zero", [
    ("O(b, t) = O(b, t - 1) + X(b, t) where t in 1:T, ordered t", False),  # 0:1 and 1:T
    ("O(b, t) = O(b, t - 1) + X(b, t) where t in 2:T, ordered t", True),   # t = 1 unwritten
    ("O(b, t) = X(b, t) where t in 1:T, b in 1:B", True),                  # two dimensions
    ("O(b, t) +=! X(b, k) where t in 1:T", True),                          # a reduction
])
def test_a_first_point_and_its_recurrence_need_no_zero_fill(second, zero):
    """The output of a recurrence written as its first point, then the rest, is
    written whole: no zero fill (one pass over it less on the GPU)."""
    op = tcomp.op(f"""def f(float(B, T) X, float(B, K) Y) -> (O) {{
    O(b, t) = X(b, t) where t in 0:1
    {second}
}}""".replace("X(b, k)", "Y(b, k)"))
    assert ("O" in tcomp.lower(tcomp.Schedule(op)).zero_fill) is zero


@settings(max_examples=12, deadline=None, derandomize=True)
@given(T=st.integers(1, 400), B=st.integers(1, 3), threads=st.sampled_from([32, 64]),
       items=st.integers(1, 5), rhs=st.sampled_from(RHS),
       rows=st.sampled_from([None, "blockIdx.y", "blockIdx.z"]))
def test_property_random_sizes_and_tiles(T, B, threads, items, rhs, rows):
    """Random ranges, rows, block sizes, elements a thread and combines: the
    multi-block scan on the sim computes what the loop computes."""
    op = recurrence(rhs)
    X, A = data(B, T, T * 7 + B)
    got = tcomp.build(scanned(op, threads, items, rows), target="sim")(X, A)
    np.testing.assert_allclose(got, loop_reference(op, X, A), rtol=1e-4, atol=1e-4)
