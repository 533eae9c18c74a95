"""The input types each wgmma GEMM intrinsic of `tensorize` takes, and the k
of one ring slot (a 128-byte swizzled row of the inputs):

    wgmma_m64nNk16   bfloat16 x bfloat16 or float16 x float16     k tile 64
    wgmma_m64nNk32   fp8 x fp8: float8_e4m3fn or float8_e5m2,     k tile 128
                     either for either operand, both K-major

wgmma reads fp8 operands from shared memory K-major only (the PTX ISA's
wgmma has no transpose for 8-bit types): A read at (m, k) and B at (n, k).
"""
from __future__ import annotations

from ..errors import ScheduleError

SIXTEEN_BIT = ("bfloat16", "float16")
FP8 = ("float8_e4m3fn", "float8_e5m2")
K_TILE = {"16": 64, "32": 128}  # the intrinsic's k -> k per ring slot (128 bytes)


def check_wgmma_inputs(intrin: str, k: str, roles, dtype_names, definition) -> int:
    """The k tile of `intrin` (k "16" or "32") on a stage with contraction
    `roles` (A, A's subscripts, B, B's subscripts) and input types
    `dtype_names` (A's, B's); a ScheduleError when it cannot take them."""
    p = "tensorize"
    a, a_sub, b, b_sub = roles
    da, db = dtype_names
    if k == "16":
        if da != db or da not in SIXTEEN_BIT:
            hint = ("; fp8 inputs take wgmma_m64nNk32" if da in FP8 and db in FP8 else "")
            raise ScheduleError(f"{p}: {intrin} takes bfloat16 or float16 inputs (both the "
                                f"same), but '{a}' and '{b}' are {da} and {db}{hint}")
        return K_TILE[k]
    if da not in FP8 or db not in FP8:
        raise ScheduleError(f"{p}: {intrin} takes fp8 inputs (float8_e4m3fn or float8_e5m2, "
                            f"either for either operand), but '{a}' and '{b}' are {da} and "
                            f"{db}; bfloat16 and float16 take wgmma_m64nNk16")
    m, n = definition.spatial[-2:]
    for t, sub, own in ((a, a_sub, m), (b, b_sub, n)):
        if sub[-1] == own:
            raise ScheduleError(f"{p}: {intrin}: '{t}' is read at ({', '.join(sub)}), "
                                f"{own}-major; wgmma reads fp8 operands K-major only (A(m, k), "
                                f"B(n, k)): pass '{t}' with its reduction axis innermost (a "
                                f"transposed copy, e.g. a stage {t}T computed first)")
    return K_TILE[k]
