"""Regenerate tcomp/target_cuda/reserved_names.py: the identifiers that the
CUDA compile environment of tcomp (NVRTC, with cuda_fp16.h and cuda_bf16.h)
declares, so that a TC name spelled the same must be mangled (names.py).

Candidates are every identifier in the CUDA headers (NVRTC's include folder,
/usr/local/cuda*/include when present), in NVRTC's builtins library, and a
fixed list of C/C++ library names; names starting with `_` or `tc_` are left
out (names.py mangles them all anyway). A candidate is reserved when NVRTC
refuses it as a kernel name (`extern "C" __global__ void NAME(int)`: a
function, variable, enumerator, namespace, typedef or macro of that name
exists), as a local variable (`int NAME = 0;`: a macro), or accepts it as a
type (`using T = NAME;`: a class, which a parameter of that name would hide).
Each test runs in a subprocess on batches of names (NVRTC crashes on a few
inputs: `void A7(int)` with these headers), bisecting a batch that crashes.

    python3 tools/cuda_names.py          # rewrites the module (a few minutes)
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

HEAD = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
TESTS = {"kernel": 'extern "C" __global__ void {n}(int tc_a) {{ }}',
         "local": "__device__ void tc_f{i}() {{ int {n} = 0; (void){n}; }}",
         "type": "using tc_t{i} = {n};"}
EXTRA = """INFINITY NAN M_PI M_E HUGE_VAL HUGE_VALF FLT_MAX FLT_MIN DBL_MAX INT_MAX INT_MIN
UINT_MAX LLONG_MAX CHAR_BIT EOF RAND_MAX FP_NAN FP_INFINITE errno signbit isnan isinf isfinite
main int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t
ptrdiff_t size_t nullptr_t offsetof va_list printf malloc free memcpy memset strlen abort exit
assert clock clock64 llabs labs llmin llmax umin umax fminf fmaxf""".split()
_IDENT = re.compile(r"\b[A-Za-z][A-Za-z0-9_]*\b")


def candidates() -> list[str]:
    from tcomp.target_cuda import cuda_api, names
    from tcomp.target_cuda.codegen import F32
    found = set(EXTRA) | set(F32) | set(F32.values()) | {v[:-1] for v in F32.values()}
    dirs = [cuda_api.include_dir()] + glob.glob("/usr/local/cuda*/include")
    for d in filter(None, dirs):
        for path in glob.glob(os.path.join(d, "**", "*.h*"), recursive=True):
            with open(path, errors="replace") as f:
                found |= set(_IDENT.findall(f.read()))
    lib = os.path.join(os.path.dirname(cuda_api.include_dir() or ""), "lib")
    for so in glob.glob(os.path.join(lib, "libnvrtc-builtins*.so*")):
        text = subprocess.run(["strings", "-n", "3", so], capture_output=True, text=True).stdout
        found |= set(_IDENT.findall(text))
    return sorted(n for n in found if len(n) <= 40 and n not in names.CPP_KEYWORDS
                  and not n.startswith("tc_"))


def failing(test: str, batch: list[str]) -> set[str]:
    """The names of `batch` whose line NVRTC refuses (run in this process)."""
    from tcomp.target_cuda import cuda_api
    from tcomp.target_cuda.compile import CompileOptions
    args = CompileOptions().nvrtc_args() + ["-w"]
    bad, todo = set(), list(batch)
    while todo:
        src = HEAD + "\n".join(TESTS[test].format(n=n, i=i) for i, n in enumerate(todo)) + "\n"
        try:
            cuda_api.nvrtc_compile(src, "probe.cu", args)
            return bad
        except cuda_api._CompileFailed as e:
            lines = {int(m) - 3 for m in re.findall(r"probe\.cu\((\d+)\)", e.log)}
        new = {todo[k] for k in lines if 0 <= k < len(todo)}
        if not new:  # an error outside the batch's lines: halve it
            if len(todo) == 1:
                return bad | set(todo)
            h = len(todo) // 2
            return bad | failing(test, todo[:h]) | failing(test, todo[h:])
        bad |= new
        todo = [n for n in todo if n not in new]
    return bad


def failing_safely(test: str, batch: list[str]) -> set[str]:
    """`failing` in a subprocess; a batch that crashes NVRTC is halved, a
    single name that does is left out (it cannot be a kernel or a local)."""
    p = subprocess.run([sys.executable, __file__, "--batch", test], input="\n".join(batch),
                       capture_output=True, text=True)
    if p.returncode == 0:
        return set(p.stdout.split())
    if len(batch) == 1:
        print(f"NVRTC crashes on the {test} test of {batch[0]}", file=sys.stderr)
        return set()
    h = len(batch) // 2
    return failing_safely(test, batch[:h]) | failing_safely(test, batch[h:])


def main() -> None:
    if sys.argv[1:2] == ["--batch"]:
        print("\n".join(sorted(failing(sys.argv[2], sys.stdin.read().split()))))
        return
    names = candidates()
    out = {}
    for test in TESTS:
        out[test] = set().union(*(failing_safely(test, names[j:j + 500])
                                  for j in range(0, len(names), 500)))
        print(f"{test}: {len(out[test])} refused of {len(names)}", file=sys.stderr)
    reserved = sorted(out["kernel"] | out["local"] | (set(names) - out["type"]))
    from tcomp.target_cuda import cuda_api
    lines = []
    for j in range(0, len(reserved), 8):
        lines.append("    " + " ".join(reserved[j:j + 8]))
    body = "\n".join(lines)
    text = (f'"""The identifiers that the CUDA compile environment declares (NVRTC '
            f'{".".join(map(str, cuda_api.nvrtc_version()))}\nwith cuda_fp16.h and cuda_bf16.h): '
            f'{len(reserved)} names a TC name must not be printed as\n(names.py). Generated by '
            f'tools/cuda_names.py; do not edit."""\n\nRESERVED = frozenset("""\n{body}\n""".split())\n')
    with open(os.path.join(ROOT, "tcomp", "target_cuda", "reserved_names.py"), "w") as f:
        f.write(text)
    print(f"{len(reserved)} names written", file=sys.stderr)


if __name__ == "__main__":
    main()
