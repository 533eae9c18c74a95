"""`Program`: the checked defs of one source text."""
from __future__ import annotations

from ..errors import LangError
from .check import check_def
from .op import Op
from .parser import parse_module


class Program:
    def __init__(self, ops: dict[str, Op], module):
        self.ops = ops  # name -> Op, in source order
        self.module = module

    def __getitem__(self, name: str) -> Op:
        try:
            return self.ops[name]
        except KeyError:
            known = ", ".join(self.ops) or "none"
            raise LangError(f"no def named '{name}' (defs: {known})") from None

    def __iter__(self):
        return iter(self.ops.values())

    def __len__(self) -> int:
        return len(self.ops)

    def __str__(self) -> str:
        return "\n\n".join(str(op) for op in self.ops.values()) + "\n"


def parse(text, name: str = "<tc>") -> Program:
    """Parse and check every def of `text`."""
    module = parse_module(text, name)
    ops: dict[str, Op] = {}
    for d in module.defs:
        if d.name in ops:
            raise LangError(f"def '{d.name}' is defined twice", d.loc)
        ops[d.name] = check_def(d)
    return Program(ops, module)


def op(text, name: str | None = None) -> Op:
    """The one def of `text` (or the def called `name`)."""
    prog = parse(text)
    if name is not None:
        return prog[name]
    if len(prog) != 1:
        names = ", ".join(prog.ops) or "none"
        raise LangError(f"source has {len(prog)} defs ({names}); pass name= to choose one")
    return next(iter(prog))
