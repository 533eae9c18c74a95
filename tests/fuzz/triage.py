"""Triage of fuzzer failures: which known defect's shape a failed pair has
(issue 22's defects 1, 2, 3 and 9, and the findings F1-F5 of TESTING.md),
printed as "suspect: ..." lines in its reproducer. A suspect is a hint for
the reader, never a reason to accept a failure.
"""
from __future__ import annotations

import re

from .names import CPP_KEYWORDS, CUDA_NAMES

INT_CAST = re.compile(r"(?<![\w.])((?:u?int(?:8|16|32|64))|bool)\(")


def tags_bound_twice(s) -> list[str]:
    """Issue 22 defect 1: a thread tag bound on a stage's loops and again on a
    loop of a stage it is computed in, at or outside the attach point."""
    out = []
    states = s.states

    def path(name):  # (stage, leaf, tag) bound on the loops around stage `name`'s body
        st = states[name]
        own = [(name, leaf, t) for leaf, t in st.bind.items() if leaf in st.leaves]
        if st.attach[0] != "at":
            return own
        host = states[st.attach[1]]
        outer = host.leaves[:host.leaves.index(st.attach[2]) + 1] \
            if st.attach[2] in host.leaves else []
        return own + [x for x in path(st.attach[1]) if x[0] != st.attach[1] or x[1] in outer]

    for name in states:
        seen = {}
        for stage, leaf, tag in path(name):
            if tag in seen and tag.startswith("threadIdx"):
                out.append(f"{tag} bound to {seen[tag]} and to {stage}.{leaf} on one path")
            seen.setdefault(tag, f"{stage}.{leaf}")
    return sorted(set(out))


def user_names(op) -> set[str]:
    """Every name the program gives: def, tensors, sizes, indices."""
    names = {op.name} | set(op.size_vars)
    names |= {t.name for t in op.inputs + op.outputs + op.temporaries}
    for st in op.statements:
        names |= set(st.spatial) | set(st.reduce) | set(st.lets)
    return names


def captured_names(op, s) -> list[str]:
    """Issue 22 defect 2: user names (sizes, tensors) equal to a name the
    schedule generates (split/fuse loop names, cache and snapshot buffers,
    the axes of copy stages)."""
    user = set(op.size_vars) | {t.name for t in op.inputs + op.outputs + op.temporaries}
    made = set()
    for st in s.states.values():
        own = set(st.definition.spatial) | set(st.definition.reduce)
        made |= set(st.kinds) - own if st.origin == "statement" else set(st.kinds)
        if st.origin != "statement":
            made.add(st.tensor)
            made.add(st.tensor + "_acc")
    made |= {f"{t}_acc" for t in user} | {f"{t}_local_acc" for t in user}
    return sorted(user & made)


def diagonal_reads(s) -> list[str]:
    """A stage computed at a consumer that reads it with an index repeated
    (`T(k, k)`): the check that an output computed inside is read whole
    takes the diagonal for all of it (finding F1 in TESTING.md)."""
    from tcomp.lang.ast import Index, Read, walk
    out = []
    for name, st in s.states.items():
        if st.attach[0] != "at":
            continue
        host = s.states[st.attach[1]].definition
        for e in [host.rhs, *host.lets.values()]:
            for r in walk(e):
                if isinstance(r, Read) and r.tensor == st.tensor:
                    idx = [a.name for a in r.args if isinstance(a, Index)]
                    if len(idx) != len(set(idx)):
                        out.append(f"{name} computed at {st.attach[1]}, which reads "
                                   f"{st.tensor}({', '.join(idx)})")
    return sorted(set(out))


def _gathered_cache(s) -> bool:
    """A cache stage of a tensor that a subscript reads, or that is read through
    a subscript that reads another tensor (a gather)."""
    from tcomp.lang.ast import Read, walk
    gathered, index = set(), set()
    for st in s.states.values():
        for r in walk(st.definition.rhs):
            if isinstance(r, Read):
                inner = {x.tensor for a in r.args for x in walk(a) if isinstance(x, Read)}
                if inner:
                    gathered.add(r.tensor)
                    index |= inner
    return any(st.origin == "cache_read" and st.tensor in gathered | index
               for st in s.states.values())


def suspects(res, op, s) -> list[str]:
    """The known defects whose shape failed pair `res` (op, schedule s) has."""
    out = []
    captured = captured_names(op, s)
    if captured:
        out.append(f"issue 22 defect 2 (a user name captured by a generated one): "
                            f"{', '.join(captured)}")
    clash = sorted(user_names(op) & (set(CPP_KEYWORDS) | set(CUDA_NAMES)))
    if clash and res.kind in ("nvrtc", "wrong-emulated", "emulated-crash"):
        out.append(f"issue 22 defect 2 (C++/CUDA names not mangled): {', '.join(clash)}")
    for x in tags_bound_twice(s):
        out.append(f"issue 22 defect 1 (a thread tag bound twice): {x}")
    for name, st in s.states.items():
        stale = sorted(leaf for leaf in st.bind if leaf not in st.leaves)
        if stale:
            out.append(f"F5 (a split or tile of a bound loop keeps its bind): "
                                f"{name}.{', '.join(stale)}")
    if _gathered_cache(s):
        out.append("F3/F4 (a cache of a gathered tensor, or of a gather's index)")
    for x in diagonal_reads(s):
        out.append(f"F1 (an output computed at a reader of its diagonal): {x}")
    casts = sorted(set(INT_CAST.findall(res.source)))
    if casts and res.kind.startswith("wrong"):
        out.append(f"issue 22 defect 3 (float to integer casts out of range), if a "
                            f"float reaches {', '.join(casts)}")
    if "has already been declared" in res.message and "nroll" in res.schedule_json:
        out.append("issue 22 defect 9 (a shared cache declared once per unrolled copy)")
    return out
