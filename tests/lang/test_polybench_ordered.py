"""PolyBench/C 4.2 kernels that ordered recurrences (`where ordered t`) make
expressible: trisolv, lu, ludcmp, floyd-warshall and seidel-2d. Each TC
program is checked, by `tcomp.evaluate` and on the sim, against a reference
that transliterates the kernel's C loop nest (quoted in its docstring) into
Python on float64, at PolyBench-like small sizes (not multiples of anything).

How the C loops map: a loop carried dependence becomes an ordered index; the
C code's in-place updates inside a reduction loop (`x[i] -= L[i][j] * x[j]`,
then `x[i] /= L[i][i]`) become one reduction whose terms are guarded by the
triangle's condition (`j < i ? ... : ...`), the division distributed over the
terms (so the float order differs from C's by rounding: the comparisons allow
1e-12); a loop running downward (ludcmp's back substitution) is an ordered
index over the reversed positions."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

TRISOLV = """def trisolv(double(N, N) L, double(N) B) -> (X) {
    X(i) = B(i)
    X(i) +=! (j == i ? B(i) : j < i ? -L(i, j) * X(j) : 0.0) / L(i, i) where ordered i
}"""

# lu: B(i, j) = (A(i, j) - sum_{k < min(i, j)} B(i, k) B(k, j)) [/ B(j, j) when j < i]
LU_STATEMENT = """
    LU(i, j) = A(i, j)
    LU(i, j) +=! (j < i ? (k == j ? A(i, j) : k < j ? -LU(i, k) * LU(k, j) : 0.0) / LU(j, j)
                        : (k == i ? A(i, j) : k < i ? -LU(i, k) * LU(k, j) : 0.0))
        where k in 0:N, ordered i, ordered j"""
LU = "def lu(double(N, N) A) -> (LU) {" + LU_STATEMENT + "\n}"

# ludcmp: lu, then L y = b (unit diagonal), then U x = y from the last row up
# (R(p) = x(N - 1 - p): the downward loop as an ordered index over reversed positions).
LUDCMP = "def ludcmp(double(N, N) A, double(N) Bv) -> (X) {" + LU_STATEMENT + """
    Y(i) = Bv(i)
    Y(i) +=! (j == i ? Bv(i) : j < i ? -LU(i, j) * Y(j) : 0.0) where ordered i
    R(p) = Y(N - 1 - p) where p in 0:N
    R(p) +=! (q == p ? Y(N - 1 - p) : q < p ? -LU(N - 1 - p, N - 1 - q) * R(q) : 0.0)
        / LU(N - 1 - p, N - 1 - p) where q in 0:N, ordered p
    X(i) = R(N - 1 - i) where i in 0:N
}"""

# floyd-warshall with the steps' history P(k, i, j) (the C code's in-place matrix after step k)
FLOYD = """def floyd(float(N, N) D) -> (O) {
    P(k, i, j) = D(i, j) where k in 0:N
    P(k, i, j) = k == 0 ? min(D(i, j), D(i, 0) + D(0, j))
               : min(P(k - 1, i, j), P(k - 1, i, k) + P(k - 1, k, j)) where ordered k
    O(i, j) = P(N - 1, i, j)
}"""

# seidel-2d, two time steps (a def's statement count is fixed: one statement a step)
SEIDEL_STEP = """
    S(i, j) = i > 0 && i < N - 1 && j > 0 && j < N - 1 ?
        (S(i - 1, j - 1) + S(i - 1, j) + S(i - 1, j + 1) + S(i, j - 1) + S(i, j) + S(i, j + 1)
         + S(i + 1, j - 1) + S(i + 1, j) + S(i + 1, j + 1)) / 9.0 : S(i, j)
        where i in 0:N, j in 0:N, ordered i, ordered j"""
SEIDEL = "def seidel(double(N, N) A) -> (S) {\n    S(i, j) = A(i, j)" + SEIDEL_STEP * 2 + "\n}"


def c_trisolv(L, b):
    """for (i = 0; i < _PB_N; i++) {
         x[i] = b[i];
         for (j = 0; j < i; j++) x[i] -= L[i][j] * x[j];
         x[i] = x[i] / L[i][i]; }"""
    n = len(b)
    x = np.zeros(n)
    for i in range(n):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i][j] * x[j]
        x[i] = x[i] / L[i][i]
    return x


def c_lu(A):
    """for (i = 0; i < _PB_N; i++) {
         for (j = 0; j < i; j++) {
           for (k = 0; k < j; k++) A[i][j] -= A[i][k] * A[k][j];
           A[i][j] /= A[j][j]; }
         for (j = i; j < _PB_N; j++)
           for (k = 0; k < i; k++) A[i][j] -= A[i][k] * A[k][j]; }"""
    A = A.copy()
    n = len(A)
    for i in range(n):
        for j in range(i):
            for k in range(j):
                A[i][j] -= A[i][k] * A[k][j]
            A[i][j] /= A[j][j]
        for j in range(i, n):
            for k in range(i):
                A[i][j] -= A[i][k] * A[k][j]
    return A


def c_ludcmp(A, b):
    """(lu as above, w the running value), then
       for (i = 0; i < _PB_N; i++) {
         w = b[i]; for (j = 0; j < i; j++) w -= A[i][j] * y[j]; y[i] = w; }
       for (i = _PB_N-1; i >= 0; i--) {
         w = y[i]; for (j = i+1; j < _PB_N; j++) w -= A[i][j] * x[j]; x[i] = w / A[i][i]; }"""
    A = c_lu(A)
    n = len(b)
    y, x = np.zeros(n), np.zeros(n)
    for i in range(n):
        w = b[i]
        for j in range(i):
            w -= A[i][j] * y[j]
        y[i] = w
    for i in range(n - 1, -1, -1):
        w = y[i]
        for j in range(i + 1, n):
            w -= A[i][j] * x[j]
        x[i] = w / A[i][i]
    return x


def c_floyd(D):
    """for (k = 0; k < _PB_N; k++) for (i = 0; i < _PB_N; i++) for (j = 0; j < _PB_N; j++)
         path[i][j] = path[i][j] < path[i][k] + path[k][j]
                      ? path[i][j] : path[i][k] + path[k][j];"""
    p = D.copy()
    n = len(D)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                p[i][j] = p[i][j] if p[i][j] < p[i][k] + p[k][j] else p[i][k] + p[k][j]
    return p


def c_seidel(A, tsteps=2):
    """for (t = 0; t <= _PB_TSTEPS - 1; t++)
         for (i = 1; i <= _PB_N - 2; i++) for (j = 1; j <= _PB_N - 2; j++)
           A[i][j] = (A[i-1][j-1] + A[i-1][j] + A[i-1][j+1] + A[i][j-1] + A[i][j] + A[i][j+1]
                      + A[i+1][j-1] + A[i+1][j] + A[i+1][j+1]) / SCALAR_VAL(9.0);"""
    A = A.copy()
    n = len(A)
    for _ in range(tsteps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i][j] = (A[i-1][j-1] + A[i-1][j] + A[i-1][j+1] + A[i][j-1] + A[i][j]
                           + A[i][j+1] + A[i+1][j-1] + A[i+1][j] + A[i+1][j+1]) / 9.0
    return A


def diagonally_dominant(n, rng):
    return rng.uniform(-1, 1, (n, n)) + n * np.eye(n)


def both(src, *arrays):
    """(evaluate, the sim under the default schedule) of the program."""
    op = tcomp.op(src)
    return tcomp.evaluate(op, *arrays), tcomp.build(tcomp.Schedule(op), target="sim")(*arrays)


@pytest.mark.parametrize("n", [1, 7])
def test_trisolv(n):
    rng = np.random.default_rng(n)
    L, b = np.tril(diagonally_dominant(n, rng)), rng.uniform(-1, 1, n)
    for got in both(TRISOLV, L, b):
        np.testing.assert_allclose(got, c_trisolv(L, b), rtol=1e-12, atol=1e-12)


def test_lu():
    A = diagonally_dominant(9, np.random.default_rng(2))
    for got in both(LU, A):
        np.testing.assert_allclose(got, c_lu(A), rtol=1e-12, atol=1e-12)


def test_ludcmp():
    rng = np.random.default_rng(3)
    A, b = diagonally_dominant(8, rng), rng.uniform(-1, 1, 8)
    for got in both(LUDCMP, A, b):
        np.testing.assert_allclose(got, c_ludcmp(A, b), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(A @ c_ludcmp(A, b), b, atol=1e-12)  # the reference solves A x = b


def test_floyd_warshall():
    rng = np.random.default_rng(4)
    D = rng.integers(1, 20, (6, 6)).astype(np.float32)  # integer weights: exact in float32
    np.fill_diagonal(D, 0)
    for got in both(FLOYD, D):
        np.testing.assert_array_equal(got, c_floyd(D))


def test_seidel_2d():
    A = np.random.default_rng(5).uniform(0, 1, (10, 10))
    for got in both(SEIDEL, A):  # the C code's order of additions: bit for bit
        np.testing.assert_array_equal(got, c_seidel(A))
