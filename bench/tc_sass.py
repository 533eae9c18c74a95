"""SASS figures of tensor-core GEMM variants, no GPU needed: each variant of
bench/tc_gemm.py VARIANTS is compiled with NVRTC (sm_90a) at 4096^3 and
disassembled with cuobjdump; prints registers, static shared memory, local
memory, the HMMA / LDSM / LDGSTS counts, and for the main loop (the
longest backward branch around HMMAs: one K tile) its instruction count and
integer/address operations. Compares padded with swizzled tiles:

    PATH=<dir of cuobjdump>:$PATH python3 bench/tc_sass.py [variant ...]

(cuobjdump and nvdisasm come with the nvidia-cuda-nvdisasm / cuobjdump pip
wheels, e.g. site-packages/nvidia/cu13/bin.)
"""
from __future__ import annotations

import collections
import os
import re
import sys

import tcomp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402
import cuobjdump  # noqa: E402

SIZES = {"M": 4096, "N": 4096, "K": 4096}
# integer and address arithmetic, and moves (what padding or a swizzle can add)
INTEGER = re.compile(r"^(U?IMAD|U?IADD3|VIADD|U?LOP3|U?SHF|U?LEA|ISETP|IMNMX|SEL|PRMT|U?MOV|"
                     r"R2UR|S2R|S2UR|BMSK|SGXT)$")
LINE = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*?);")


def variants():
    """(name, tc_gemm arguments) of tc_gemm.py's VARIANTS (read from its
    source: tc_gemm.py imports torch, which this needs not)."""
    import ast
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tc_gemm.py")).read()
    tree = ast.parse(src)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "VARIANTS":
            return eval(compile(ast.Expression(node.value), "tc_gemm.py", "eval"),
                        {"__builtins__": {}, "dict": dict})
    raise SystemExit("tc_gemm.py has no VARIANTS")


def sass(cubin: bytes) -> tuple[str, str]:
    got = cuobjdump.dump(cubin)
    if got is None:
        raise SystemExit("cuobjdump is not on the PATH (see this file's docstring)")
    return got


def stats(cubin: bytes) -> dict:
    res, code = sass(cubin)
    full = [(int(m.group(1), 16), m.group(2), m.group(3))
            for m in map(LINE.match, code.splitlines()) if m]
    insts = [(a, op.split(".")[0], rest) for a, op, rest in full]
    out = {"instructions": len(insts)}
    m = re.search(r"REG:(\d+).*?SHARED:(\d+).*?LOCAL:(\d+)", res)
    if m:
        out.update(regs=int(m.group(1)), static_smem=int(m.group(2)), local=int(m.group(3)))
    ops = collections.Counter(op for _, op, _ in insts)
    out.update(HMMA=ops["HMMA"], LDSM=ops["LDSM"], LDGSTS=ops["LDGSTS"], STG=ops["STG"],
               STG_U16=sum(1 for _, op, _ in full if op == "STG.E.U16"),
               STG_128=sum(1 for _, op, _ in full if op == "STG.E.128"), STS=ops["STS"],
               STS_128=sum(1 for _, op, _ in full if op == "STS.128"), LDS=ops["LDS"],
               BAR=ops["BAR"])
    loop = []
    for addr, op, rest in insts:
        t = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        if t and int(t.group(1), 16) < addr:
            body = [x for x in insts if int(t.group(1), 16) <= x[0] <= addr]
            if any(x[1] == "HMMA" for x in body) and len(body) > len(loop):
                loop = body
    lops = collections.Counter(op for _, op, _ in loop)
    out.update(loop_instructions=len(loop), loop_HMMA=lops["HMMA"], loop_LDSM=lops["LDSM"],
               loop_integer=sum(n for op, n in lops.items() if INTEGER.match(op)),
               loop_integer_by_op={op: n for op, n in sorted(lops.items()) if INTEGER.match(op)})
    return out


def shared_bytes(prog) -> int:
    """The shared memory a block of the program's first kernel allocates."""
    from tcomp.lower import ir
    total = 0
    for x in ir.walk(prog.kernels[0].body):
        if isinstance(x, ir.Alloc) and x.buffer.scope == "shared":
            n = x.buffer.dtype.numpy.itemsize
            for d in x.buffer.shape:
                n *= int(d.value)
            total += n
    return total


def main(names):
    table = variants()
    names = names or [n for n in table if n.endswith("_swz")]
    for name in names:
        kw = dict(table[name])
        for label, mode in (("swizzle", dict(swizzle=True)), ("pad", dict(swizzle=False,
                                                                             pad=True))):
            kw.update(mode)
            s = S.tc_gemm(**kw)[1]
            st = {"smem_bytes": shared_bytes(tcomp.lower(s, sizes=SIZES)),
                  **stats(tcomp.build(s, target="cuda", sizes=SIZES).cubin)}
            print(f"{name.removesuffix('_swz'):40s} {label:8s} " +
                  " ".join(f"{k_}={v}" for k_, v in st.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
