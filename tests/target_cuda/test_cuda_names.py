"""Issue 22, defect 2 (the rest): a TC name that is a C++ keyword or a name of the CUDA
compile environment (`class`, `for`, `threadIdx`, `int`, `float4`, `min`, `exp`, `__half`)
was accepted by the language, ran on the sim, and then NVRTC refused the generated source.
The CUDA emitter now prints every identifier through target_cuda/names.py, which mangles
exactly the names that would clash (`tc_u_` + name)."""
import numpy as np
import pytest

import tcomp
from tcomp.target_cuda.names import CPP_KEYWORDS, PREFIX, cuda_name
from tcomp.target_cuda.reserved_names import RESERVED

# every keyword and every name the CUDA environment declares, and some of the names
# reserved by their first characters
ALL = sorted(CPP_KEYWORDS | RESERVED | {"__half", "__syncthreads", "_Float16", "__global__",
                                        "_x", "tc_floordiv", "tc_smem", "tc_u_class"})
BATCH = 400


# the names of ALL that the language itself refuses: its type names, and nan (a literal)
REFUSED = {"bool", "double", "float", "half", "nan"}


def _groups(ns, n=8):
    return [ns[k:k + n] for k in range(0, len(ns), n)]


def _tensors(ns):
    """Eight names a statement: an output and the inputs it sums."""
    groups = [g if len(g) > 1 else g + ["X"] for g in _groups(ns)]
    ins = ", ".join(f"float(N) {n}" for g in groups for n in g[1:])
    body = "\n".join(f"{g[0]}(i) = {' + '.join(f'{n}(i)' for n in g[1:])}" for g in groups)
    return f"def f({ins}) -> ({', '.join(g[0] for g in groups)}) {{\n{body}\n}}"


def _sizes(ns):
    """An input of rank up to 8 a statement, its sizes from the names."""
    groups = _groups(ns)
    ins = ", ".join(f"float({', '.join(g)}) X{k}" for k, g in enumerate(groups))
    idx = [", ".join(f"i{j}" for j in range(len(g))) for g in groups]
    body = "\n".join(f"O{k}({x}) = X{k}({x}) + 1" for k, x in enumerate(idx))
    return f"def f({ins}) -> ({', '.join(f'O{k}' for k in range(len(groups)))}) {{\n{body}\n}}"


def _indices(ns):
    """A statement of rank up to 8 a statement, its indices from the names."""
    groups = _groups(ns)
    ins = ", ".join(f"float({', '.join('N' for _ in g)}) X{k}" for k, g in enumerate(groups))
    body = "\n".join(f"O{k}({', '.join(g)}) = X{k}({', '.join(g)}) - 1"
                     for k, g in enumerate(groups))
    return f"def f({ins}) -> ({', '.join(f'O{k}' for k in range(len(groups)))}) {{\n{body}\n}}"


ROLES = {"tensor": _tensors, "size": _sizes, "index": _indices}


@pytest.mark.parametrize("role", ROLES)
def test_every_cpp_and_cuda_name_compiles_in_every_role(role):
    make = ROLES[role]
    names = [n for n in ALL if n not in REFUSED]
    for k in range(0, len(names), BATCH):
        batch = names[k:k + BATCH]
        op = tcomp.op(make(batch))
        src = tcomp.build(tcomp.Schedule(op), "cuda").source  # NVRTC compiles it
        for n in batch:
            assert f" {cuda_name(n)}" in src


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_language_refuses_its_own_words_with_a_reason(role, name):
    # (a type name as a tensor or size is refused by the grammar: "expected an output
    # tensor name, found ')'" after `(float` was read as a type)
    with pytest.raises(tcomp.LangError, match="type name|reserved word|expected an output "
                                              "tensor name|expected a size variable"):
        tcomp.op(ROLES[role]([name]))


@pytest.mark.parametrize("sizes", [{"N": 5}, None])
def test_keyword_names_compile_under_caches_threads_and_vectors(sizes):
    """The names lowering makes from clashing names (caches, split loops), and
    the vector loads' registers, compile too; the sim agrees with evaluate."""
    op = tcomp.op("def class(float(int) float4, float(int) min) -> (__half) {\n"
                  "  __half(threadIdx) = float4(threadIdx) * min(threadIdx) + 1 }")
    s = tcomp.Schedule(op)
    st = s["__half"]
    local = s.cache_write(st, "local")
    (i,) = st.axes
    io, ii = st.split(i, 4)
    st.bind(io, "blockIdx.x")
    st.bind(ii, "threadIdx.x")
    s.cache_read("float4", "shared", [local]).compute_at(st, io)
    local.compute_at(st, ii)
    fixed = None if sizes is None else {"int": 8}
    src = tcomp.build(s, "cuda", sizes=fixed).source
    assert "tc_u_float4" in src and "tc_u_min" in src and "tc_u___half" in src
    a = np.arange(8, dtype=np.float32)
    b = np.full(8, 0.5, np.float32)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=fixed)(a, b),
                                  tcomp.evaluate(op, a, b))


def test_readable_names_stay_as_they_are():
    for n in ("A", "O", "i", "k_o", "N", "x_shared", "tcomp", "t_c", "half_", "Float4", "mini"):
        assert cuda_name(n) == n
    assert cuda_name("threadIdx.x") == "threadIdx.x"


def test_mangling_is_collision_free():
    """Distinct names stay distinct, and no mangled name is one printed as it
    is or one of the emitter's own (`tc_...` but never `tc_u_...`)."""
    pool = ALL + [PREFIX + n for n in ALL] + ["tc_u_", "tc_", "x", "tc_ux", "a.b", "a_b",
                                             "a_.b", "a._b", "tc_d_a_db"]
    printed = [cuda_name(n) for n in pool]
    assert len(set(printed)) == len(set(pool))
    for n, p in zip(pool, printed):
        assert (p == n) != p.startswith("tc_"), (n, p)
        assert p.startswith("tc_u_") or p.startswith("tc_d_") or p == n


def test_exported_entry_points_are_the_printed_names(tmp_path):
    """The sidecar names each kernel's entry point as the cubin has it, and
    its parameters by their TC names (a cubin keeps no parameter names)."""
    op = tcomp.op("def tc(float(N) class) -> (floordiv) { floordiv(i) = class(i) * 2 }")
    k = tcomp.build(tcomp.Schedule(op), "cuda")
    assert ' tc_u_tc_floordiv(const float* __restrict__ tc_u_class, float* floordiv, int N)' in k.source
    kd = k.meta["kernels"][0]
    assert kd["name"] == "tc_u_tc_floordiv"
    assert [p.get("buffer", p.get("size")) for p in kd["params"]] == ["class", "floordiv", "N"]
    from tcomp.target_cuda.cubin_info import entry_points
    assert "tc_u_tc_floordiv" in entry_points(k._variants[32].cubin)
    k.export(str(tmp_path / "k.cubin"))  # load checks the entry points against the cubin
    assert tcomp.load(str(tmp_path / "k.cubin")).meta["kernels"][0]["name"] == "tc_u_tc_floordiv"
