"""The checks of one tuning-records line (records.py): the format versions
and their fields, and what each field must hold, so that a line that passes
replays (a problem is named, never a raw exception)."""
from __future__ import annotations

import json
import math
import statistics

from .runner import ERROR_KINDS

FORMAT = 2  # what this tcomp writes
FIELDS = ("tcomp_record", "op_hash", "op", "sizes", "target", "device", "schedule", "plan",
          "times_ms", "median_ms", "error", "message", "build_s", "predicted_ms", "search",
          "time", "tcomp_version")
MAX_DEPTH = 32  # JSON nesting of a line; deeper is refused (RecursionError otherwise)
VERSIONS = {1: tuple(f for f in FIELDS if f not in ("plan", "search")), 2: FIELDS}


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _validate(d) -> str | None:
    """None for a valid record object, else what is wrong with it."""
    if not isinstance(d, dict):
        return f"not a tcomp record (a JSON {type(d).__name__}, expected an object)"
    if "tcomp_record" not in d:
        return "not a tcomp record (no \"tcomp_record\" format field)"
    v = d["tcomp_record"]
    if isinstance(v, bool) or not isinstance(v, int) or v not in VERSIONS:
        known = " and ".join(str(k) for k in sorted(VERSIONS))
        newer = " (written by a newer tcomp? upgrade tcomp to read it)" if isinstance(
            v, int) and not isinstance(v, bool) and v > FORMAT else ""
        return f"record format version {v!r} is not supported; this tcomp reads versions " \
               f"{known}{newer}"
    fields = VERSIONS[v]
    missing = [f for f in fields if f not in d]
    if missing:
        return f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    extra = [f for f in d if f not in fields]
    if extra:
        return f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)}"
    for f in ("op_hash", "op", "target", "device", "message", "time", "tcomp_version"):
        if not isinstance(d[f], str):
            return f"field \"{f}\" must be a string, got {json.dumps(d[f])}"
    sizes = d["sizes"]
    if not isinstance(sizes, dict) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in sizes.values()):
        return f"field \"sizes\" must map size names to positive ints, got {json.dumps(sizes)}"
    s = d["schedule"]
    if not isinstance(s, dict) or "tcomp_schedule" not in s or not isinstance(
            s.get("directives"), list):
        return "field \"schedule\" must be a schedule object from Schedule.to_json()"
    if "plan" in d and d["plan"] is not None:
        problem = _plan_problem(d["plan"])
        if problem is not None:
            return f"field \"plan\" {problem}"
    if d.get("search") is not None:
        problem = _search_problem(d["search"])
        if problem is not None:
            return f"field \"search\" {problem}"
    if d["error"] is not None and d["error"] not in ERROR_KINDS:
        return f"field \"error\" must be null or one of {', '.join(ERROR_KINDS)}, got " \
               f"{json.dumps(d['error'])}"
    t = d["times_ms"]
    if t is not None:
        if not isinstance(t, list) or not t or not all(_is_num(x) and x >= 0 for x in t):
            return f"field \"times_ms\" must be null or a non-empty list of times, got " \
                   f"{json.dumps(t)}"
        if d["error"] is not None:
            return f"a failed record (error \"{d['error']}\") has times"
        if d["median_ms"] != statistics.median(t):
            return (f"field \"median_ms\" ({d['median_ms']}) is not the median of \"times_ms\" "
                    f"({statistics.median(t)})")
    elif d["median_ms"] is not None:
        return "field \"median_ms\" is set but \"times_ms\" is null"
    for f in ("build_s", "predicted_ms"):
        if not (_is_num(d[f]) or (f == "predicted_ms" and d[f] is None)):
            return f"field \"{f}\" must be a number, got {json.dumps(d[f])}"
    return None


def _plan_problem(p) -> str | None:
    """None for a plan object of the space's shape, else what is wrong."""
    shape = ("must be null or a plan object {\"inline\": [stage, ...], \"stages\": "
             "{stage: {\"rule\": name, parameter: value, ...}}}")
    if not isinstance(p, dict) or set(p) != {"inline", "stages"}:
        return shape
    if not isinstance(p["inline"], list) or not all(isinstance(x, str) for x in p["inline"]):
        return f"{shape}; \"inline\" is {json.dumps(p['inline'])}"
    if not isinstance(p["stages"], dict):
        return f"{shape}; \"stages\" is {json.dumps(p['stages'])}"
    for st, params in p["stages"].items():
        if not isinstance(params, dict) or not isinstance(params.get("rule"), str):
            return f"{shape}; stage \"{st}\" has {json.dumps(params)}"
    return None


SEARCH_KEYS = ("run", "round", "rank", "pool", "elapsed_s")


def _search_problem(x) -> str | None:
    """None for a search object (see the module docstring), else what is wrong."""
    shape = ("must be null or {\"run\": text, \"round\": int >= 1, \"rank\": int >= 0, "
             "\"pool\": int > rank, \"elapsed_s\": seconds >= 0}")
    if not isinstance(x, dict) or set(x) != set(SEARCH_KEYS):
        return f"{shape}, got {json.dumps(x)}"
    ints = [x[k] for k in ("round", "rank", "pool")]
    if not isinstance(x["run"], str) or any(isinstance(v, bool) or not isinstance(v, int)
                                            for v in ints) \
            or x["round"] < 1 or x["rank"] < 0 or x["pool"] <= x["rank"] \
            or not (_is_num(x["elapsed_s"]) and x["elapsed_s"] >= 0):
        return f"{shape}, got {json.dumps(x)}"
    return None


def _deeper_than(x, limit: int) -> bool:
    """Whether the JSON value x nests more than `limit` levels (walked without
    recursion)."""
    todo = [(x, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, (dict, list)):
            if depth > limit:
                return True
            todo.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    return False
