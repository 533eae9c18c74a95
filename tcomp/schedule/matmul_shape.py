"""The shape of a product a tensor-core intrinsic can compute: which operand
is A and which B, the m, n and k variables, the batch variables, and the
major order of each operand (Stage.tensorize's check; the lowering in
lower/tensor_cores.py derives the same from the loop nest).

    C[b..., m, n] += A[b'..., m, k] * B[b''..., k, n]

C's last two spatial variables are m and n; the ones before them are batch
variables (bmm's b, attention's head h), each read by either operand or by
both (an operand without one is shared by every batch). A is the operand
that reads m, B the one that reads n; each has its two matrix subscripts
last, in either order: A[.., k, m] (A "transposed", m contiguous) and
B[.., n, k] (B transposed, k contiguous) as well as the row-major forms.

    S(h, i, j) +=! Q(h, i, d) * K(h, j, d)   ->  A = Q (i, d), B = K (j, d), batch h
"""
from __future__ import annotations

import dataclasses

FORM = "C[..., m, n] += A[..., m, k] * B[..., k, n]"


@dataclasses.dataclass(frozen=True)
class MatmulShape:
    a: str
    b: str
    m: str
    n: str
    k: str
    batch: tuple[str, ...]
    a_trans: bool  # A read as A[..., k, m]
    b_trans: bool  # B read as B[..., n, k]

    @property
    def layout(self) -> str:
        """'NN', 'NT', 'TN' or 'TT' (A's order, then B's)."""
        return ("T" if self.a_trans else "N") + ("T" if self.b_trans else "N")


def matmul_shape(d) -> MatmulShape | str:
    """The MatmulShape of the StageDef `d`, or a sentence saying why its
    definition is not such a product (for an error message)."""
    from ..lang.ast import Binary, Cast, Index, Read
    if d.reduce_op != "+" or len(d.reduce) != 1 or len(d.spatial) < 2:
        return "it is not a sum over one reduction variable into two or more output dimensions"
    *batch, m, n = d.spatial
    (k,) = d.reduce
    e = d.rhs
    while isinstance(e, Cast):
        e = e.x
    if not (isinstance(e, Binary) and e.op == "*"):
        return "its value is not a product of two tensors"

    def read(x):
        while isinstance(x, Cast):
            x = x.x
        if isinstance(x, Read) and all(isinstance(i, Index) for i in x.args):
            return x.tensor, tuple(i.name for i in x.args)
        return None
    reads = [read(e.a), read(e.b)]
    if None in reads:
        return "its value is not a product of two tensors indexed by the loop variables"
    with_m = [r for r in reads if m in r[1]]
    with_n = [r for r in reads if n in r[1]]
    if len(with_m) != 1 or len(with_n) != 1 or with_m[0] is with_n[0]:
        return (f"its last two dimensions, '{m}' and '{n}', are not the rows of one operand "
                f"and the columns of the other (write the output with its batch dimensions "
                f"first: C(b, m, n))")
    (ta, ia), (tb, ib) = with_m[0], with_n[0]
    for t, idx, row, name in ((ta, ia, m, "A"), (tb, ib, n, "B")):
        text = f"{t}[{', '.join(idx)}]"
        if len(idx) < 2 or set(idx[-2:]) != {row, k}:
            return (f"operand {name} is read as {text}: its last two subscripts must be "
                    f"'{row}' and '{k}' (in either order)")
        lead = idx[:-2]
        if len(set(lead)) != len(lead) or not set(lead) <= set(batch):
            return (f"operand {name} is read as {text}: the subscripts before its last two "
                    f"must be distinct batch variables of the output "
                    f"({', '.join(batch) or 'none'})")
    # A[.., m, k] has k last, B[.., k, n] n last (row-major); the other order is transposed
    return MatmulShape(ta, tb, m, n, k, tuple(batch), a_trans=ia[-1] == m, b_trans=ib[-1] == k)
