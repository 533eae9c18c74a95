"""The IR core (the nodes, their walks, the intrinsic registry, the printer,
rewriter and verifier) sits below the schedule package: it imports the
language and the machine model (tcomp/arch), never tcomp.schedule (issue 23:
the import circles between lowering and scheduling start there)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = ["ir.py", "ir_walk.py", "intrinsics.py", "intrinsics_sm90.py", "printer.py",
        "rewriter.py", "verify.py", "accesses.py", "layout_exprs.py"]
LOWER = Path(__file__).resolve().parents[2] / "tcomp" / "lower"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            yield "." * node.level + (node.module or "")
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


@pytest.mark.parametrize("name", CORE)
def test_the_ir_core_does_not_import_the_schedule_package(name):
    bad = [m for m in _imports(LOWER / name)
           if m.startswith("..schedule") or m.startswith("tcomp.schedule")]
    assert not bad, f"tcomp/lower/{name} imports {bad}"
