"""Golden printed forms of the registry's programs, and print/parse round trips.

tests/lang/golden/<name>.tc holds `str(prog)`: each def printed back as TC
with a comment above each statement giving the inferred type and shape of the
tensor written, the reduction indices with their accumulation type, and every
index range. Run `pytest tests/lang --update-golden` to rewrite the files after
an intended change, then review the diff: the ranges, shapes and dtypes in
them are the language's inference results.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import tcomp
from tcomp.lang import module_to_text, parse_module

from .programs import CASES

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden(case, update_golden):
    prog = case.program()
    text = str(prog)
    if len(prog) == 1:
        assert text == str(next(iter(prog))) + "\n"
    path = GOLDEN / f"{case.name}.tc"
    if update_golden:
        GOLDEN.mkdir(exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return
    assert path.exists(), f"missing golden file {path}; run pytest with --update-golden"
    assert text == path.read_text(), (
        f"printed form of '{case.name}' differs from {path} (rerun with --update-golden if the "
        f"change is intended, and review the diff)")


def test_no_stale_golden_files():
    names = {c.name for c in CASES}
    stale = sorted(p.name for p in GOLDEN.glob("*.tc") if p.stem not in names)
    assert not stale, f"golden files without a program in programs.py: {stale}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_print_parse_round_trip(case):
    prog = case.program()
    text = str(prog)
    again = tcomp.parse(text)
    assert str(again) == text
    assert list(again.ops) == list(prog.ops)
    for name, op in prog.ops.items():
        # The checked ops agree too (locations take no part in equality).
        assert again[name] == op
        # Printing without the comments parses back to the same op.
        plain = tcomp.parse(op.to_text(notes=False))
        assert str(plain[name]) == str(op)
        assert "#" not in op.to_text(notes=False)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_module_round_trip(case):
    module = parse_module(case.src)
    text = module_to_text(module)
    again = parse_module(text)
    assert again == module
    assert module_to_text(again) == text


def test_every_program_has_a_golden_file_name():
    # Names become file names: keep them plain.
    for c in CASES:
        assert c.name.isidentifier(), c.name
