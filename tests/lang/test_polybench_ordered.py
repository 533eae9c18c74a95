"""PolyBench/C 4.2 kernels that ordered recurrences (`where ordered t`) make
expressible: trisolv, lu, ludcmp, floyd-warshall, seidel-2d, deriche, adi, nussinov
and gramschmidt. Each TC program is checked, by `tcomp.evaluate` and on the sim,
against a reference that transliterates the kernel's C loop nest (quoted in its
docstring, or followed line for line) into Python on float64 (float32 for deriche, whose DATA_TYPE is float, and for
floyd-warshall's integer weights; int32 for nussinov), at PolyBench-like small sizes
(not multiples of anything).

How the C loops map: a loop carried dependence becomes an ordered index; the
C code's in-place updates inside a reduction loop (`x[i] -= L[i][j] * x[j]`,
then `x[i] /= L[i][i]`) become one reduction whose terms are guarded by the
triangle's condition (`j < i ? ... : ...`), the division distributed over the
terms (so the float order differs from C's by rounding: the comparisons allow
1e-12); a loop running downward (ludcmp's back substitution) is an ordered
index over the reversed positions.

The others: deriche's scalars carried along a row (`xm1`, `ym1`, `ym2`) are reads
at `j - 1` and `j - 2`, guarded (0 before the row starts, as the scalars' 0.0), its
coefficients 0-d temporaries computed as in C; adi's time loop is a fixed number of
steps (TSTEPS, one group of statements a step, as seidel-2d) with a tensor per step
and sweep (a tensor cannot be written again after a statement read it), its two
downward sweeps over reversed positions; nussinov's `max_score` updates and its k loop
are one `max=!` reduction over k whose positions outside `i < k < j` repeat the fixed
terms (max is idempotent), rows over reversed positions; gramschmidt's k loop holds
four dependent steps (the column norm, Q's column, R's row, the update of A), which
cannot be four statements (statements do not share an ordered loop): they are four
consecutive points of one ordered index s over a history H(s, i, j) of A, with a row
M below A holding the norm and R's row, as floyd-warshall keeps P(k, i, j)."""
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


# deriche (DATA_TYPE float): the coefficients as in C (a5..a8 = a1..a4, c1 = c2 = 1), then the
# four recurrences; y2's downward loops over reversed positions (Y2(i, p) = y2[i][H - 1 - p]).
# Each recurrence statement follows a zero fill (an ordered statement updates a written tensor).
DERICHE = """def deriche(float alpha, float(W, H) In) -> (Out) {
    K = (1.0 - exp(-alpha)) * (1.0 - exp(-alpha)) / (1.0 + 2.0 * alpha * exp(-alpha) - exp(2.0 * alpha))
    A2 = K * exp(-alpha) * (alpha - 1.0)
    A3 = K * exp(-alpha) * (alpha + 1.0)
    A4 = -K * exp(-2.0 * alpha)
    B1 = pow(2.0, -alpha)
    B2 = -exp(-2.0 * alpha)
    Y1(i, j) = 0.0 where i in 0:W, j in 0:H
    Y1(i, j) = K * In(i, j) + A2 * (j >= 1 ? In(i, j - 1) : 0.0)
             + B1 * (j >= 1 ? Y1(i, j - 1) : 0.0) + B2 * (j >= 2 ? Y1(i, j - 2) : 0.0)
        where i in 0:W, j in 0:H, ordered j
    Y2(i, p) = 0.0 where i in 0:W, p in 0:H
    Y2(i, p) = A3 * (p >= 1 ? In(i, H - p) : 0.0) + A4 * (p >= 2 ? In(i, H + 1 - p) : 0.0)
             + B1 * (p >= 1 ? Y2(i, p - 1) : 0.0) + B2 * (p >= 2 ? Y2(i, p - 2) : 0.0)
        where i in 0:W, p in 0:H, ordered p
    T(i, j) = 1.0 * (Y1(i, j) + Y2(i, H - 1 - j))
    Y3(i, j) = 0.0 where i in 0:W, j in 0:H
    Y3(i, j) = K * T(i, j) + A2 * (i >= 1 ? T(i - 1, j) : 0.0)
             + B1 * (i >= 1 ? Y3(i - 1, j) : 0.0) + B2 * (i >= 2 ? Y3(i - 2, j) : 0.0)
        where i in 0:W, j in 0:H, ordered i
    Y4(p, j) = 0.0 where p in 0:W, j in 0:H
    Y4(p, j) = A3 * (p >= 1 ? T(W - p, j) : 0.0) + A4 * (p >= 2 ? T(W + 1 - p, j) : 0.0)
             + B1 * (p >= 1 ? Y4(p - 1, j) : 0.0) + B2 * (p >= 2 ? Y4(p - 2, j) : 0.0)
        where p in 0:W, j in 0:H, ordered p
    Out(i, j) = 1.0 * (Y3(i, j) + Y4(W - 1 - i, j))
}"""


def adi_source(tsteps):
    """adi with `tsteps` time steps: the constants as in C (TSTEPS a literal), p's two sweeps
    once (they read no data, the same every step), then each step's column sweep (QC, V through
    its reversed positions RV) and row sweep (QR, U through RU), tensors named by the step.
    The fills are double(...): a tensor's type is its first statement's (a bare 0.0 would make
    it float32, and the double statements after it would round into it)."""
    head = f"""def adi(double(N, N) U0) -> (U{tsteps}) {{
    DX = 1.0 / double(N)
    DY = 1.0 / double(N)
    DT = 1.0 / double({tsteps})
    MUL1 = 2.0 * DT / (DX * DX)
    MUL2 = 1.0 * DT / (DY * DY)
    A = -MUL1 / 2.0
    B = 1.0 + MUL1
    C = A
    D = -MUL2 / 2.0
    E = 1.0 + MUL2
    F = D
    PC(i, j) = double(0.0) where i in 1:N-1, j in 0:N-1
    PC(i, j) = -C / (A * PC(i, j - 1) + B) where i in 1:N-1, j in 1:N-1, ordered j
    PR(i, j) = double(0.0) where i in 1:N-1, j in 0:N-1
    PR(i, j) = -F / (D * PR(i, j - 1) + E) where i in 1:N-1, j in 1:N-1, ordered j"""
    step = """
    QC{t}(i, j) = double(1.0) where i in 1:N-1, j in 0:N-1
    QC{t}(i, j) = (-D * U{s}(j, i - 1) + (1.0 + 2.0 * D) * U{s}(j, i) - F * U{s}(j, i + 1)
                - A * QC{t}(i, j - 1)) / (A * PC(i, j - 1) + B) where i in 1:N-1, j in 1:N-1, ordered j
    RV{t}(i, r) = double(1.0) where i in 1:N-1, r in 0:N-1
    RV{t}(i, r) = PC(i, N - 1 - r) * RV{t}(i, r - 1) + QC{t}(i, N - 1 - r)
        where i in 1:N-1, r in 1:N-1, ordered r
    V{t}(j, i) = j == 0 ? 1.0 : RV{t}(i, N - 1 - j) where j in 0:N, i in 1:N-1
    QR{t}(i, j) = double(1.0) where i in 1:N-1, j in 0:N-1
    QR{t}(i, j) = (-A * V{t}(i - 1, j) + (1.0 + 2.0 * A) * V{t}(i, j) - C * V{t}(i + 1, j)
                - D * QR{t}(i, j - 1)) / (D * PR(i, j - 1) + E) where i in 1:N-1, j in 1:N-1, ordered j
    RU{t}(i, r) = double(1.0) where i in 1:N-1, r in 0:N-1
    RU{t}(i, r) = PR(i, N - 1 - r) * RU{t}(i, r - 1) + QR{t}(i, N - 1 - r)
        where i in 1:N-1, r in 1:N-1, ordered r
    U{t}(i, j) = i == 0 || i == N - 1 ? U{s}(i, j) : j == 0 ? 1.0 : RU{t}(i, N - 1 - j)
        where i in 0:N, j in 0:N"""
    return head + "".join(step.format(t=t, s=t - 1) for t in range(1, tsteps + 1)) + "\n}"


# nussinov, rows over reversed positions (R(p, j) = table[N - 1 - p][j]); for j <= i the table
# keeps its value; otherwise the max over k of table[i][k] + table[k+1][j] (i < k < j) and of the
# four fixed terms, which the other positions of k repeat.
NUSSINOV = """def nussinov(int8(N) Seq, int32(N, N) T0) -> (Table) {
    R(p, j) = T0(N - 1 - p, j) where p in 0:N, j in 0:N
    R(p, j) max=! j > N - 1 - p ?
        (N - 1 - p < k && k < j ? R(p, k) + R(N - 2 - k, j)
         : max(max(max(T0(N - 1 - p, j), R(p, j - 1)), R(p - 1, j)),
               R(p - 1, j - 1) + (N - 1 - p < j - 1 ? (Seq(N - 1 - p) + Seq(j) == 3 ? 1 : 0) : 0)))
        : T0(N - 1 - p, j)
        where p in 0:N, j in 0:N, k in 0:N, ordered p, ordered j
    Table(i, j) = R(N - 1 - i, j) where i in 0:N, j in 0:N
}"""

# gramschmidt: step k of the C loop is the points s = 4k + 1 .. 4k + 4 (ph = 0..3) of H(s, i, j),
# A's history (rows 0..M-1) and a row M: ph 0 puts nrm in H(s, M, k); ph 1 puts Q's column in A's
# column k and R[k][k] = sqrt(nrm) below it; ph 2 puts R[k][j] (j > k) in row M; ph 3 updates
# A's columns j > k. A reduction over l reduces only where C does (the other terms: the value at
# l == 0, 0.0 elsewhere). A's column j is final from step j on (Aout reads it at s = 4j + 1).
GRAMSCHMIDT = """def gramschmidt(double(M, N) A) -> (R, Q, Aout) {
    H(s, i, j) = i < M ? A(i, j) : 0.0 where s in 0:4*N+1, i in 0:M+1, j in 0:N
    H(s, i, j) +=! ph == 0 ? (i == M && j == k ? H(s - 1, l, k) * H(s - 1, l, k)
                              : l == 0 ? H(s - 1, i, j) : 0.0)
                 : ph == 1 ? (l == 0 ? (j == k ? (i < M ? H(s - 1, i, k) / sqrt(H(s - 1, M, k))
                                                 : sqrt(H(s - 1, M, k)))
                                       : H(s - 1, i, j)) : 0.0)
                 : ph == 2 ? (i == M && j > k ? H(s - 1, l, k) * H(s - 1, l, j)
                              : l == 0 ? H(s - 1, i, j) : 0.0)
                 : (l == 0 ? (i < M && j > k ? H(s - 1, i, j) - H(s - 1, i, k) * H(s - 1, M, j)
                                             : H(s - 1, i, j)) : 0.0)
        where s in 1:4*N+1, i in 0:M+1, j in 0:N, l in 0:M, ph = (s - 1) % 4, k = (s - 1) / 4,
              ordered s
    R(k, j) = j < k ? 0.0 : H(4 * k + 3, M, j) where k in 0:N, j in 0:N
    Q(i, k) = H(4 * N, i, k) where i in 0:M, k in 0:N
    Aout(i, j) = H(4 * j + 1, i, j) where i in 0:M, j in 0:N
}"""


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


def c_deriche(alpha, imgIn):
    """The C code line for line, in float32 (DATA_TYPE float: EXP_FUN expf, POW_FUN powf):
       k = (1.0f-expf(-alpha))*(1.0f-expf(-alpha))/(1.0f+2.0f*alpha*expf(-alpha)-expf(2.0f*alpha));
       a1 = a5 = k; a2 = a6 = k*expf(-alpha)*(alpha-1.0f); a3 = a7 = k*expf(-alpha)*(alpha+1.0f);
       a4 = a8 = -k*expf(-2.0f*alpha); b1 = powf(2.0f,-alpha); b2 = -expf(-2.0f*alpha); c1 = c2 = 1;
       for (i=0; i<_PB_W; i++) { ym1 = 0; ym2 = 0; xm1 = 0;
         for (j=0; j<_PB_H; j++) { y1[i][j] = a1*imgIn[i][j] + a2*xm1 + b1*ym1 + b2*ym2;
           xm1 = imgIn[i][j]; ym2 = ym1; ym1 = y1[i][j]; } }
       (then y2 from j = _PB_H-1 down, imgOut = c1*(y1 + y2), the same two along columns
       from imgOut, and imgOut = c2*(y1 + y2))"""
    f, exp = np.float32, np.exp
    w, h = imgIn.shape
    k = (f(1.0) - exp(-alpha)) * (f(1.0) - exp(-alpha)) / (f(1.0) + f(2.0) * alpha * exp(-alpha)
                                                          - exp(f(2.0) * alpha))
    a1 = a5 = k
    a2 = a6 = k * exp(-alpha) * (alpha - f(1.0))
    a3 = a7 = k * exp(-alpha) * (alpha + f(1.0))
    a4 = a8 = -k * exp(f(-2.0) * alpha)
    b1 = np.power(f(2.0), -alpha)
    b2 = -exp(f(-2.0) * alpha)
    c1 = c2 = f(1)
    y1, y2, imgOut = np.zeros((w, h), f), np.zeros((w, h), f), np.zeros((w, h), f)
    for i in range(w):
        ym1 = ym2 = xm1 = f(0.0)
        for j in range(h):
            y1[i][j] = a1 * imgIn[i][j] + a2 * xm1 + b1 * ym1 + b2 * ym2
            xm1 = imgIn[i][j]
            ym2 = ym1
            ym1 = y1[i][j]
    for i in range(w):
        yp1 = yp2 = xp1 = xp2 = f(0.0)
        for j in range(h - 1, -1, -1):
            y2[i][j] = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
            xp2 = xp1
            xp1 = imgIn[i][j]
            yp2 = yp1
            yp1 = y2[i][j]
    for i in range(w):
        for j in range(h):
            imgOut[i][j] = c1 * (y1[i][j] + y2[i][j])
    for j in range(h):
        tm1 = ym1 = ym2 = f(0.0)
        for i in range(w):
            y1[i][j] = a5 * imgOut[i][j] + a6 * tm1 + b1 * ym1 + b2 * ym2
            tm1 = imgOut[i][j]
            ym2 = ym1
            ym1 = y1[i][j]
    for j in range(h):
        tp1 = tp2 = yp1 = yp2 = f(0.0)
        for i in range(w - 1, -1, -1):
            y2[i][j] = a7 * tp1 + a8 * tp2 + b1 * yp1 + b2 * yp2
            tp2 = tp1
            tp1 = imgOut[i][j]
            yp2 = yp1
            yp1 = y2[i][j]
    for i in range(w):
        for j in range(h):
            imgOut[i][j] = c2 * (y1[i][j] + y2[i][j])
    return imgOut


def c_adi(u, tsteps):
    """The C code line for line (u updated in place; v, p, q zero-filled here, as the C code
    reads only elements it wrote):
       DX = 1.0/(DATA_TYPE)_PB_N; DY = 1.0/(DATA_TYPE)_PB_N; DT = 1.0/(DATA_TYPE)_PB_TSTEPS;
       B1 = 2.0; B2 = 1.0; mul1 = B1 * DT / (DX * DX); mul2 = B2 * DT / (DY * DY);
       a = -mul1 / 2.0; b = 1.0+mul1; c = a; d = -mul2 / 2.0; e = 1.0+mul2; f = d;
       for (t=1; t<=_PB_TSTEPS; t++) { (the column sweep, then the row sweep, below) }"""
    u = u.copy()
    n = len(u)
    v, p, q = np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
    DX = 1.0 / n
    DY = 1.0 / n
    DT = 1.0 / tsteps
    B1 = 2.0
    B2 = 1.0
    mul1 = B1 * DT / (DX * DX)
    mul2 = B2 * DT / (DY * DY)
    a = -mul1 / 2.0
    b = 1.0 + mul1
    c = a
    d = -mul2 / 2.0
    e = 1.0 + mul2
    f = d
    for _ in range(1, tsteps + 1):
        for i in range(1, n - 1):  # column sweep
            v[0][i] = 1.0
            p[i][0] = 0.0
            q[i][0] = v[0][i]
            for j in range(1, n - 1):
                p[i][j] = -c / (a * p[i][j-1] + b)
                q[i][j] = (-d * u[j][i-1] + (1.0 + 2.0 * d) * u[j][i] - f * u[j][i+1]
                           - a * q[i][j-1]) / (a * p[i][j-1] + b)
            v[n-1][i] = 1.0
            for j in range(n - 2, 0, -1):
                v[j][i] = p[i][j] * v[j+1][i] + q[i][j]
        for i in range(1, n - 1):  # row sweep
            u[i][0] = 1.0
            p[i][0] = 0.0
            q[i][0] = u[i][0]
            for j in range(1, n - 1):
                p[i][j] = -f / (d * p[i][j-1] + e)
                q[i][j] = (-a * v[i-1][j] + (1.0 + 2.0 * a) * v[i][j] - c * v[i+1][j]
                           - d * q[i][j-1]) / (d * p[i][j-1] + e)
            u[i][n-1] = 1.0
            for j in range(n - 2, 0, -1):
                u[i][j] = p[i][j] * u[i][j+1] + q[i][j]
    return u


def c_nussinov(seq, table):
    """#define match(b1, b2) (((b1)+(b2)) == 3 ? 1 : 0)
       #define max_score(s1, s2) ((s1 >= s2) ? s1 : s2)
       for (i = _PB_N-1; i >= 0; i--) for (j=i+1; j<_PB_N; j++) {
         if (j-1>=0) table[i][j] = max_score(table[i][j], table[i][j-1]);
         if (i+1<_PB_N) table[i][j] = max_score(table[i][j], table[i+1][j]);
         if (j-1>=0 && i+1<_PB_N) {
           if (i<j-1) table[i][j] = max_score(table[i][j], table[i+1][j-1]+match(seq[i], seq[j]));
           else table[i][j] = max_score(table[i][j], table[i+1][j-1]); }
         for (k=i+1; k<j; k++)
           table[i][j] = max_score(table[i][j], table[i][k] + table[k+1][j]); }"""
    table = table.copy()
    n = len(seq)

    def match(b1, b2):
        return 1 if int(b1) + int(b2) == 3 else 0

    def max_score(s1, s2):
        return s1 if s1 >= s2 else s2

    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            if j - 1 >= 0:
                table[i][j] = max_score(table[i][j], table[i][j-1])
            if i + 1 < n:
                table[i][j] = max_score(table[i][j], table[i+1][j])
            if j - 1 >= 0 and i + 1 < n:
                if i < j - 1:
                    table[i][j] = max_score(table[i][j], table[i+1][j-1] + match(seq[i], seq[j]))
                else:
                    table[i][j] = max_score(table[i][j], table[i+1][j-1])
            for k in range(i + 1, j):
                table[i][j] = max_score(table[i][j], table[i][k] + table[k+1][j])
    return table


def c_gramschmidt(A, n):
    """for (k = 0; k < _PB_N; k++) {
         nrm = 0.0; for (i = 0; i < _PB_M; i++) nrm += A[i][k] * A[i][k];
         R[k][k] = SQRT_FUN(nrm);
         for (i = 0; i < _PB_M; i++) Q[i][k] = A[i][k] / R[k][k];
         for (j = k + 1; j < _PB_N; j++) {
           R[k][j] = 0.0; for (i = 0; i < _PB_M; i++) R[k][j] += Q[i][k] * A[i][j];
           for (i = 0; i < _PB_M; i++) A[i][j] = A[i][j] - Q[i][k] * R[k][j]; } }
    (R's lower triangle, which C leaves as it was, is 0 here.)"""
    A = A.copy()
    m = len(A)
    R, Q = np.zeros((n, n)), np.zeros((m, n))
    for k in range(n):
        nrm = 0.0
        for i in range(m):
            nrm += A[i][k] * A[i][k]
        R[k][k] = np.sqrt(nrm)
        for i in range(m):
            Q[i][k] = A[i][k] / R[k][k]
        for j in range(k + 1, n):
            R[k][j] = 0.0
            for i in range(m):
                R[k][j] += Q[i][k] * A[i][j]
            for i in range(m):
                A[i][j] = A[i][j] - Q[i][k] * R[k][j]
    return R, Q, A


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


@pytest.mark.parametrize("w, h", [(7, 5), (1, 3), (4, 1)])
def test_deriche(w, h):
    alpha = np.float32(0.25)  # PolyBench's init_array: alpha = 0.25, imgIn[i][j] as below
    img = np.array([[(313 * i + 991 * j) % 65536 for j in range(h)] for i in range(w)],
                   np.float32) / np.float32(65535.0)
    want = c_deriche(alpha, img)
    for got in both(DERICHE, alpha, img):
        assert got.dtype == np.float32
        # exp and pow are the only functions; every sum is in the C code's order
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n, tsteps", [(6, 3), (3, 1)])
def test_adi(n, tsteps):
    init = np.array([[(i + n - j) / n for j in range(n)] for i in range(n)])  # PolyBench's u
    for u in (init, np.random.default_rng(6).uniform(-1, 1, (n, n))):
        for got in both(adi_source(tsteps), u):  # the C code's operations in its order: bit for bit
            np.testing.assert_array_equal(got, c_adi(u, tsteps))


@pytest.mark.parametrize("n", [1, 2, 9])
def test_nussinov(n):
    rng = np.random.default_rng(7)
    cases = [(np.array([(i + 1) % 4 for i in range(n)], np.int8), np.zeros((n, n), np.int32)),
             (rng.integers(0, 4, n).astype(np.int8), rng.integers(0, 3, (n, n)).astype(np.int32))]
    for seq, table in cases:  # PolyBench's init_array first, then a table that does not start at 0
        for got in both(NUSSINOV, seq, table):
            np.testing.assert_array_equal(got, c_nussinov(seq, table))


@pytest.mark.parametrize("m, n", [(5, 4), (7, 3), (1, 1)])
def test_gramschmidt(m, n):
    A = np.random.default_rng(m).uniform(-1, 1, (m, n))
    want = c_gramschmidt(A, n)
    for got in both(GRAMSCHMIDT, A):
        for g, w in zip(got, want):  # (R, Q, A)
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    R, Q, _ = want
    np.testing.assert_allclose(Q @ R, A, atol=1e-12)  # the reference factors A


def gpu_cases():
    rng = np.random.default_rng(9)
    img = rng.uniform(0, 1, (7, 5)).astype(np.float32)
    u = rng.uniform(-1, 1, (6, 6))
    seq, table = rng.integers(0, 4, 9).astype(np.int8), np.zeros((9, 9), np.int32)
    A = rng.uniform(-1, 1, (5, 4))
    return {"deriche": (DERICHE, (np.float32(0.25), img), (c_deriche(np.float32(0.25), img),), 1e-5),
            "adi": (adi_source(3), (u,), (c_adi(u, 3),), 1e-12),
            "nussinov": (NUSSINOV, (seq, table), (c_nussinov(seq, table),), 0),
            "gramschmidt": (GRAMSCHMIDT, (A,), c_gramschmidt(A, 4), 1e-12)}


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["deriche", "adi", "nussinov", "gramschmidt"])
def test_gpu_default_schedule(name):
    """On the GPU under the default schedule (multiply-adds may contract to FMAs there:
    the float comparisons allow rounding)."""
    src, args, want, tol = gpu_cases()[name]
    got = tcomp.build(tcomp.Schedule(tcomp.op(src)), target="cuda")(*args)
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=tol, atol=tol)
