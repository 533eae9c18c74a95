"""Every example in the user's documentation runs, and every output it shows
is what tcomp prints today (docs/README.md, "How the examples are checked").

Pages: docs/**/*.md, tutorials/*.md and the repository's README.md. In each
page, in order, in one namespace and one fresh working folder (with
`tutorials/` reachable, as from the repository root):

  ```python          runs.
  ```python no-run   is only compiled: for the few lines that need a GPU.
  ```sh              each `tcomp ...` command (also inside `a && b` chains)
                     runs through the command line; other commands (pip,
                     pytest) are left to the reader. `sh no-run` runs nothing.
  ```text output     directly after a python or sh block: what that block
                     prints (stdout, and stderr for sh), compared line by line
                     (trailing spaces ignored); `...` matches any text,
                     across lines. A command may fail (exit status != 0)
                     only when such a block shows its error.

Other fences (```text, ```tc, ```json) are prose. After a change that is
meant to change the output, rewrite the output blocks with
`python3 -m pytest tests/test_docs.py --update-golden` and read the diff.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass
class Block:
    info: str  # the fence's info string: "python", "python no-run", "text output", ...
    code: str
    start: int  # offsets of the code in the page's text
    end: int
    line: int  # 1-based line of the fence

    @property
    def lang(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def flags(self) -> set[str]:
        return set(self.info.split()[1:])


def blocks(text: str) -> list[Block]:
    return [Block(m.group(1).strip(), m.group(2), m.start(2), m.end(2),
                  text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def pages() -> list[str]:
    out = []
    for folder, _, files in os.walk(os.path.join(ROOT, "docs")):
        out += [os.path.join(folder, f) for f in files if f.endswith(".md")]
    tut = os.path.join(ROOT, "tutorials")
    out += [os.path.join(tut, f) for f in os.listdir(tut) if f.endswith(".md")]
    out.append(os.path.join(ROOT, "README.md"))
    return sorted(os.path.relpath(p, ROOT) for p in out)


def matches(expected: str, got: str) -> bool:
    norm = lambda s: "\n".join(line.rstrip() for line in s.strip("\n").split("\n"))  # noqa: E731
    pattern = ".*".join(re.escape(part) for part in norm(expected).split("..."))
    return re.fullmatch(pattern, norm(got), re.S) is not None


def tcomp_commands(code: str) -> list[str]:
    """The `tcomp ...` commands of an sh block, `\\` continuations joined."""
    out = []
    for line in code.replace("\\\n", " ").split("\n"):
        line = line.split(" #", 1)[0].strip()
        if line.startswith("#"):
            continue
        out += [part.strip() for part in line.split("&&") if part.strip().startswith("tcomp ")]
    return out


def run_sh(code: str) -> tuple[int, str]:
    from tcomp.cli import main
    text, rc = io.StringIO(), 0
    for cmd in tcomp_commands(code):
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            try:
                rc = main(shlex.split(cmd)[1:])
            except SystemExit as e:  # --help, --version, usage errors
                rc = e.code if isinstance(e.code, int) else 1
        if rc:
            break
    return rc, text.getvalue()


def run_python(code: str, namespace: dict, where: str) -> str:
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        exec(compile(code, where, "exec"), namespace)
    return text.getvalue()


@pytest.mark.parametrize("page", pages())
def test_page(page, tmp_path, monkeypatch, request):
    update = request.config.getoption("--update-golden", default=False)
    path = os.path.join(ROOT, page)
    text = open(path, encoding="utf-8").read()
    monkeypatch.chdir(tmp_path)
    os.symlink(os.path.join(ROOT, "tutorials"), tmp_path / "tutorials")
    namespace = {"__name__": "__docs__"}
    last = None  # (block, its output, its exit status) of the last block that ran
    rewrites = []
    for b in blocks(text):
        where = f"{page}:{b.line}"
        if b.lang == "text" and "output" in b.flags:
            assert last is not None, f"{where}: an output block must follow a python or sh block"
            prev, got, rc = last
            if update and not matches(b.code, got):
                rewrites.append((b, got))
            else:
                assert matches(b.code, got), (
                    f"{where}: the output of the block at line {prev.line} differs from the page "
                    f"(rerun with --update-golden if the change is intended)\n--- page\n{b.code}"
                    f"--- got\n{got}")
            last = None
            continue
        if last is not None and last[2]:
            pytest.fail(f"{page}:{last[0].line}: a command failed (exit status {last[2]}) and no "
                        f"output block shows its error:\n{last[1]}")
        last = None
        if b.lang == "python" and "no-run" in b.flags:
            compile(b.code, where, "exec")  # still valid Python
        elif b.lang == "python":
            last = (b, run_python(b.code, namespace, where), 0)
        elif b.lang == "sh" and "no-run" not in b.flags:
            if page.startswith("docs") and not tcomp_commands(b.code):
                pytest.fail(f"{where}: an sh block with no tcomp command (mark it `sh no-run`)")
            rc, out = run_sh(b.code)
            last = (b, out, rc)
    if last is not None and last[2]:
        pytest.fail(f"{page}:{last[0].line}: a command failed (exit status {last[2]}):\n{last[1]}")
    if rewrites:
        for b, got in sorted(rewrites, key=lambda r: -r[0].start):
            text = text[:b.start] + got.rstrip("\n") + "\n" + text[b.end:]
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def test_no_run_blocks_are_rare():
    """`python no-run` is for lines that need a GPU; the rest of each page runs."""
    for page in pages():
        bs = blocks(open(os.path.join(ROOT, page), encoding="utf-8").read())
        skipped = [b for b in bs if b.lang == "python" and "no-run" in b.flags]
        ran = [b for b in bs if b.lang == "python" and "no-run" not in b.flags]
        assert len(skipped) <= max(2, len(ran) // 4), (page, len(skipped), len(ran))


# ------------------------------------------------------------------ the harness itself
def test_matches_with_ellipsis():
    assert matches("a ... ms\nb\n", "a 1.5 ms  \nb")
    assert matches("x\n...\nz", "x\ny1\ny2\nz")
    assert not matches("a\nb", "a\nc")
    assert not matches("a", "a\nb")


def test_tcomp_commands_of_an_sh_block():
    code = ("python3 -m pip install -e . && tcomp compile a.tc -o x.cubin && tcomp run a.tc\n"
            "# a comment\ntcomp run b.tc \\\n  --sizes N=3   # trailing comment\npytest -q\n")
    assert tcomp_commands(code) == ["tcomp compile a.tc -o x.cubin", "tcomp run a.tc",
                                    "tcomp run b.tc    --sizes N=3"]


def test_blocks_are_found_with_their_info_strings():
    page = "x\n```python\nprint(1)\n```\n\n```text output\n1\n```\n```python no-run\nk(A)\n```\n"
    assert [(b.lang, sorted(b.flags), b.code, b.line) for b in blocks(page)] == [
        ("python", [], "print(1)\n", 2), ("text", ["output"], "1\n", 6),
        ("python", ["no-run"], "k(A)\n", 9)]
