"""SASS figures of the memory-bound row kernels (issue 14), no GPU needed:
each variant of bench/rows.py is compiled with NVRTC (sm_90a) at its
benchmark size and disassembled with cuobjdump; prints per kernel the
registers per thread, threads per block, resident blocks per SM (from the
registers, the threads and the shared memory; H200: 65536 registers, 2048
threads, 32 blocks and 228 KiB of shared memory per SM), shared memory per
block, local memory, instructions per thread (straight-line code: all
executed, but for the warp-reduction loops), 16-byte global loads and
stores, barriers, and the order of global loads (L), barriers (B), shared
loads (s) and global stores (S), which shows what a block waits on after
its row's loads. These are the inputs of the predictions in BENCHMARKS.md:

    PATH=<dir of cuobjdump>:$PATH PYTHONPATH=. python3 bench/rows_sass.py [name-substring ...]

(cuobjdump comes with the nvidia-cuda-cuobjdump pip wheel, e.g.
site-packages/nvidia/cu13/bin.)
"""
from __future__ import annotations

import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import row_schedules as R  # noqa: E402
import schedules as S  # noqa: E402
from tc_sass import LINE, sass, shared_bytes  # noqa: E402

import tcomp  # noqa: E402

SM = dict(regs=65536, threads=2048, blocks=32, smem=233472)
WIDE = {"N": 4096, "D": 32768}
CE = {"N": 4096, "V": 128256}


def variants():
    """(name, build() -> (op, schedule), sizes): today's kernels and the new
    variants, at the benchmark sizes of bench/rows.py."""
    out = []
    for dt in R.DTYPES:
        out += [(f"softmax_{dt}_4096x32768", lambda dt=dt: R.softmax(32768, dt), WIDE),
                (f"softmax_{dt}_4096x32768[exp2]",
                 lambda dt=dt: R.softmax(32768, dt, exp2=True), WIDE),
                (f"layernorm_{dt}_4096x32768", lambda dt=dt: R.layernorm(32768, dt), WIDE),
                (f"rmsnorm_{dt}_4096x32768", lambda dt=dt: R.rmsnorm(32768, dt), WIDE)]
    out += [("layernorm_bfloat16_4096x32768[smem w]",
             lambda: R.layernorm(32768, "bfloat16", shared_weights=True), WIDE),
            ("rmsnorm_bfloat16_4096x32768[smem w]",
             lambda: R.rmsnorm(32768, "bfloat16", shared_weights=True), WIDE),
            ("cross_entropy_bfloat16_4096x128256", lambda: R.cross_entropy(), CE),
            ("cross_entropy_bfloat16_4096x128256[1k,512t,32]",
             lambda: R.cross_entropy_one_kernel(), CE),
            ("cross_entropy_bfloat16_4096x128256[1k,1024t,32]",
             lambda: R.cross_entropy_one_kernel(1024, 32), CE),
            ("cross_entropy_bfloat16_4096x128256[1k,512t,32,exp]",
             lambda: R.cross_entropy_one_kernel(512, 32, exp2=False), CE),
            ("chain_bfloat16_2^28", lambda: R.chain("bfloat16"), {"N": 1 << 28}),
            ("chain_bfloat16_2^28[512t,2]",
             lambda: R.chain("bfloat16", 512, 2), {"N": 1 << 28}),
            ("transpose_float32_8192[32x32]", lambda: S.transpose({}, 32, 8),
             {"M": 8192, "N": 8192}),
            ("transpose_float32_8192[64x64]", lambda: S.transpose({}, 64, 16),
             {"M": 8192, "N": 8192})]
    for kind in ("softmax", "layernorm", "rmsnorm"):
        for n, d, dt, t, st, per_sm in ((4096, 32768, "bfloat16", 512, 3, 1),
                                         (4096, 32768, "bfloat16", 1024, 3, 1),
                                         (32768, 4096, "float32", 256, 3, 4)):
            rows = -(-n // (132 * per_sm))
            out.append((f"{kind}_{dt}_{n}x{d}[pipelined,{rows} rows,{t}t,{st} stages]",
                        lambda k=kind, n=n, dt=dt, r=rows, t=t, st=st: R.pipelined(
                            k, n, dt, r, t, st), {"N": n, "D": d}))
    for kind in ("layernorm", "rmsnorm"):
        for t in (512, 1024):
            out.append((f"{kind}_bfloat16_4096x32768[pipelined,32 rows,{t}t,3 stages,x in "
                        f"registers]", lambda k=kind, t=t: R.pipelined(
                            k, 4096, "bfloat16", 32, t, 3, x_regs=True), WIDE))
    return out


def kernel_stats(res: str, code: str, name: str, threads: int, smem: int) -> dict:
    """Figures of kernel `name` from cuobjdump's resource usage and SASS."""
    m = re.search(rf"Function {re.escape(name)}:\s*\n?\s*REG:(\d+).*?SHARED:(\d+).*?"
                  rf"LOCAL:(\d+)", res)
    regs, static, local = (int(x) for x in m.groups())
    body = code.split(f"Function : {name}", 1)[1].split("Function : ", 1)[0]
    insts = [(op, rest) for op, rest in
             ((m.group(2), m.group(3)) for m in map(LINE.match, body.splitlines()) if m)]
    ops = collections.Counter(op.split(".")[0] for op, _ in insts)
    order = "".join("L" if op.startswith("LDG") else "B" if op.startswith("BAR.SYNC") else
                    "s" if op.startswith("LDS") else "S" if op.startswith("STG") else ""
                    for op, _ in insts)
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // 256) * 256  # registers are allocated per warp, 256 at a time
    smem = max(smem, static)
    blocks = min(SM["blocks"], SM["threads"] // threads, SM["regs"] // (per_warp * warps),
                 SM["smem"] // (smem + 1024) if smem else SM["blocks"])
    return dict(regs=regs, threads=threads, blocks_per_sm=blocks, smem=smem, local=local,
                instructions=len(insts), MUFU=ops["MUFU"],
                LDG128=sum(1 for op, _ in insts if op.startswith("LDG") and ".128" in op),
                STG128=sum(1 for op, _ in insts if op.startswith("STG") and ".128" in op),
                BAR=ops["BAR"], order=re.sub(r"(.)\1{7,}", lambda x: f"{x.group(1)}x"
                                             f"{len(x.group(0))}", order))


def main(only):
    for name, build, sizes in variants():
        if only and not any(o in name for o in only):
            continue
        op, s = build()
        prog = tcomp.lower(s, sizes=sizes)
        k = tcomp.build(s, target="cuda", sizes=sizes)
        res, code = sass(k.cubin)
        for kern in prog.kernels:
            threads = 1
            for b in kern.const_block():
                threads *= b
            one = dict(prog.__dict__, kernels=(kern,))
            smem = shared_bytes(type(prog)(**{f: one[f] for f in ("name", "buffers", "kernels",
                                                                   "inputs", "outputs",
                                                                   "sizes")}))
            st = kernel_stats(res, code, kern.name, threads, smem)
            print(f"{name:48s} {kern.name:22s} " + " ".join(f"{a}={b}" for a, b in st.items()),
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
