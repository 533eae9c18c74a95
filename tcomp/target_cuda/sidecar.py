"""The `.json` sidecar of an exported kernel: writing it sealed, and checking
everything in it before `tcomp.load` hands it to a launch (docs/export.md).

A sidecar describes launches: a field that is wrong does not fail, it makes
the GPU compute something else (parameters swapped or dropped, an output too
small, half a block, another build's cubin). So `load` trusts nothing:

1. the JSON is read with its nesting bounded (`read_json`);
2. every field is type- and range-checked, and the fields against each other
   (`validate`): names, dtypes, ranks, size expressions over known sizes,
   launch dimensions within CUDA's limits where they are constants, the
   parameters of each launch naming known buffers and sizes, the variant's
   file a bare name beside the sidecar;
3. `sidecar_sha256`, the digest of everything else in the sidecar, must
   match: an edit that leaves every field plausible (two parameters swapped,
   a grid set to 0) is still an edit;
4. each cubin's sha256 must match `cubin_sha256`, and its entry points what
   the sidecar says of them, as far as the cubin records it (`check_cubin`:
   every kernel present, its parameter count and sizes, its launch bounds).

On a GPU the driver then checks the parameters once more (kernel.py). Every
failure is a TcompError naming the file, the field and the remedy.
"""
from __future__ import annotations

import hashlib
import json
import re

from ..errors import TcompError
from ..lang import dtypes
from ..lower.ir import SM_COUNT
from ..lower.launch import CUDA_LIMITS
from . import cubin_info

FORMAT = 3  # 3: tensor-map parameters and min_blocks (Hopper kernels); 2 is still read
READS = (2, 3)
MAX_DEPTH = 64  # of a size expression; the deepest tcomp writes is far below
MAX_RANK = 64  # NumPy's limit on dimensions
INT64 = 2**63
SIZE_OPS = ("+", "-", "*", "/", "%", "min", "max")
SIGNATURE_OPS = ("+", "-", "*", "/", "min", "max")  # what signature.size_from_json reads
REMEDY = "export the kernel again (k.export or tcomp compile)"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ARCH = re.compile(r"sm_[0-9]{2,3}[af]?\Z")
_HEX = re.compile(r"[0-9a-f]{64}\Z")
_BUFFER_KEYS = ("name", "dtype", "shape")


# ------------------------------------------------------------------ writing
def digest(meta: dict) -> str:
    """sha256 of `meta` without `sidecar_sha256`, as canonical JSON (keys
    sorted, separators "," and ":", ASCII): what `sidecar_sha256` holds."""
    rest = {k: v for k, v in meta.items() if k != "sidecar_sha256"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def seal(meta: dict) -> dict:
    """`meta` as written: JSON data (tuples as lists) with its digest added."""
    out = json.loads(json.dumps(meta))
    out.pop("sidecar_sha256", None)
    out["sidecar_sha256"] = digest(out)
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ reading
def read_json(path: str):
    """The JSON value in `path` (TcompError when it cannot be read, is not
    JSON, or nests deeper than Python's parser can follow)."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise TcompError(f"load: {e}") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise TcompError(f"load: {path} nests JSON too deeply to be a sidecar; "
                         f"{REMEDY}") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an int of too many digits
        raise TcompError(f"load: {path} is not valid JSON ({e})") from None


class _Checker:
    def __init__(self, side: str):
        self.side = side
        self.names = set()  # size variables: symbolic and bound
        self.format = FORMAT

    def fail(self, where: str, problem: str):
        raise TcompError(f"load: {self.side}: {where} {problem}; {REMEDY}")

    def obj(self, v, where: str, keys=()) -> dict:
        if not isinstance(v, dict):
            self.fail(where, f"must be a JSON object, got {_kind(v)}")
        for k in keys:
            if k not in v:
                self.fail(where, f"has no '{k}'")
        return v

    def list(self, v, where: str, length: int | None = None, most: int | None = None) -> list:
        if not isinstance(v, list):
            self.fail(where, f"must be a JSON array, got {_kind(v)}")
        if length is not None and len(v) != length:
            self.fail(where, f"must have {length} entries, got {len(v)}")
        if most is not None and len(v) > most:
            self.fail(where, f"has {len(v)} entries, more than {most}")
        return v

    def int(self, v, where: str, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(where, f"must be an integer, got {_kind(v)}")
        if not lo <= v <= hi:
            self.fail(where, f"must be in {lo}..{hi}, got {v}")
        return v

    def str(self, v, where: str, pattern: re.Pattern | None = None, what: str = "") -> str:
        if not isinstance(v, str) or not v:
            self.fail(where, f"must be a non-empty string, got {_kind(v)}")
        if pattern is not None and not pattern.match(v):
            self.fail(where, f"must be {what}, got {v!r}")
        return v

    def bool(self, v, where: str) -> bool:
        if not isinstance(v, bool):
            self.fail(where, f"must be true or false, got {_kind(v)}")
        return v

    def unique(self, names, where: str) -> None:
        seen = set()
        for n in names:
            if n in seen:
                self.fail(where, f"names '{n}' twice")
            seen.add(n)

    def size(self, j, where: str, ops=SIZE_OPS, depth: int = 0):
        """A size expression: int, known size variable, or [op, a, b]."""
        if depth > MAX_DEPTH:
            self.fail(where, f"is a size expression nested deeper than {MAX_DEPTH}")
        if isinstance(j, bool) or not isinstance(j, (int, str, list)):
            self.fail(where, f"must be a size expression (integer, size name or "
                             f"[op, a, b]), got {_kind(j)}")
        if isinstance(j, int):
            self.int(j, where, -INT64, INT64 - 1)
        elif isinstance(j, str):
            if j not in self.names and not (j == SM_COUNT and self.format >= 3):
                self.fail(where, f"names size '{j}', which is neither in 'sizes' nor in "
                                 f"'bound_sizes'")
        else:
            if len(j) != 3 or not isinstance(j[0], str) or j[0] not in ops:
                self.fail(where, f"must be [op, a, b] with op one of {' '.join(ops)}, got "
                                 f"{_short(j)}")
            self.size(j[1], where, ops, depth + 1)
            self.size(j[2], where, ops, depth + 1)

    def buffer(self, b, where: str) -> dict:
        self.obj(b, where, _BUFFER_KEYS)
        self.str(b["name"], f"{where}.name")
        dt = self.str(b["dtype"], f"{where}.dtype")
        if dt not in dtypes.BY_NAME:
            self.fail(f"{where}.dtype", f"is {dt!r}, not a tcomp type")
        for i, d in enumerate(self.list(b["shape"], f"{where}.shape", most=MAX_RANK)):
            self.size(d, f"{where}.shape[{i}]")
            if isinstance(d, int):
                self.int(d, f"{where}.shape[{i}]", 0, INT64 - 1)
        return b


def validate(meta, side: str) -> None:
    """Check the sidecar `meta` read from `side` (module docstring, steps 2-3)."""
    c = _Checker(side)
    c.obj(meta, "the sidecar")
    if "format" not in meta:
        c.fail("the sidecar", "has no 'format'")
    fmt = meta["format"]
    if type(fmt) is int and fmt == 1:
        raise TcompError(f"load: {side} has format 1: it was written by an older tcomp, "
                         f"without the digests that tie a sidecar to its cubin; export the "
                         f"kernel again with this version (format {FORMAT})")
    if type(fmt) is not int or fmt not in READS:
        raise TcompError(f"load: {side} has format {_short(fmt)}, expected {FORMAT}")
    c.format = fmt
    c.obj(meta, "the sidecar", ("tcomp_version", "arch", "op", "inputs", "outputs", "temps",
                                "sizes", "bound_sizes", "size_sources", "signature",
                                "kernels", "index_bits", "cubin_sha256", "sidecar_sha256"))
    c.str(meta["tcomp_version"], "tcomp_version")
    arch = c.str(meta["arch"], "arch", _ARCH, "an architecture like sm_90a")
    c.str(meta["op"], "op")
    sizes = c.list(meta["sizes"], "sizes")
    for i, n in enumerate(sizes):
        c.str(n, f"sizes[{i}]")
    c.unique(sizes, "sizes")
    bound = c.obj(meta["bound_sizes"], "bound_sizes")
    for n, v in bound.items():
        c.int(v, f"bound_sizes.{n}", 0, INT64 - 1)
        if n in sizes:
            c.fail("bound_sizes", f"fixes '{n}', which 'sizes' lists as symbolic")
    c.names = set(sizes) | set(bound)

    inputs = [c.buffer(b, f"inputs[{i}]") for i, b in enumerate(c.list(meta["inputs"], "inputs"))]
    outputs = c.list(meta["outputs"], "outputs")
    if not outputs:
        c.fail("outputs", "is empty")
    for i, b in enumerate(outputs):
        where = f"outputs[{i}]"
        c.buffer(b, where)
        c.obj(b, where, ("declared_shape", "zero_fill"))
        c.bool(b["zero_fill"], f"{where}.zero_fill")
        if b["declared_shape"] is not None:
            ds = c.list(b["declared_shape"], f"{where}.declared_shape", len(b["shape"]))
            for k, d in enumerate(ds):
                c.size(d, f"{where}.declared_shape[{k}]")
    temps = [c.buffer(b, f"temps[{i}]") for i, b in enumerate(c.list(meta["temps"], "temps"))]
    buffers = [b["name"] for b in inputs + outputs + temps]
    c.unique(buffers, "inputs, outputs and temps together")

    _size_sources(c, meta["size_sources"], inputs, sizes, bound)
    _signature(c, meta["signature"], meta["op"], inputs, bound)
    bits = meta["index_bits"]
    if type(bits) is not int or bits not in (32, 64):
        c.fail("index_bits", f"must be 32 or 64, got {_short(bits)}")
    names = _kernels(c, meta["kernels"], "kernels", arch, set(buffers))
    c.str(meta["cubin_sha256"], "cubin_sha256", _HEX, "a sha256 in lowercase hex")
    if "index64" in meta:
        wide = c.obj(meta["index64"], "index64", ("cubin", "cubin_sha256", "kernels"))
        if bits != 32 or not sizes:
            c.fail("index64", "is present, but only a 32-bit kernel with symbolic sizes has a "
                              "64-bit variant")
        file = c.str(wide["cubin"], "index64.cubin")
        if (not file.endswith(".cubin") or any(ch in file for ch in "/\\:")
                or any(ord(ch) < 32 for ch in file)):
            c.fail("index64.cubin", f"must be the bare name of a .cubin file beside the "
                                    f"sidecar (no folder, no '..', not absolute), got {file!r}")
        c.str(wide["cubin_sha256"], "index64.cubin_sha256", _HEX, "a sha256 in lowercase hex")
        if _kernels(c, wide["kernels"], "index64.kernels", arch, set(buffers)) != names:
            c.fail("index64.kernels", "must name the same kernels as 'kernels', in order")
    elif bits == 32 and sizes:
        c.fail("the sidecar", "has symbolic sizes and 32-bit indices but no 'index64' (the "
                              "variant for tensors of 2^31 elements or more)")
    got = meta["sidecar_sha256"]
    try:
        want = digest(meta)
    except (RecursionError, ValueError):  # an unknown field nested too deeply to hash
        want = None
    if not isinstance(got, str) or got != want:
        raise TcompError(f"load: {side} was changed after export: its content does not match "
                         f"its sidecar_sha256; {REMEDY}")


def _size_sources(c: _Checker, sources, inputs: list, sizes: list, bound: dict) -> None:
    c.obj(sources, "size_sources")
    for name in sizes:
        if name not in sources:
            c.fail("size_sources", f"does not say where size '{name}' comes from")
    for name, src in sources.items():
        where = f"size_sources.{name}"
        if name not in c.names:
            c.fail(where, "names a size that is neither in 'sizes' nor in 'bound_sizes'")
        c.list(src, where, 2)
        i = c.int(src[0], f"{where}[0]", 0, max(len(inputs) - 1, 0))
        if not inputs:
            c.fail(where, "names an input, but the kernel has none")
        shape = inputs[i]["shape"]
        d = c.int(src[1], f"{where}[1]", 0, max(len(shape) - 1, 0))
        if not shape or shape[d] not in (name, bound.get(name, name)):
            c.fail(where, f"points at input '{inputs[i]['name']}' dimension {d}, whose extent "
                          f"is {_short(shape[d] if shape else None)}, not '{name}'")


def _signature(c: _Checker, sig, op: str, inputs: list, bound: dict) -> None:
    c.obj(sig, "signature", ("op", "inputs", "write_checks"))
    if sig["op"] != op:
        c.fail("signature.op", f"is {_short(sig['op'])}, but the sidecar's op is '{op}'")
    specs = c.list(sig["inputs"], "signature.inputs", len(inputs))
    for i, (s, b) in enumerate(zip(specs, inputs)):
        where = f"signature.inputs[{i}]"
        c.obj(s, where, ("name", "dtype", "dims"))
        if s["name"] != b["name"] or s["dtype"] != b["dtype"]:
            c.fail(where, f"is {_short(s['name'])} of {_short(s['dtype'])}, but inputs[{i}] is "
                          f"'{b['name']}' of {b['dtype']}")
        dims = c.list(s["dims"], f"{where}.dims", len(b["shape"]))
        for k, (d, extent) in enumerate(zip(dims, b["shape"])):
            if isinstance(d, str):
                c.size(d, f"{where}.dims[{k}]")
            else:
                c.int(d, f"{where}.dims[{k}]", 0, INT64 - 1)
            if extent not in (d, bound.get(d, d) if isinstance(d, str) else d):
                c.fail(f"{where}.dims[{k}]", f"is {_short(d)}, but inputs[{i}].shape[{k}] is "
                                             f"{_short(extent)}")
    for i, w in enumerate(c.list(sig["write_checks"], "signature.write_checks")):
        where = f"signature.write_checks[{i}]"
        c.obj(w, where, ("tensor", "dim", "var", "lo", "hi", "extent", "line", "last_line"))
        c.str(w["tensor"], f"{where}.tensor")
        c.int(w["dim"], f"{where}.dim", 0, MAX_RANK - 1)
        c.str(w["var"], f"{where}.var")
        for k in ("lo", "hi", "extent"):
            c.size(w[k], f"{where}.{k}", SIGNATURE_OPS)
        c.int(w["line"], f"{where}.line", 0, INT64 - 1)
        c.int(w["last_line"], f"{where}.last_line", 0, INT64 - 1)


def _kernels(c: _Checker, kernels, where: str, arch: str, buffers: set) -> list:
    """Check the launches; returns their names."""
    from .kernel import SHARED_PER_BLOCK
    smem_limit = SHARED_PER_BLOCK.get(arch.rstrip("af"), max(SHARED_PER_BLOCK.values()))
    c.list(kernels, where)
    for i, kd in enumerate(kernels):
        at = f"{where}[{i}]"
        c.obj(kd, at, ("name", "grid", "block", "dynamic_smem", "aligned_buffers", "params"))
        c.str(kd["name"], f"{at}.name", _IDENT, "a C identifier")
        for part, limits in (("grid", CUDA_LIMITS.grid), ("block", CUDA_LIMITS.block)):
            for k, d in enumerate(c.list(kd[part], f"{at}.{part}", 3)):
                c.size(d, f"{at}.{part}[{k}]")
                if isinstance(d, int):
                    c.int(d, f"{at}.{part}[{k}]", 0, limits[k])
        threads = 1
        for d in kd["block"]:
            threads *= d if isinstance(d, int) else 1
        if threads > CUDA_LIMITS.threads_per_block:
            c.fail(f"{at}.block", f"has {threads} threads per block in its constant "
                                  f"dimensions, more than CUDA's "
                                  f"{CUDA_LIMITS.threads_per_block}")
        c.int(kd["dynamic_smem"], f"{at}.dynamic_smem", 0, smem_limit)
        if "min_blocks" in kd or c.format >= 3:
            c.obj(kd, at, ("min_blocks",))
            c.int(kd["min_blocks"], f"{at}.min_blocks", 0, 32)
        names = []
        kinds = ("buffer", "size", "tensor_map") if c.format >= 3 else (
            "buffer", "size")
        for k, p in enumerate(c.list(kd["params"], f"{at}.params")):
            pw = f"{at}.params[{k}]"
            c.obj(p, pw)
            if len(p) != 1 or next(iter(p)) not in kinds:
                forms = " or ".join('{"%s": %s}' % (k, "{...}" if k == "tensor_map" else "NAME")
                                    for k in kinds)
                c.fail(pw, f"must be {forms}, got {_short(p)}")
            kind, name = next(iter(p.items()))
            if kind == "tensor_map":
                name = _tensor_map(c, name, pw, buffers)
            c.str(name, f"{pw}.{kind}")
            if kind == "buffer" and name not in buffers:
                c.fail(pw, f"names buffer '{name}', which is not an input, output or temporary")
            if kind == "size" and name not in c.names and not (name == SM_COUNT
                                                               and c.format >= 3):
                c.fail(pw, f"names size '{name}', which is neither in 'sizes' nor in "
                           f"'bound_sizes'")
            names.append((kind, name))
        c.unique([f"{k} {n}" for k, n in names], f"{at}.params")
        aligned = c.list(kd["aligned_buffers"], f"{at}.aligned_buffers")
        for k, name in enumerate(aligned):
            if ("buffer", name) not in names:
                c.fail(f"{at}.aligned_buffers[{k}]", f"is {_short(name)}, not a buffer "
                                                     f"parameter of {kd['name']}")
    c.unique([kd["name"] for kd in kernels], where)
    return [kd["name"] for kd in kernels]


def _tensor_map(c: _Checker, m, where: str, buffers: set) -> str:
    """Check a tensor-map parameter (target_cuda/tensor_maps.py); its name."""
    c.obj(m, f"{where}.tensor_map", ("name", "buffer", "dtype", "box", "swizzle"))
    w = f"{where}.tensor_map"
    c.str(m["name"], f"{w}.name", _IDENT, "a C identifier")
    if m["buffer"] not in buffers:
        c.fail(w, f"names buffer {_short(m['buffer'])}, which is not an input, output or "
                  f"temporary")
    if m["dtype"] not in dtypes.BY_NAME:
        c.fail(f"{w}.dtype", f"is {_short(m['dtype'])}, not a tcomp dtype")
    for k, n in enumerate(c.list(m["box"], f"{w}.box", most=5)):
        c.int(n, f"{w}.box[{k}]", 1, 256)
    if m["swizzle"] not in (0, 32, 64, 128) or isinstance(m["swizzle"], bool):
        c.fail(f"{w}.swizzle", f"must be 0, 32, 64 or 128, got {_short(m['swizzle'])}")
    if "im2col" in m:  # an im2col map (ir.Im2col): its corners, a pair of lists of ints
        c.obj(m["im2col"], f"{w}.im2col", ("lower", "upper"))
        for k in ("lower", "upper"):
            for j, n in enumerate(c.list(m["im2col"][k], f"{w}.im2col.{k}", most=3)):
                c.int(n, f"{w}.im2col.{k}[{j}]", -32768, 32767)
    return m["name"]


# ------------------------------------------------------------------ the cubins
def check_cubin(cubin: bytes, path: str, want_sha: str, kernels: list, index_bits: int) -> None:
    """`cubin` (read from `path`) is the one the sidecar was written with, and
    defines each of `kernels` with the parameters the sidecar lists."""
    if sha256(cubin) != want_sha:
        raise TcompError(f"load: {path} is not the cubin its sidecar was exported with (its "
                         f"sha256 differs: a truncated or edited file, or another build's); "
                         f"{REMEDY}")
    try:
        entries = cubin_info.entry_points(cubin)
    except cubin_info.NotACubin as e:
        raise TcompError(f"load: {path} is not a CUDA cubin ({e}); {REMEDY}") from None
    for kd in kernels:
        e = entries.get(kd["name"])
        if e is None:
            raise TcompError(f"load: {path} has no entry point '{kd['name']}'; {REMEDY}")
        want = param_sizes(kd, index_bits)
        if e.param_sizes is not None and e.param_sizes != want:
            raise TcompError(f"load: {path}: kernel {kd['name']} takes {len(e.param_sizes)} "
                             f"parameter(s) of {_bytes(e.param_sizes)}, but the sidecar lists "
                             f"{len(want)} of {_bytes(want)}; {REMEDY}")
        block = kd["block"]
        if e.max_threads is not None and all(isinstance(d, int) and d > 0 for d in block):
            threads = block[0] * block[1] * block[2]
            if threads != e.max_threads:
                raise TcompError(f"load: {path}: kernel {kd['name']} was compiled for blocks "
                                 f"of {e.max_threads} threads, but the sidecar launches "
                                 f"{block[0]}x{block[1]}x{block[2]} = {threads}; {REMEDY}")


def param_sizes(kd: dict, index_bits: int) -> tuple[int, ...]:
    """Bytes of each parameter of the launch `kd`: 8 for a pointer, a C `int`
    (4) or `long long` (8) for a size."""
    return tuple(8 if "buffer" in p else 128 if "tensor_map" in p else index_bits // 8
                 for p in kd["params"])


def _bytes(sizes) -> str:
    return "(" + ", ".join(str(s) for s in sizes) + ") bytes"


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, (int, float)):
        return f"number {_short(v)}"
    if isinstance(v, str):
        return f"string {_short(v)}"
    return {"list": "an array", "dict": "an object"}.get(type(v).__name__, type(v).__name__)


def _short(v) -> str:
    try:
        text = json.dumps(v)
    except (RecursionError, ValueError):
        return "(a value too deep to show)"
    return text if len(text) <= 60 else text[:57] + "..."
