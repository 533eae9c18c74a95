"""What a cubin says about its entry points, read from its ELF sections,
without a driver: `tcomp.load` checks an exported sidecar against it on a
machine with no GPU (sidecar.py), before anything is launched.

A cubin is an ELF64 file (little-endian, machine EM_CUDA = 190). Each
`__global__` function has a `.text.<name>` section and a `.nv.info.<name>`
section of attribute records (EIATTR), each a format byte, an attribute byte,
then by format: EIFMT_NVAL (1), EIFMT_BVAL (2), EIFMT_HVAL (3) a 2-byte value
(4 bytes in all); EIFMT_SVAL (4) a 2-byte length and that many bytes. Read here:

  EIATTR_KPARAM_INFO (0x17, SVAL, 12 bytes): u32 index, u16 ordinal, u16
      offset, u32 flags whose bits 18-31 are the parameter's size in bytes:
      one record per parameter;
  EIATTR_MAX_THREADS (0x05, SVAL, 3 x u32): the `__launch_bounds__` of the
      function as (threads, 1, 1) (tcomp emits it for every constant block).

Only what these records say with certainty is reported: a section that does
not parse, or a function described by records not read here (newer
toolchains' EIATTR_KPARAM_INFO_V2, 0x45), reports its parameters as unknown
(`None`) rather than guessing; the driver's check at load on a GPU
(cuFuncGetParamInfo) covers those.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

EM_CUDA = 190
EIATTR_MAX_THREADS = 0x05
EIATTR_KPARAM_INFO = 0x17
EIATTR_KPARAM_INFO_V2 = 0x45
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4


class NotACubin(ValueError):
    """The bytes are not a cubin tcomp can read (the reason is the message)."""


@dataclass(frozen=True)
class Entry:
    name: str
    param_sizes: tuple[int, ...] | None  # in parameter order; None: the cubin does not say
    max_threads: int | None  # threads per block its launch bounds allow; None: unbounded


def entry_points(cubin: bytes) -> dict[str, Entry]:
    """Every function of `cubin` with a `.text.` section, by name (NotACubin
    when the bytes are not a well-formed ELF64 CUDA object)."""
    sections = _sections(cubin)
    infos = {name[len(".nv.info."):]: data for name, data in sections.items()
             if name.startswith(".nv.info.")}
    out = {}
    for name in sections:
        if name.startswith(".text.") and len(name) > len(".text."):
            fn = name[len(".text."):]
            out[fn] = _entry(fn, infos.get(fn))
    return out


def _entry(name: str, info: bytes | None) -> Entry:
    if info is None:
        return Entry(name, None, None)
    records = _records(info)
    if records is None:
        return Entry(name, None, None)
    params, max_threads, unknown_params = {}, None, False
    for attr, value in records:
        if attr == EIATTR_KPARAM_INFO:
            if len(value) != 12:
                unknown_params = True
                continue
            _, ordinal, _, flags = struct.unpack("<IHHI", value)
            if ordinal in params:
                unknown_params = True
            params[ordinal] = (flags >> 18) & 0x3FFF
        elif attr == EIATTR_KPARAM_INFO_V2:
            unknown_params = True
        elif attr == EIATTR_MAX_THREADS and len(value) == 12:
            x, y, z = struct.unpack("<III", value)
            max_threads = x * y * z
    if unknown_params or sorted(params) != list(range(len(params))):
        return Entry(name, None, max_threads)
    return Entry(name, tuple(params[i] for i in range(len(params))), max_threads)


def _records(data: bytes) -> list[tuple[int, bytes]] | None:
    """The (attribute, value) records of a .nv.info section; None when it does not parse."""
    out, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            return None
        fmt, attr, half = data[at], data[at + 1], data[at + 2:at + 4]
        if fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            out.append((attr, half))
            at += 4
        elif fmt == EIFMT_SVAL:
            (n,) = struct.unpack("<H", half)
            if at + 4 + n > len(data):
                return None
            out.append((attr, data[at + 4:at + 4 + n]))
            at += 4 + n
        else:
            return None
    return out


def _sections(b: bytes) -> dict[str, bytes]:
    """Section name -> contents (empty for sections that occupy no file space)."""
    if len(b) < 64 or b[:4] != b"\x7fELF":
        raise NotACubin("not an ELF file")
    if b[4] != 2 or b[5] != 1:
        raise NotACubin("not a 64-bit little-endian ELF file")
    (machine,) = struct.unpack_from("<H", b, 0x12)
    if machine != EM_CUDA:
        raise NotACubin(f"an ELF file for machine {machine}, not CUDA ({EM_CUDA})")
    phoff, shoff = struct.unpack_from("<QQ", b, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", b, 0x36)
    if phoff + phnum * phentsize > len(b):
        raise NotACubin("its program headers lie outside the file (a truncated file?)")
    if shentsize < 64 or shnum == 0 or shoff + shnum * shentsize > len(b) or shstrndx >= shnum:
        raise NotACubin("its section table lies outside the file (a truncated file?)")
    heads = []
    for i in range(shnum):
        name, kind, _, _, off, size = struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize)
        if kind != 8 and off + size > len(b):  # SHT_NOBITS (8) occupies no file space
            raise NotACubin(f"section {i} lies outside the file (a truncated file?)")
        heads.append((name, kind, off, size))
    _, _, str_off, str_size = heads[shstrndx]
    names = b[str_off:str_off + str_size]
    out = {}
    for name, kind, off, size in heads:
        end = names.find(b"\x00", name)
        if name >= len(names) or end < 0:
            raise NotACubin("a section name lies outside its string table")
        text = names[name:end].decode("utf-8", "replace")
        out[text] = b"" if kind == 8 else b[off:off + size]
    return out
