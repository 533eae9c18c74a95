"""Convolution on the Hopper path (issue 24): the im2col stage filled by
TMA (lower/im2col.py, kernels/conv_sm90.py) on the sim against `evaluate`
and a float64 convolution, at sizes with tails, several filters and
paddings; the window recognised in its spellings; every refusal."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.kernels.conv_sm90 import conv2d_schedule, conv2d_source
from tcomp.kernels.gemm_sm90 import GemmConfig
from tcomp.lower.printer import program_to_text

from .conv_ops import CASES, close, data, reference, sizes_of


@pytest.mark.parametrize("filt,pad,sizes,cfg", CASES)
def test_sim_matches_evaluate_and_the_float64_convolution(filt, pad, sizes, cfg):
    op = tcomp.op(conv2d_source(filt, pad))
    sz = sizes_of(filt, sizes)
    k = tcomp.build(conv2d_schedule(op, GemmConfig(**cfg)), target="sim", sizes=sz)
    X, Wt = data(filt, sz)
    O = np.asarray(k(X, Wt))
    ev = np.asarray(tcomp.evaluate(op, X, Wt))
    ref = reference(filt, pad, X, Wt)
    close(O, ref)
    close(ev, ref)
    # the same products summed in another order: within one float16 rounding of evaluate's
    assert np.abs(O.astype(np.float64) - ev).max() <= 2.0 ** -10 * np.abs(ref).max()


def _program(src, sizes, cfg=GemmConfig(bm=128, bn=64, stages=3)):
    return tcomp.lower(conv2d_schedule(tcomp.op(src), cfg), sizes=sizes)


SIZES = dict(N=2, H=5, W=7, C=64, K=64, RSC=576)


def test_the_plan_names_the_window_and_the_map_is_im2col():
    p = _program(conv2d_source(), SIZES)
    (k,) = p.kernels
    assert "A im2col windows of X (3x3 filter, padding 1,1, 64 channels)" in k.plan
    (m, *_) = k.tensor_maps
    assert (m.buffer, m.box, m.im2col.lower, m.im2col.upper) == ("X", (128, 64), (-1, -1),
                                                                 (-1, -1))
    assert "im2col(lower=[-1, -1], upper=[-1, -1])" in program_to_text(p)


def test_symbolic_image_sizes_lower_with_the_channels_fixed():
    p = _program(conv2d_source(), {"C": 64, "RSC": 576})
    assert "im2col" in p.kernels[0].plan


def test_a_filter_bank_of_another_height_is_refused():
    """RSC left free: the product's k runs over min(R S C, RSC), not the windows."""
    _refused(conv2d_source(), r"loop 'r' runs over min\(576, RSC\), not over the R S C = 576",
             {"C": 64})


def test_bench_spelling_is_the_same_window():
    """bench/schedules.py's TC_CONV2D: r / (3 * C) and the sizes as H * W."""
    src = """def conv2d(float16(N, H, W, C) X, float16(R, K) Wt) -> (O) {
  Acol(p, r) = h >= 0 && h < H && w >= 0 && w < W ? X(n, h, w, r % C) : float16(0.0)
      where n = p / (H * W), h = p / W % H + r / (3 * C) - 1, w = p % W + r / C % 3 - 1,
            p in 0:N * H * W, r in 0:9 * C
  O(p, k) +=! Acol(p, r) * Wt(r, k)
}"""
    for sizes in ({"C": 64, "R": 576}, dict(N=2, H=5, W=7, C=64, K=64, R=576)):
        assert "3x3 filter, padding 1,1" in _program(src, sizes).kernels[0].plan


def test_r_over_c_over_s_is_the_same_window():
    src = conv2d_source().replace("r / (3 * C)", "r / C / 3")
    assert "r / C / 3" in src
    assert "3x3 filter" in _program(src, SIZES).kernels[0].plan


def _refused(src, match, sizes=SIZES):
    with pytest.raises(tcomp.LoweringError, match=match):
        _program(src, sizes)


def test_a_window_with_a_wrong_offset_is_refused():
    _refused(conv2d_source().replace("% 3 - 1", "% 3 - 2"), "no filter and padding give its "
             "reads X")


def test_a_condition_that_is_not_the_bounds_is_refused():
    _refused(conv2d_source().replace("w >= 0 && w < W", "w >= 1 && w < W"),
             "is not exactly that the read is inside X")


def test_a_missing_condition_is_refused():
    _refused(conv2d_source().replace("h >= 0 && ", ""), "is not exactly that the read is "
             "inside X")


def test_channels_not_a_multiple_of_64_are_refused():
    _refused(conv2d_source(), "reads 32 channels per pixel; each K tile of 64 must lie in one "
             "filter position", dict(SIZES, C=32, RSC=288))


def test_symbolic_channels_are_refused():
    _refused(conv2d_source(), "channels must be a multiple of 64 fixed at build", {})


def test_a_nonzero_padding_value_is_refused_by_tma():
    src = conv2d_source().replace("float16(0.0)", "float16(1.0)")
    s = tcomp.Schedule(tcomp.op(src))
    s["Acol"].set_scope("shared")
    with pytest.raises(tcomp.ScheduleError, match="the TMA engine computes only a "
                                                  "convolution's im2col matrix"):
        s["Acol"].tma()


def test_tma_on_a_global_temporary_is_refused():
    s = tcomp.Schedule(tcomp.op(conv2d_source()))
    with pytest.raises(tcomp.ScheduleError, match="is not a shared copy; .* or a "
                                                  "convolution's im2col matrix"):
        s["Acol"].tma()


def test_filters_given_as_k_by_rsc_take_the_k_major_b():
    src = conv2d_source().replace("float16(RSC, K) Wt", "float16(K, RSC) Wt").replace(
        "Wt(r, k)", "Wt(k, r)")
    p = _program(src, SIZES)
    assert "im2col windows" in p.kernels[0].plan and "B K-major" in p.kernels[0].plan
    k = tcomp.build(conv2d_schedule(tcomp.op(src), GemmConfig(bm=128, bn=64, stages=3)),
                    target="sim", sizes=SIZES)
    X, Wt = data((3, 3), SIZES, seed=3)
    close(k(X, np.ascontiguousarray(Wt.T)), reference((3, 3), (1, 1), X, Wt))


def test_a_stage_other_than_a_filled_by_im2col_is_refused():
    """The filter bank computed as a window: only A (M x K) may be one."""
    src = """def c(float16(N, H, W, C) X, float16(P, RSC) Y) -> (O) {
  Acol(p, r) = h >= 0 && h < H && w >= 0 && w < W ? X(n, h, w, r % C) : float16(0.0)
      where n = p / (H * W), h = p / W % H + r / (3 * C) - 1, w = p % W + r / C % 3 - 1,
            p in 0:N * H * W, r in 0:9 * C
  O(q, p) +=! Y(q, r) * Acol(p, r)
}"""
    sizes = dict(N=2, H=4, W=8, C=64, P=64, RSC=576)
    with pytest.raises(tcomp.LoweringError, match="must be the A operand"):
        tcomp.lower(conv2d_schedule(tcomp.op(src)), sizes=sizes)


def test_conv2d_source_checks_its_arguments():
    with pytest.raises(ValueError, match="0 <= padding < filter"):
        conv2d_source((3, 3), (3, 1))


def test_schedule_json_round_trip():
    s = conv2d_schedule(tcomp.op(conv2d_source()))
    s2 = tcomp.Schedule.from_json(tcomp.op(conv2d_source()), s.to_json())
    a, b = tcomp.lower(s, sizes=SIZES), tcomp.lower(s2, sizes=SIZES)
    assert a.kernels[0].plan == b.kernels[0].plan


FP8_CONV = conv2d_source(dtype="float8_e4m3fn").replace(
    "O(p, k) +=! Acol(p, r) * Wt(r, k)", "O(p, k) +=! float(Acol(p, r)) * float(Wt(k, r))").replace(
    "float8_e4m3fn(RSC, K) Wt", "float8_e4m3fn(K, RSC) Wt")  # fp8: both operands K-major


def test_fp8_channels_not_a_multiple_of_the_128_wide_k_tile_are_refused():
    """An fp8 K tile is 128 values: with C = 64 or 192 one tile spanned two filter
    positions and the second one's channels read as zeros (a silent wrong answer,
    found in review)."""
    for C in (64, 192):
        with pytest.raises(tcomp.LoweringError, match=f"reads {C} channels per pixel; each K "
                                                      f"tile of 128 must lie in one filter "
                                                      f"position"):
            tcomp.lower(conv2d_schedule(tcomp.op(FP8_CONV), GemmConfig(bm=128, bn=64, stages=3)),
                        sizes=dict(SIZES, C=C, RSC=9 * C))


def test_fp8_convolution_with_128_channels_matches_evaluate():
    import ml_dtypes
    sz = dict(N=1, H=4, W=5, C=128, K=64, RSC=1152)
    s = conv2d_schedule(tcomp.op(FP8_CONV), GemmConfig(bm=128, bn=64, stages=3))
    rng = np.random.default_rng(2)
    X = rng.integers(-3, 4, (1, 4, 5, 128)).astype(ml_dtypes.float8_e4m3fn)
    Wt = rng.integers(-3, 4, (64, 1152)).astype(ml_dtypes.float8_e4m3fn)
    got = np.asarray(tcomp.build(s, target="sim", sizes=sz)(X, Wt))
    assert np.array_equal(got, np.asarray(tcomp.evaluate(s.op, X, Wt)))


def test_the_window_found_once_is_not_served_for_another_definition():
    """lower/im2col.py keeps what it found per definition; StageDef's equality skips
    `lets`, where the window's offsets are: a wrong offset lowered after the right one
    must still be refused."""
    _program(conv2d_source(), SIZES)
    _refused(conv2d_source().replace("% 3 - 1", "% 3 - 2"), "no filter and padding give its "
             "reads X")
