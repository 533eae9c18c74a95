"""Sources beyond what tcomp holds (issue 22, defect 8): an integer literal of more than
4,300 digits (Python's int() refused it with a ValueError) and a tensor of more than 64
dimensions (NumPy refused it with a ValueError at evaluate) are LangErrors at parse time,
with the location of the literal or of the tensor's name."""
from __future__ import annotations

import pytest

import tcomp


def lang_error(src):
    with pytest.raises(tcomp.LangError) as e:
        tcomp.op(src)
    return e.value


@pytest.mark.parametrize("digits", [21, 4300, 4301, 100_000])
def test_integer_literal_of_many_digits(digits):
    src = "def f(float(N) A) -> (B) { B(i) = A(i) * " + "9" * digits + " }"
    e = lang_error(src)
    assert e.message == f"integer literal 999999999999... ({digits} digits) does not fit in int32"
    assert (e.line, e.col) == (1, 42)


def test_integer_literal_of_many_digits_as_a_dimension():
    e = lang_error("def f(float(" + "1" * 5000 + ") A) -> (B) { B(i) = A(i) }")
    assert e.message == "integer literal 111111111111... (5000 digits) does not fit in int32"
    assert (e.line, e.col) == (1, 13)


def test_leading_zeros_are_not_digits_that_count():
    op = tcomp.op("def f(float(N) A) -> (B) { B(i) = A(i) * " + "0" * 5000 + "7 }")
    assert "7" in str(op.statements[0].rhs)


def dims(n, prefix="N"):
    return ", ".join(f"{prefix}{k}" for k in range(n))


@pytest.mark.parametrize("src, name, col", [
    (f"def f(float({dims(65)}) X) -> (O) {{ O(i) = X(i) }}", "X", None),
    (f"def f(float(N) X) -> (float({dims(70)}) O) {{ O(i) = X(i) }}", "O", None),
    (f"def f(float(N) X) -> (O) {{ O({dims(65, 'i')}) = X(i0) }}", "O", 28),
])
def test_more_than_64_dimensions(src, name, col):
    e = lang_error(src)
    rank = 70 if "N69" in src else 65
    assert e.message == (f"tensor '{name}' has {rank} dimensions; tcomp supports at most 64 "
                         f"(NumPy's limit)")
    assert e.col == (col if col is not None else src.index(f" {name})") + 2)


def test_64_dimensions_are_fine():
    import numpy as np
    op = tcomp.op(f"def f(float({dims(64)}) X) -> (O) {{ O({dims(64, 'i')}) = X({dims(64, 'i')}) "
                  f"* 2 }}")
    X = np.ones((1,) * 64, np.float32)
    assert tcomp.evaluate(op, X).shape == (1,) * 64
