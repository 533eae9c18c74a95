"""Layouts as data, in the spirit of CuTe's `Layout(shape, stride)` composed
with a `Swizzle<B, M, S>`, with coordinate-valued strides as in CuTe's scaled
bases and Triton's linear layouts.

A `Layout` maps a coordinate to a value:

    Layout(shape=((4, 8), (2, 2)), stride=((E(0, 2), E(1, 0)), (E(0, 1), E(8, 0))))

* `shape` is an int or a nested tuple of ints (a hierarchical shape); `stride`
  has the same nesting, one stride per leaf. A stride leaf is an int (the
  layout's values are offsets) or an `E` vector (the values are coordinates,
  e.g. (row, col) of a matrix: `E(0, 2)` adds 2 to the column); all leaves of
  one layout are of one kind and, for `E`, of one length.
* A coordinate has one entry per top-level mode; the entry of a nested mode
  may be a nested tuple or one index over that mode. One index alone stands for
  the whole layout. An index decomposes over leaves colexicographically (the
  leftmost leaf varies fastest, as in CuTe): leaf i gets (x // p_i) % n_i, p_i
  the product of the leaf sizes before it. The last leaf gets x // p_last
  without the modulo, so an index past the size extends the outermost leaf.
* The value is the sum of coordinate x stride over the leaves.

Evaluation is generic over the values it computes with. `layout(*coord)` uses
Python's operators, so ints, NumPy arrays (whole tables at once) and sympy
symbols all work; `layout(*coord, ops=...)` takes any object with `add, mul,
floordiv, mod, const` (and `xor, and_, shr, shl` for a swizzle) methods, so the
lowering can build its IR expressions with it (arch imports nothing from
lower). Terms that cannot matter are not formed: a stride 0 or a leaf of size 1
adds nothing, a stride or divisor 1 is not multiplied or divided by, the last
leaf is not reduced modulo its size, and sums are formed left to right in leaf
order, so the expressions are the ones a person would write.

A `Swizzle(B, M, S)` is CuTe's XOR functor on offsets: the B bits at
[M + S, M + S + B) are XORed into the B bits at [M, M + B):
`o ^ ((o & yyy) >> S)` (include/cute/swizzle.hpp). `ComposedLayout(sw, L)` is
`sw ∘ L`: L first, then the swizzle of its offset.

A `Fragment` is a thread-value layout: (thread, value) -> (row, col) of a
`rows x cols` tile, the register layout of a warp- or warpgroup-wide operand.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class E:
    """A coordinate-valued stride: moving one step along its leaf adds
    `components` to the (row, col, ...) value."""
    components: tuple[int, ...]

    def __init__(self, *components: int):
        object.__setattr__(self, "components", tuple(int(c) for c in components))

    def __mul__(self, k: int) -> "E":
        return E(*(c * k for c in self.components))

    def __repr__(self) -> str:
        return "E(" + ", ".join(str(c) for c in self.components) + ")"


class PythonOps:
    """Evaluation with Python's operators: ints, NumPy arrays, sympy, and any
    values that define them."""

    def const(self, v: int):
        return v

    def add(self, a, b):
        return a + b

    def mul(self, a, k: int):
        return a * k

    def floordiv(self, a, k: int):
        return a // k

    def mod(self, a, k: int):
        return a % k

    def and_(self, a, k: int):
        return a & k

    def xor(self, a, b):
        return a ^ b

    def shr(self, a, k: int):
        return a >> k

    def shl(self, a, k: int):
        return a << k


PY = PythonOps()


def _leaves(shape, stride):
    """[(size, stride)] of the leaves, left to right."""
    if isinstance(shape, tuple):
        if not isinstance(stride, tuple) or len(stride) != len(shape):
            raise ValueError(f"stride {stride!r} does not have the nesting of shape {shape!r}")
        return [leaf for s, d in zip(shape, stride) for leaf in _leaves(s, d)]
    if isinstance(stride, tuple):
        raise ValueError(f"stride {stride!r} does not have the nesting of shape {shape!r}")
    if not isinstance(shape, int) or isinstance(shape, bool) or shape < 1:
        raise ValueError(f"a layout's shape holds positive ints, not {shape!r}")
    if not isinstance(stride, (int, E)) or isinstance(stride, bool):
        raise ValueError(f"a stride is an int or an E vector, not {stride!r}")
    return [(shape, stride)]


def _size(shape) -> int:
    return math.prod(_size(s) for s in shape) if isinstance(shape, tuple) else shape


def _nest_like(shape, flat: list):
    """`flat` (one entry per leaf) regrouped with `shape`'s nesting."""
    if not isinstance(shape, tuple):
        return flat.pop(0)
    return tuple(_nest_like(s, flat) for s in shape)


@dataclass(frozen=True)
class Layout:
    shape: object  # int | tuple (nested)
    stride: object  # int | E | tuple (nested like shape)

    def __post_init__(self):
        leaves = _leaves(self.shape, self.stride)
        kinds = {type(d) for _, d in leaves}
        if len(kinds) > 1:
            raise ValueError(f"layout {self}: strides mix ints and E vectors")
        if kinds == {E} and len({len(d.components) for _, d in leaves}) > 1:
            raise ValueError(f"layout {self}: E strides of different lengths")

    # ------------------------------------------------------------ structure
    @property
    def leaves(self) -> list[tuple[int, int | E]]:
        return _leaves(self.shape, self.stride)

    @property
    def rank(self) -> int:
        return len(self.shape) if isinstance(self.shape, tuple) else 1

    @property
    def size(self) -> int:
        return _size(self.shape)

    @property
    def dims(self) -> int | None:
        """The length of the coordinate values (E strides), None for offsets."""
        for _, d in self.leaves:
            return len(d.components) if isinstance(d, E) else None
        return None

    def mode(self, i: int) -> "Layout":
        if not isinstance(self.shape, tuple):
            if i != 0:
                raise IndexError(f"layout {self} has one mode")
            return self
        return Layout(self.shape[i], self.stride[i])

    def __str__(self) -> str:
        return f"{_text(self.shape)}:{_text(self.stride)}"

    # ------------------------------------------------------------ evaluation
    def __call__(self, *coord, ops=PY):
        """The value at `coord` (one entry per top-level mode, or one index over
        the whole layout): an offset, or a tuple for E strides."""
        if len(coord) == 1 and self.rank > 1:
            parts = [(coord[0], self.leaves)]
        elif len(coord) == self.rank:
            parts = [(c, self.mode(i).leaves) for i, c in enumerate(coord)]
        else:
            raise ValueError(f"layout {self} takes {self.rank} coordinates or one index, "
                             f"not {len(coord)}")
        terms = []  # (leaf coordinate, stride)
        for c, leaves in parts:
            terms += list(zip(_decompose(c, leaves, ops), (d for _, d in leaves)))
        return self._combine(terms, ops)

    def _combine(self, terms, ops):
        dims = self.dims
        if dims is None:
            return _sum([(x, d) for x, d in terms], ops)
        return tuple(_sum([(x, d.components[k]) for x, d in terms], ops) for k in range(dims))

    def table(self) -> np.ndarray:
        """The values at every index 0 .. size-1, in order: shape (size,) or
        (size, dims) for E strides."""
        idx = np.arange(self.size)
        v = self(idx)
        if self.dims is None:
            return np.broadcast_to(np.asarray(v), idx.shape).copy()
        return np.stack([np.broadcast_to(np.asarray(x), idx.shape) for x in v], axis=-1)

    # ------------------------------------------------------------ algebra
    def coalesce(self) -> "Layout":
        """The same map on indices with the fewest leaves: leaves of size 1
        dropped, and a leaf merged into the one before it when it continues it
        (stride = size x stride before). Flat (a rank-1 or flat tuple result)."""
        out: list[list] = []
        for n, d in self.leaves:
            if n == 1:
                continue
            if out and _eq(d, _scale(out[-1][1], out[-1][0])):
                out[-1][0] *= n
            else:
                out.append([n, d])
        if not out:
            zero = E(*([0] * self.dims)) if self.dims is not None else 0
            return Layout(1, zero)
        if len(out) == 1:
            return Layout(out[0][0], out[0][1])
        return Layout(tuple(n for n, _ in out), tuple(d for _, d in out))

    def is_bijective_onto(self, extents: tuple[int, ...]) -> bool:
        """Whether the layout hits every point of the box `extents` exactly once
        (E strides: one extent per component; int strides: one extent)."""
        t = self.table()
        if t.ndim == 1:
            t = t[:, None]
        if t.shape[1] != len(extents) or len(t) != math.prod(extents):
            return False
        if (t < 0).any() or (t >= np.asarray(extents)).any():
            return False
        flat = np.ravel_multi_index(tuple(t.T), extents)
        return len(np.unique(flat)) == len(flat)

    def inverse(self) -> dict:
        """{value: index} over the whole layout (its values must be distinct)."""
        t = self.table()
        keys = [tuple(int(x) for x in row) if t.ndim == 2 else int(row) for row in t]
        inv = {}
        for i, k in enumerate(keys):
            if k in inv:
                raise ValueError(f"layout {self} is not injective: {k} at indices {inv[k]} "
                                 f"and {i}")
            inv[k] = i
        return inv

    def with_swizzle(self, swizzle: "Swizzle") -> "ComposedLayout":
        return ComposedLayout(swizzle, self)


def _decompose(c, leaves, ops):
    """The coordinate of each leaf from `c` (an index over the leaves, or a
    nested tuple with one entry per leaf)."""
    if isinstance(c, tuple):
        flat = _flatten(c)
        if len(flat) != len(leaves):
            raise ValueError(f"coordinate {c!r} does not match {len(leaves)} leaves")
        return [None if n == 1 else x for x, (n, _) in zip(flat, leaves)]
    out, prefix = [], 1
    last = max((i for i, (n, _) in enumerate(leaves) if n > 1), default=-1)
    for i, (n, _) in enumerate(leaves):
        if n == 1:  # (its coordinate is 0)
            out.append(None)
            continue
        x = c if prefix == 1 else ops.floordiv(c, prefix)
        if i < last:
            x = ops.mod(x, n)
        out.append(x)
        prefix *= n
    return out


def _flatten(c):
    return [y for x in c for y in _flatten(x)] if isinstance(c, tuple) else [c]


def _sum(terms, ops):
    """The sum of x * k over terms, without zero terms or unit factors."""
    acc = None
    for x, k in terms:
        if k == 0 or x is None:
            continue
        t = x if k == 1 else ops.mul(x, k)
        acc = t if acc is None else ops.add(acc, t)
    return ops.const(0) if acc is None else acc


def _scale(d, n):
    return d * n


def _eq(a, b) -> bool:
    return (a.components == b.components) if isinstance(a, E) and isinstance(b, E) else a == b


def _text(x) -> str:
    if isinstance(x, tuple):
        return "(" + ",".join(_text(y) for y in x) + ")"
    return repr(x) if isinstance(x, E) else str(x)


# ------------------------------------------------------------------ swizzles
@dataclass(frozen=True)
class Swizzle:
    """CuTe's Swizzle<B, M, S> (include/cute/swizzle.hpp): with
    yyy = ((1 << B) - 1) << (M + max(0, S)), an offset o becomes
    o ^ shiftr(o & yyy, S): the B bits at [M + S, M + S + B) XORed into those at
    [M, M + B) (S > 0). On byte offsets, Swizzle(3, 4, 3) is the 128-byte
    swizzle of TMA and wgmma (16-byte chunk c of a 128-byte row r at c ^ (r % 8)),
    Swizzle(2, 4, 3) the 64-byte one, Swizzle(1, 4, 3) the 32-byte one."""
    bits: int
    base: int
    shift: int

    def __post_init__(self):
        if self.bits < 0 or self.base < 0 or abs(self.shift) < self.bits:
            raise ValueError(f"Swizzle({self.bits}, {self.base}, {self.shift}): needs B >= 0, "
                             f"M >= 0 and |S| >= B")

    @property
    def yyy_mask(self) -> int:
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_mask(self) -> int:
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    @property
    def period(self) -> int:
        """The offsets after which the pattern repeats (and the alignment a
        swizzled tile needs, in the swizzle's units): 1024 bytes for 128B."""
        return 1 << (self.base + abs(self.shift) + self.bits)

    def __call__(self, offset, ops=PY):
        if self.bits == 0:
            return offset
        moved = ops.and_(offset, self.yyy_mask)
        moved = ops.shr(moved, self.shift) if self.shift >= 0 else ops.shl(moved, -self.shift)
        return ops.xor(offset, moved)

    def in_units(self, unit_bytes: int) -> "Swizzle":
        """This swizzle of byte offsets, on offsets counted in units of
        `unit_bytes` (a power of two, at most 2**base): bf16 elements turn
        Swizzle(3, 4, 3) into Swizzle(3, 3, 3)."""
        k = unit_bytes.bit_length() - 1
        if unit_bytes < 1 or unit_bytes != 1 << k or k > self.base:
            raise ValueError(f"{self}: cannot count offsets in units of {unit_bytes} bytes")
        return Swizzle(self.bits, self.base - k, self.shift)

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"


@dataclass(frozen=True)
class ComposedLayout:
    """`swizzle ∘ layout`: the layout's offset, then swizzled."""
    swizzle: Swizzle
    layout: Layout

    def __post_init__(self):
        if self.layout.dims is not None:
            raise ValueError(f"a swizzle applies to offsets, not to the coordinates of "
                             f"{self.layout}")

    def __call__(self, *coord, ops=PY):
        return self.swizzle(self.layout(*coord, ops=ops), ops=ops)

    @property
    def size(self) -> int:
        return self.layout.size

    def table(self) -> np.ndarray:
        return np.asarray(self.swizzle(self.layout.table()))

    def __str__(self) -> str:
        return f"{self.swizzle} o {self.layout}"


# ------------------------------------------------------------------ fragments
@dataclass(frozen=True)
class Fragment:
    """A thread-value layout: `layout` has two top-level modes (thread, value)
    and E strides of length 2, mapping (thread, value) to (row, col) of a
    `rows x cols` tile. Thread t holds `per_thread` values of the tile in its
    registers, value v at `coords(t, v)`."""
    name: str
    rows: int
    cols: int
    layout: Layout

    def __post_init__(self):
        if self.layout.rank != 2 or self.layout.dims != 2:
            raise ValueError(f"fragment {self.name}: a (thread, value) -> (row, col) layout "
                             f"needs two modes and E strides of two components, not "
                             f"{self.layout}")

    @property
    def threads(self) -> int:
        return self.layout.mode(0).size

    @property
    def per_thread(self) -> int:
        return self.layout.mode(1).size

    @property
    def per_lane(self) -> int:
        """(the name warp-level code uses: per_thread)"""
        return self.per_thread

    def coords(self, thread, value, ops=PY) -> tuple:
        """(row, col) of value `value` of thread `thread`: ints, arrays, or
        expressions built with `ops`."""
        return self.layout(thread, value, ops=ops)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """(row, col) as two (threads, per_thread) int arrays."""
        t = np.arange(self.threads)[:, None]
        v = np.arange(self.per_thread)[None, :]
        r, c = self.coords(t, v)
        shape = (self.threads, self.per_thread)
        return np.broadcast_to(r, shape).copy(), np.broadcast_to(c, shape).copy()

    def owner(self, row: int, col: int) -> tuple[int, int]:
        """(thread, value) holding (row, col): the inverse map."""
        r, c = self.table()
        hit = np.argwhere((r == row) & (c == col))
        if len(hit) != 1:
            raise ValueError(f"{self.name}: ({row}, {col}) is not held by exactly one lane")
        return int(hit[0][0]), int(hit[0][1])

    def is_bijective(self) -> bool:
        """Every element of the tile held by exactly one (thread, value)."""
        return self.layout.is_bijective_onto((self.rows, self.cols))

    def vectors(self, n: int) -> "Fragment":
        """The fragment over vectors of `n` adjacent columns: the value mode's
        first leaf must be n consecutive columns (size n, stride E(0, 1)); it
        is dropped and every column stride divided by n, so (thread, v) gives
        (row, col / n) of vector v."""
        t_mode, v_mode = self.layout.mode(0), self.layout.mode(1)
        leaves = v_mode.leaves
        if leaves[0][0] != n or leaves[0][1].components != (0, 1):
            raise ValueError(f"fragment {self.name}: its values do not come in runs of {n} "
                             f"adjacent columns")

        def divide(layout):
            out = []
            for size, d in layout.leaves:
                r, c = d.components
                if c % n:
                    raise ValueError(f"fragment {self.name}: a column stride {c} is not a "
                                     f"multiple of {n}")
                out.append((size, E(r, c // n)))
            return out
        tl, vl = divide(t_mode), divide(Layout(
            tuple(s for s, _ in leaves[1:]) or 1, tuple(d for _, d in leaves[1:]) or E(0, 0)))
        shape = (_nest_like(t_mode.shape, [s for s, _ in tl]), tuple(s for s, _ in vl))
        stride = (_nest_like(t_mode.shape, [d for _, d in tl]), tuple(d for _, d in vl))
        return Fragment(f"{self.name}/x{n}", self.rows, self.cols // n, Layout(shape, stride))
