"""kernels/attention_decode on the sim against tcomp.evaluate of the plain
attention comprehension (attention_sm90.source with S query rows): T not a
multiple of the parts or of the block, fewer keys than parts (empty parts),
D = 64 and 128, grouped-query K/V, several query rows, large scores, bf16;
the comprehension's own value against the plain one; its errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tcomp
from tcomp.errors import LoweringError
from tcomp.kernels import attention_decode, decode_source
from tcomp.kernels.attention_sm90 import source


def inputs(z, s, t, d, g=1, seed=0, mag=1.0):
    rng = np.random.default_rng(seed)
    Q = (rng.standard_normal((z, s, d)) * mag).astype(np.float32)
    K = rng.standard_normal((z // g, t, d)).astype(np.float32)
    V = rng.standard_normal((z // g, t, d)).astype(np.float32)
    return Q, K, V


def plain(d, g=1, dtype="float32"):
    return tcomp.op(source(dtype, None, False, d, g))


def check(T, parts, d, g=1, s=1, z=2, mag=1.0, threads=32):
    k = attention_decode(sizes={"D": d, "E": d}, parts=parts, dtype="float32", kv_group=g,
                         threads=threads, target="sim")
    Q, K, V = inputs(z, s, T, d, g, seed=T + parts, mag=mag)
    got = k(Q, K, V)
    want = tcomp.evaluate(plain(d, g), Q, K, V)
    assert got.shape == want.shape == (z, s, d)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("T, parts", [(37, 4), (33, 8), (64, 4)])
def test_t_not_a_multiple_of_the_parts_or_the_block(T, parts):
    check(T, parts, 64)


@pytest.mark.parametrize("T, parts", [(3, 8), (1, 4), (5, 16)])
def test_fewer_keys_than_parts_empty_parts_give_no_nan(T, parts):
    check(T, parts, 64)


def test_d128():
    check(21, 4, 128)


@pytest.mark.parametrize("g", [2, 4])
def test_grouped_query(g):
    check(19, 4, 64, g=g, z=4)


def test_several_query_rows():
    check(13, 4, 64, s=3)


def test_large_magnitude_scores():
    check(29, 4, 64, mag=300.0)                # scores ~ +-2e3: exp overflows without the shift


def test_bfloat16_inputs_on_the_sim():
    k = attention_decode(sizes={"D": 64, "E": 64}, parts=4, target="sim")
    Q, K, V = inputs(2, 1, 23, 64)
    from tcomp.lang import dtypes
    bf = dtypes.bfloat16.numpy
    Q, K, V = (x.astype(bf) for x in (Q, K, V))
    got = np.asarray(k(Q, K, V), np.float32)
    want = np.asarray(tcomp.evaluate(plain(64, 1, "bfloat16"), Q, K, V), np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


@settings(max_examples=20, deadline=None)
@given(T=st.integers(1, 40), parts=st.integers(1, 12), g=st.sampled_from([1, 2]))
def test_the_split_comprehension_equals_the_plain_one(T, parts, g):
    op = tcomp.op(decode_source("float32", None, 8, parts, g))
    Q, K, V = inputs(2, 1, T, 8, g, seed=T)
    np.testing.assert_allclose(tcomp.evaluate(op, Q, K, V),
                               tcomp.evaluate(plain(8, g), Q, K, V), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw, msg", [
    (dict(parts=0), "attention_decode: parts = 0; at least 1"),
    (dict(kv_group=0), "attention_decode: kv_group = 0; at least 1"),
    (dict(sizes={"D": 64}), "attention_decode: give the head sizes D and E in sizes"),
])
def test_errors(kw, msg):
    kw = {"sizes": {"D": 64, "E": 64}, "target": "sim", **kw}
    with pytest.raises(LoweringError) as e:
        attention_decode(**kw)
    assert str(e.value) == msg


def test_threads_that_do_not_hold_whole_rows_are_a_schedule_error():
    from tcomp.errors import ScheduleError
    from tcomp.kernels import decode_schedule
    op = tcomp.op(decode_source("bfloat16", None, 64, 4))
    with pytest.raises(ScheduleError) as e:
        decode_schedule(op, 64, threads=20)
    assert str(e.value) == ("attention_decode: D = 64 in pieces of 8 over 20 threads: D must be "
                            "a multiple of 8 and threads of D / 8")


def test_the_scores_load_k_in_16_byte_vectors():
    """The decision is visible in the IR: K's loads in the scores kernel are
    16-byte vector accesses (the generated CUDA: one 16-byte load a thread)."""
    from tcomp.kernels import decode_schedule
    op = tcomp.op(decode_source("bfloat16", None, 128, 8))
    prog = tcomp.lower(decode_schedule(op, 128), sizes={"D": 128, "E": 128})
    sc = prog.kernels[0]
    assert sc.name == "attention_decode_Sc" and tuple(e.value for e in sc.block) == (16, 8, 1)
    text = repr(sc)
    assert "VectorAccess(bytes=16, loads=(Load(buffer='K'" in text


def test_the_cuda_kernel_compiles_to_a_cubin():
    """NVRTC compiles the seven kernels here (no GPU needed)."""
    k = attention_decode(sizes={"D": 128, "E": 128}, parts=8)
    assert k.cubin[:4] == b"\x7fELF"
    assert k.source.count("__global__") == 7
