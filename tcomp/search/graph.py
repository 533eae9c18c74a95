"""The op's stage dataflow graph, as a networkx DiGraph: what the search's
rules read to decide how each stage may be scheduled.

Nodes are the stages of the default schedule (`Schedule(op).states`: one per
statement, plus the snapshot stages of in-place updates), in statement order.
An edge P -> C means stage C reads a tensor that P wrote before it (its
producer); a stage that continues a tensor (a reduction without `!`, a second
statement writing it) also depends on the earlier writers of that tensor. The
edge's `tensors` attribute names what flows along it.

Each node carries:
  kind      'matmul'       C[m, n] += A[m, k] * B[k, n] (casts allowed): what
                           `tensorize` accepts when the inputs are half types
            'reduction'    any other statement with a reduction
            'elementwise'  every read indexed by the stage's own spatial
                           variables in their order (broadcasts allowed)
            'injective'    reads at other affine subscripts (transpose, shift,
                           stride, window), no reduction
            'gather'       a subscript that reads a tensor (embedding lookup)
  tensor, spatial, reduce, reduce_op, dtype (the tensor's dtype name),
  output (returned by the op), writers (statements writing the tensor),
  order (position in statement order), origin ('statement' or 'snapshot'),
  tensor_core (a 'matmul' whose operands and accumulator an intrinsic of
  tensor_intrinsics.TENSORIZE takes), tc_product (the MatmulShape of any
  product `tensorize` takes with those types: the 'matmul' ones and also
  batched products and transposed operands, which are 'reduction's; else
  None), operands ((A, B) of a 'matmul'),
  reads (the tensors its statement reads), subscripts (tiling.affine_reads:
  per tensor read, per dimension its ((index, coefficient), ...) and whether
  the offset is zero; None when a read is not affine or one tensor is read at
  two subscripts).
"""
from __future__ import annotations

import networkx as nx

from ..lang.ast import Index, Read, walk
from ..schedule import Schedule
from ..schedule.matmul_shape import matmul_shape
from ..schedule.primitives import _matmul_roles
from ..schedule.tensor_intrinsics import TENSORIZE
from ..schedule.tiling import affine_reads

KINDS = ("matmul", "reduction", "elementwise", "injective", "gather")


def stage_graph(op_or_schedule) -> nx.DiGraph:
    """The stage dataflow graph of an Op (or of a fresh Schedule of it)."""
    s = op_or_schedule if isinstance(op_or_schedule, Schedule) else Schedule(op_or_schedule)
    op = s.op
    outputs = {t.name for t in op.outputs}
    g = nx.DiGraph(op=op.name)
    names = list(s.states)
    for i, name in enumerate(names):
        st = s.states[name]
        d = st.definition
        kind, roles = classify(d)
        dtype = s.tensors[d.tensor][0]
        g.add_node(name, tensor=d.tensor, spatial=tuple(d.spatial), reduce=tuple(d.reduce),
                   reduce_op=d.reduce_op, dtype=dtype.name, output=d.tensor in outputs,
                   writers=len(s.writers(d.tensor)), order=i, origin=st.origin, kind=kind,
                   operands=roles, reads=tuple(sorted(d.reads())), subscripts=affine_reads(d),
                   tensor_core=roles is not None and _tensor_core(s, d, roles),
                   tc_product=_tc_product(s, d))
    for i, name in enumerate(names):
        d = s.states[name].definition
        needs = set(d.reads())
        if not d.init or len(s.writers(d.tensor)) > 1:
            needs.add(d.tensor)  # ordered after the earlier writers of its own tensor
        for t in needs:
            for w in s.writers(t):
                if g.nodes[w]["order"] < i:
                    if g.has_edge(w, name):
                        g.edges[w, name]["tensors"].add(t)
                    else:
                        g.add_edge(w, name, tensors={t})
    return g


def topological_order(g: nx.DiGraph) -> list[str]:
    """Stages producers first, ties in statement order (deterministic)."""
    return list(nx.lexicographical_topological_sort(g, key=lambda n: g.nodes[n]["order"]))


def producers(g: nx.DiGraph, stage: str) -> list[str]:
    return sorted(g.predecessors(stage), key=lambda n: g.nodes[n]["order"])


def consumers(g: nx.DiGraph, stage: str) -> list[str]:
    return sorted(g.successors(stage), key=lambda n: g.nodes[n]["order"])


def classify(d) -> tuple[str, tuple[str, str] | None]:
    """(kind, matmul operands or None) of a StageDef (see the module docstring)."""
    exprs = [d.rhs, *d.lets.values()]
    if d.reduce or d.reduce_op is not None:
        if d.reduce_op == "+" and len(d.spatial) == 2 and len(d.reduce) == 1:
            roles = _matmul_roles(d)
            if roles is not None:
                return "matmul", roles
        return "reduction", None
    reads = [x for e in exprs for x in walk(e) if isinstance(x, Read)]
    if any(isinstance(y, Read) for r in reads for a in r.args for y in walk(a)):
        return "gather", None
    for r in reads:
        if not all(isinstance(a, Index) and a.name in d.spatial for a in r.args):
            return "injective", None
        pos = [d.spatial.index(a.name) for a in r.args]
        if pos != sorted(set(pos)):  # a permutation or a repeated index: not elementwise
            return "injective", None
    return "elementwise", None


def _tc_product(s, d):
    """The MatmulShape of a stage `tensorize` takes (any product, batched or
    with transposed operands: schedule/matmul_shape.py) whose operand and
    accumulator types a tensor-core intrinsic takes, else None."""
    shape = matmul_shape(d)
    if isinstance(shape, str) or shape.a == shape.b or not _tensor_core(s, d, (shape.a, shape.b)):
        return None
    return shape


def _tensor_core(s, d, roles) -> bool:
    names = {s.tensors[t][0].name for t in roles}
    acc = d.acc_dtype.name if d.acc_dtype is not None else None
    return len(names) == 1 and any(names <= set(i.inputs) and acc == i.accumulator
                                   for i in TENSORIZE.values())
