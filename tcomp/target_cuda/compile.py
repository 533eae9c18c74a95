"""NVRTC compilation: CUDA C++ -> PTX and cubin, with a cache.

The cache key is the source, the options and the NVRTC version; entries live
in memory and in `CACHE_DIR` (one .ptx and one .cubin per key). A compile
error raises `CudaError` with NVRTC's log, the source with line numbers, and
a command that reproduces it.

    python3 -m tcomp.target_cuda.compile KERNEL.cu [--arch sm_90a]
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass

from ..errors import CudaError
from . import cuda_api
from .arch import check_arch

CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "tcomp", "nvrtc")
DEFAULT_ARCH = "sm_90a"
_memory: dict[str, "Compiled"] = {}


@dataclass(frozen=True)
class CompileOptions:
    """Everything that changes NVRTC's output; part of the cache key."""
    arch: str = DEFAULT_ARCH
    std: str = "c++17"
    lineinfo: bool = False

    def nvrtc_args(self) -> list[str]:
        check_arch(self.arch)
        args = [f"--gpu-architecture={self.arch}", f"--std={self.std}"]
        inc = cuda_api.include_dir()
        if inc:
            args.append(f"-I{inc}")
        if self.lineinfo:
            args.append("-lineinfo")
        return args


@dataclass(frozen=True)
class Compiled:
    ptx: str
    cubin: bytes
    log: str
    key: str


def compile_source(source: str, name: str = "tcomp", options: CompileOptions | None = None,
                   use_cache: bool = True) -> Compiled:
    options = options or CompileOptions()
    args = options.nvrtc_args()
    version = cuda_api.nvrtc_version()
    key = hashlib.sha256("\0".join([source, *args, str(version)]).encode()).hexdigest()[:32]
    if use_cache:
        hit = _memory.get(key) or _from_disk(key)
        if hit is not None:
            _memory[key] = hit
            return hit
    try:
        ptx, cubin, log = cuda_api.nvrtc_compile(source, f"{name}.cu", args)
    except cuda_api._CompileFailed as e:
        raise CudaError(_error_text(source, name, e.log, options)) from None
    out = Compiled(ptx, cubin, log, key)
    _memory[key] = out
    if use_cache:
        _to_disk(out)
    return out


def _error_text(source, name, log, options) -> str:
    numbered = "\n".join(f"{i:4d}  {line}" for i, line in enumerate(source.splitlines(), 1))
    fd, path = tempfile.mkstemp(prefix=f"tcomp_{name}_", suffix=".cu")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    repro = f"python3 -m tcomp.target_cuda.compile {path} --arch {options.arch}"
    return (f"NVRTC failed to compile '{name}':\n{log}\n\n--- generated source ---\n{numbered}\n"
            f"--- repro: {repro}")


def _from_disk(key: str) -> Compiled | None:
    try:
        with open(os.path.join(CACHE_DIR, key + ".ptx")) as f:
            ptx = f.read()
        with open(os.path.join(CACHE_DIR, key + ".cubin"), "rb") as f:
            cubin = f.read()
        return Compiled(ptx, cubin, "", key)
    except OSError:
        return None


def _to_disk(c: Compiled):
    try:
        os.makedirs(CACHE_DIR, exist_ok=True)
        for ext, data, mode in ((".ptx", c.ptx, "w"), (".cubin", c.cubin, "wb")):
            tmp = os.path.join(CACHE_DIR, f".{c.key}{ext}.{os.getpid()}")
            with open(tmp, mode) as f:
                f.write(data)
            os.replace(tmp, os.path.join(CACHE_DIR, c.key + ext))
    except OSError:
        pass  # a read-only home is not an error: the memory cache still works


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description="Compile a CUDA file with NVRTC as tcomp does.")
    ap.add_argument("file")
    ap.add_argument("--arch", default=DEFAULT_ARCH)
    a = ap.parse_args(argv)
    with open(a.file) as f:
        src = f.read()
    try:
        c = compile_source(src, os.path.basename(a.file).split(".")[0], CompileOptions(a.arch),
                           use_cache=False)
    except CudaError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"ok: {len(c.ptx)} bytes of PTX, {len(c.cubin)} bytes of cubin")
    if c.log:
        print(c.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
