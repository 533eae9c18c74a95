"""Shrink a fuzzer failure by hand-free delta debugging: drop directives of
the schedule, then statements and outputs of the program (a statement
whose tensor is still read stays), and smaller sizes, as long as the same
kind of failure remains (`tools/fuzz.py --replay FILE --shrink`).
"""
from __future__ import annotations

import json
import re

from .oracle import JSON_HEAD, replay


def _with(text: str, *, source=None, directives=None, sizes=None) -> str:
    head, rest = text.split("--- TC source:\n", 1)
    src, rest = rest.split("\n--- sizes: ", 1)
    sizes_line, rest = rest.split("\n", 1)
    before_json, after = rest.split(JSON_HEAD + "\n", 1)
    js, tail = after.split("\n--- replay:", 1)
    if sizes is not None:
        sizes_line = re.sub(r"^\{.*?\}", repr(sizes), sizes_line)
    if directives is not None:
        js = json.dumps({"tcomp_schedule": 1, "directives": directives}, indent=1)
    return (f"{head}--- TC source:\n{source or src}\n--- sizes: {sizes_line}\n{before_json}"
            f"{JSON_HEAD}\n{js}\n--- replay:{tail}")


def _fails_alike(text: str, kind: str) -> bool:
    try:
        r = replay(text)
    except Exception:  # (a shrunk program or schedule that is no longer valid)
        return False
    return r.failed and r.kind == kind


def shrink(text: str) -> str:
    kind = replay(text).kind
    js = text.split(JSON_HEAD + "\n", 1)[1].split("\n--- replay:", 1)[0]
    ds = json.loads(js)["directives"]
    i = len(ds) - 1
    while i >= 0:  # directives, last first (a later one may depend on an earlier one)
        cand = ds[:i] + ds[i + 1:]
        t = _with(text, directives=cand)
        if _fails_alike(t, kind):
            ds, text = cand, t
        i -= 1
    src = text.split("--- TC source:\n", 1)[1].split("\n--- sizes: ", 1)[0]
    lines = src.split("\n")
    i = len(lines) - 2
    while i >= 1:  # statements
        cand = "\n".join(lines[:i] + lines[i + 1:])
        t = _with(text, source=cand)
        if _fails_alike(t, kind):
            lines, text = cand.split("\n"), t
        i -= 1
    sizes = json.loads(re.search(r"--- sizes: (\{.*?\})", text)[1].replace("'", '"'))
    for name in list(sizes):
        for v in range(1, sizes[name]):
            t = _with(text, sizes={**sizes, name: v})
            if _fails_alike(t, kind):
                sizes[name], text = v, t
                break
    return text
