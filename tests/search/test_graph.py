"""The stage dataflow graph the search rules read (tcomp/search/graph.py)."""
from __future__ import annotations

import networkx as nx

import tcomp
from tcomp.search import stage_graph, topological_order
from tcomp.search.graph import consumers, producers
from tests.bench.common import S
from tests.lang.programs import BY_NAME


def kinds(g):
    return {n: g.nodes[n]["kind"] for n in g}


def test_softmax_graph_producers_consumers_and_order():
    g = stage_graph(tcomp.op(S.SOFTMAX))
    assert isinstance(g, nx.DiGraph)
    assert kinds(g) == {"mx": "reduction", "sm": "reduction", "O": "elementwise"}
    assert producers(g, "O") == ["mx", "sm"]
    assert consumers(g, "mx") == ["sm", "O"]
    assert g.edges["mx", "O"]["tensors"] == {"mx"}
    assert topological_order(g) == ["mx", "sm", "O"]
    assert g.nodes["mx"]["output"] is False and g.nodes["O"]["output"] is True


def test_matmul_kind_and_tensor_core_eligibility():
    fp32 = stage_graph(tcomp.op(S.GEMM)).nodes["C"]
    bf16 = stage_graph(tcomp.op(S.TC_GEMM)).nodes["C"]
    assert fp32["kind"] == bf16["kind"] == "matmul"
    assert fp32["operands"] == bf16["operands"] == ("A", "B")
    assert not fp32["tensor_core"] and bf16["tensor_core"]
    # B read transposed is not what tensorize accepts: an ordinary reduction
    (nt,) = BY_NAME["matmul_nt"].program()
    assert stage_graph(nt).nodes["C"]["kind"] == "reduction"


def test_injective_gather_and_in_place_stages():
    (tr,) = BY_NAME["transpose"].program()
    (emb,) = BY_NAME["embedding"].program()
    (outer,) = BY_NAME["outer"].program()
    assert stage_graph(tr).nodes["O"]["kind"] == "injective"
    assert stage_graph(emb).nodes["O"]["kind"] == "gather"
    assert stage_graph(outer).nodes["O"]["kind"] == "elementwise"  # a broadcast
    (shift,) = BY_NAME["inplace_shift"].program()
    g = stage_graph(shift)
    # the snapshot copy is a stage; the in-place statement depends on both writers before it
    assert topological_order(g) == ["O", "O.1.snap", "O.1"]
    assert producers(g, "O.1") == ["O", "O.1.snap"]
    assert g.nodes["O.1.snap"]["origin"] == "snapshot"
    assert g.nodes["O"]["writers"] == 2
