"""Random schedules for the differential fuzzer.

Unlike the generator of tests/schedule/test_properties.py, which keeps a model
of what is legal and draws only legal primitives, this one draws any
primitive with random (plausible) arguments and lets tcomp decide: a
primitive that raises `ScheduleError` is skipped (and must leave the
schedule as it was), any other exception is a fuzzer failure. So it also
reaches the schedules that the model rules out, where tcomp must either
refuse or compute the right answer: a thread tag bound again by a producer
computed at a loop bound to it (defect 1 of issue 22), blocks and threads
bound in stages computed inside others, caches in any scope at any loop.

Thread tags are drawn with a bias to tags already bound somewhere in the
schedule, so that tags meet at different levels of one nest.
"""
from __future__ import annotations

import random

import tcomp
from tcomp.lang.symbolic import eval_int
from tcomp.schedule.stage import THREAD_TAGS, FuseRel, SplitRel

ACTIONS = {"split": 6, "tile": 2, "fuse": 3, "reorder": 3, "bind": 8, "unroll": 2,
           "vectorize": 2, "compute_at": 6, "compute_inline": 3, "compute_root": 1,
           "cache_read": 3, "cache_write": 2, "rfactor": 2, "coop": 2, "pipeline": 1,
           "storage_align": 1, "storage_order": 1, "set_scope": 1, "swizzle": 1,
           "rasterize": 1, "tensorize": 1, "nest": 8}
SCOPES = ("global", "shared", "local")


class PrimitiveChangedSchedule(Exception):
    """A primitive raised ScheduleError but left a changed schedule behind."""


class ScheduleGen:
    def __init__(self, rng: random.Random, op, sizes: dict):
        self.rng, self.op, self.sizes = rng, op, sizes
        self.s = tcomp.Schedule(op)
        self.log: list[str] = []  # every primitive tried, "# refused: ..." after refused ones
        self.applied = 0

    # ------------------------------------------------------------ helpers
    def names(self, loops=True):
        return [n for n, st in self.s.states.items()
                if not loops or st.attach != ("inline",)]

    def stage(self):
        names = self.names()
        return self.s[self.rng.choice(names)] if names else None

    def leaf(self, stg, kind=None):
        lv = [a for a in stg.leaf_axes if kind is None or a.kind == kind]
        return self.rng.choice(lv) if lv else None

    def tag(self):
        r = self.rng
        used = sorted({t for st in self.s.states.values() for t in st.bind.values()})
        if used and r.random() < 0.5:
            return r.choice(used)
        return r.choice(THREAD_TAGS[3:] * 3 + THREAD_TAGS[:3])

    def extent(self, stage: str, leaf: str):
        """The extent of a loop of a stage at root for the program's sizes (None
        when unknown)."""
        st = self.s.states[stage]
        if leaf in st.definition.ranges:
            lo, hi = st.definition.ranges[leaf]
            try:
                return eval_int(hi, self.sizes) - eval_int(lo, self.sizes)
            except Exception:
                return None
        for rel in st.relations:
            if isinstance(rel, SplitRel) and leaf in (rel.outer, rel.inner):
                e = self.extent(stage, rel.parent)
                if e is None:
                    return None
                n = rel.factor or -(-e // rel.nparts)
                if n == 0:  # an empty loop (`where j in 1:N` at N = 1) split by nparts
                    return 0  # (seed 6 pair 26663: ZeroDivisionError in the generator)
                return n if leaf == rel.inner else -(-e // n)
            if isinstance(rel, FuseRel) and leaf == rel.fused:
                a, b = self.extent(stage, rel.outer), self.extent(stage, rel.inner)
                return None if a is None or b is None else a * b
        return None

    def factor(self):
        return self.rng.choice([1, 2, 2, 3, 4, 4, 5, 8, 16])

    def readers(self, tensor):
        return [n for n in self.s.readers(tensor) if self.s.states[n].attach != ("inline",)]

    def call(self, text: str, thunk):
        """Try one primitive; True when it was applied."""
        before = self.s.to_json()
        self.log.append(text)
        try:
            thunk()
        except tcomp.ScheduleError as e:
            self.log[-1] += f"  # refused: {str(e).splitlines()[0][:120]}"
            if self.s.to_json() != before:
                raise PrimitiveChangedSchedule(f"{text} raised ScheduleError ({e}) but changed "
                                               f"the schedule") from None
            return False
        self.applied += 1
        return True

    # ------------------------------------------------------------ run
    def run(self, steps: int):
        acts, weights = zip(*ACTIONS.items())
        for _ in range(steps):
            getattr(self, "do_" + self.rng.choices(acts, weights)[0])()
        self.finalize()
        return self.s

    def finalize(self):
        """A shared/local copy left at root is refused by lowering: compute it at
        a loop of one of its readers, as a user would (a few tries)."""
        for _ in range(3):
            for name, st in list(self.s.states.items()):
                if st.scope != "global" and st.attach == ("root",):
                    readers = self.readers(st.tensor)
                    if readers:
                        c = self.s[self.rng.choice(readers)]
                        ax = self.leaf(c)
                        if ax is not None:
                            self.call(f"s[{name!r}].compute_at(s[{c.name!r}], {ax.name!r})",
                                      lambda: self.s[name].compute_at(c, ax))

    # ------------------------------------------------------------ primitives
    def do_split(self):
        stg = self.stage()
        ax = stg and self.leaf(stg)
        if ax is None:
            return
        f = self.factor()
        if self.rng.random() < 0.7:
            self.call(f"s[{stg.name!r}].split({ax.name!r}, {f})", lambda: stg.split(ax, f))
        else:
            self.call(f"s[{stg.name!r}].split({ax.name!r}, nparts={f})",
                      lambda: stg.split(ax, nparts=f))

    def do_tile(self):
        stg = self.stage()
        if stg is None or len(stg.leaf_axes) < 2:
            return
        x, y = self.rng.sample(list(stg.leaf_axes), 2)
        fx, fy = self.factor(), self.factor()
        self.call(f"s[{stg.name!r}].tile({x.name!r}, {y.name!r}, {fx}, {fy})",
                  lambda: stg.tile(x, y, fx, fy))

    def do_fuse(self):
        stg = self.stage()
        if stg is None or len(stg.leaf_axes) < 2:
            return
        lv = list(stg.leaf_axes)
        if self.rng.random() < 0.85:
            i = self.rng.randrange(len(lv) - 1)
            a, b = lv[i], lv[i + 1]
        else:
            a, b = self.rng.sample(lv, 2)
        self.call(f"s[{stg.name!r}].fuse({a.name!r}, {b.name!r})", lambda: stg.fuse(a, b))

    def do_reorder(self):
        stg = self.stage()
        if stg is None or len(stg.leaf_axes) < 2:
            return
        sub = self.rng.sample(list(stg.leaf_axes), self.rng.randint(2, len(stg.leaf_axes)))
        self.call(f"s[{stg.name!r}].reorder({', '.join(repr(a.name) for a in sub)})",
                  lambda: stg.reorder(*sub))

    def do_bind(self):
        stg = self.stage()
        ax = stg and self.leaf(stg)
        if ax is None:
            return
        tag = self.tag()
        self.call(f"s[{stg.name!r}].bind({ax.name!r}, {tag!r})", lambda: stg.bind(ax, tag))

    def do_unroll(self):
        stg = self.stage()
        ax = stg and self.leaf(stg)
        if ax is None:
            return
        f = self.rng.choice([None, None, 2, 4])
        self.call(f"s[{stg.name!r}].unroll({ax.name!r}, factor={f})",
                  lambda: stg.unroll(ax, factor=f))

    def do_vectorize(self):
        stg = self.stage()
        if stg is None or not stg.leaf_axes:
            return
        ax = stg.leaf_axes[-1] if self.rng.random() < 0.7 else self.leaf(stg)
        self.call(f"s[{stg.name!r}].vectorize({ax.name!r})", lambda: stg.vectorize(ax))

    def do_compute_at(self):
        p = self.stage()
        if p is None:
            return
        readers = [n for n in self.readers(p.tensor) if n != p.name]
        others = [n for n in self.names() if n != p.name]
        pool = readers if readers and self.rng.random() < 0.8 else others
        if not pool:
            return
        c = self.s[self.rng.choice(pool)]
        ax = self.leaf(c)
        if ax is None:
            return
        self.call(f"s[{p.name!r}].compute_at(s[{c.name!r}], {ax.name!r})",
                  lambda: p.compute_at(c, ax))

    def do_compute_inline(self):
        stg = self.stage()
        if stg is not None:
            self.call(f"s[{stg.name!r}].compute_inline()", stg.compute_inline)

    def do_compute_root(self):
        stg = self.stage()
        if stg is not None:
            self.call(f"s[{stg.name!r}].compute_root()", stg.compute_root)

    def do_cache_read(self):
        r = self.rng
        tensors = sorted({t for st in self.s.states.values() for t in st.definition.reads()})
        tensors = [t for t in tensors if self.readers(t)]
        if not tensors:
            return
        t = r.choice(tensors)
        readers = self.readers(t)
        chosen = r.sample(readers, r.randint(1, len(readers)))
        scope = r.choice(SCOPES)
        self.call(f"s.cache_read({t!r}, {scope!r}, {chosen})",
                  lambda: self.s.cache_read(t, scope, [self.s[n] for n in chosen]))

    def do_cache_write(self):
        stg = self.stage()
        if stg is not None:
            scope = self.rng.choice(SCOPES)
            self.call(f"s.cache_write(s[{stg.name!r}], {scope!r})",
                      lambda: self.s.cache_write(stg, scope))

    def do_rfactor(self):
        stg = self.stage()
        ax = stg and self.leaf(stg, "reduce")
        if ax is not None:
            self.call(f"s[{stg.name!r}].rfactor({ax.name!r})", lambda: stg.rfactor(ax))

    def do_coop(self):
        """Cooperative fetching of a shared copy: fuse its loops, split by a
        thread extent, bind the inner loop to a thread tag."""
        shared = [n for n, st in self.s.states.items() if st.scope == "shared"
                  and st.attach[0] == "at" and len(st.leaves) >= 1]
        if not shared:
            return
        stg = self.s[self.rng.choice(shared)]
        f = stg.leaf_axes[0]
        for a in stg.leaf_axes[1:]:
            fused = []
            if not self.call(f"s[{stg.name!r}].fuse({f.name!r}, {a.name!r})",
                             lambda: fused.append(stg.fuse(f, a))):
                return
            f = fused[0]
        t, tag, parts = self.factor(), self.tag(), []
        if self.call(f"s[{stg.name!r}].split({f.name!r}, {t})",
                     lambda: parts.extend(stg.split(f, t))):
            self.call(f"s[{stg.name!r}].bind({parts[1].name!r}, {tag!r})",
                      lambda: stg.bind(parts[1], tag))

    def do_nest(self):
        """Threads at two levels of one nest: bind a consumer's loop to a thread
        tag, compute a producer at that loop (or one inside it), and bind a loop
        of the producer (after a split, half the time) to a tag, the same one
        half the time (the shape of issue 22's defect 1)."""
        r = self.rng
        pairs = [(p, c) for p in self.names() for c in self.readers(self.s[p].tensor) if c != p]
        temps = {t.name for t in self.op.temporaries}  # (an output computed inside is refused
        inner = [pc for pc in pairs if self.s[pc[0]].tensor in temps]  # unless read whole)
        pairs = inner if inner and r.random() < 0.8 else pairs
        if not pairs:
            return
        p, c = (self.s[n] for n in r.choice(pairs))
        lv = list(c.leaf_axes)
        i = r.randrange(len(lv)) if lv else None
        if i is None:
            return
        tag = r.choice(THREAD_TAGS[3:])
        if lv[i].name not in self.s.states[c.name].bind:
            self.call(f"s[{c.name!r}].bind({lv[i].name!r}, {tag!r})", lambda: c.bind(lv[i], tag))
        tag = self.s.states[c.name].bind.get(lv[i].name, tag)
        at = r.choice(lv[i:])
        if not self.call(f"s[{p.name!r}].compute_at(s[{c.name!r}], {at.name!r})",
                         lambda: p.compute_at(c, at)):
            return
        ax = self.leaf(p)
        if ax is None:
            return
        same = r.random() < 0.6
        if same or r.random() < 0.5:
            # the same tag: split by the consumer's extent (one extent per tag in a kernel)
            f, parts = self.factor(), []
            if same:
                f = max(1, self.extent(c.name, lv[i].name) or f)
            if not self.call(f"s[{p.name!r}].split({ax.name!r}, {f})",
                             lambda: parts.extend(p.split(ax, f))):
                return
            ax = parts[1]
        tag = tag if same else self.tag()
        self.call(f"s[{p.name!r}].bind({ax.name!r}, {tag!r})", lambda: p.bind(ax, tag))

    def do_pipeline(self):
        stg = self.stage()
        ax = stg and self.leaf(stg)
        if ax is not None:
            n = self.rng.choice([2, 3])
            self.call(f"s[{stg.name!r}].pipeline({ax.name!r}, stages={n})",
                      lambda: stg.pipeline(ax, stages=n))

    def _buffered(self):
        names = [n for n, st in self.s.states.items() if st.scope != "global"
                 and st.definition.spatial]
        return self.s[self.rng.choice(names)] if names else None

    def do_storage_align(self):
        stg = self._buffered()
        if stg is not None:
            ax = self.rng.choice(stg.axes)
            f = self.rng.randint(1, 8)
            off = self.rng.randrange(f)
            self.call(f"s[{stg.name!r}].storage_align({ax.name!r}, {f}, {off})",
                      lambda: stg.storage_align(ax, f, off))

    def do_storage_order(self):
        stg = self._buffered()
        if stg is not None:
            axes = self.rng.sample(list(stg.axes), len(stg.axes))
            self.call(f"s[{stg.name!r}].storage_order({', '.join(repr(a.name) for a in axes)})",
                      lambda: stg.storage_order(*axes))

    def do_swizzle(self):
        stg = self._buffered()
        if stg is not None:
            span = self.rng.choice([32, 64, 128])
            self.call(f"s[{stg.name!r}].swizzle({span})", lambda: stg.swizzle(span))

    def do_set_scope(self):
        temps = {t.name for t in self.op.temporaries}
        names = [n for n, st in self.s.states.items() if st.tensor in temps]
        if names:
            stg = self.s[self.rng.choice(names)]
            scope = self.rng.choice(SCOPES)
            self.call(f"s[{stg.name!r}].set_scope({scope!r})", lambda: stg.set_scope(scope))

    def do_rasterize(self):
        stg = self.stage()
        if stg is None or len(stg.leaf_axes) < 2:
            return
        i = self.rng.randrange(len(stg.leaf_axes) - 1)
        a, b = stg.leaf_axes[i], stg.leaf_axes[i + 1]
        g, tag = self.rng.choice([1, 2, 3]), self.rng.choice(THREAD_TAGS[:3])
        self.call(f"s[{stg.name!r}].rasterize({a.name!r}, {b.name!r}, {g}, {tag!r})",
                  lambda: stg.rasterize(a, b, g, tag))

    def do_tensorize(self):
        stg = self.stage()
        ax = stg and self.leaf(stg)
        if ax is not None:
            self.call(f"s[{stg.name!r}].tensorize({ax.name!r}, 'mma_m16n8k16')",
                      lambda: stg.tensorize(ax, "mma_m16n8k16"))
