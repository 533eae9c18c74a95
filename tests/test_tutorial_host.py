"""The C host program of tutorials/07-export.md: its page's Python blocks
export the kernel and write the header and data files, then the page's one
```c block is compiled with the system C compiler (`cc`, C99, every warning
an error), linked and run. The program loads the CUDA driver at run time
(dlopen), so it builds without the CUDA toolkit; where no driver answers it
says so and exits 0, on a GPU it runs the kernel and compares it with the
sim's result. Without a C compiler the test is skipped, saying why."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.test_docs import ROOT, blocks, run_python

PAGE = os.path.join("tutorials", "07-export.md")
NO_DRIVER = ("no CUDA driver here", "no CUDA device here")


def host_program(tmp_path, monkeypatch) -> str:
    """Run the page's Python blocks in `tmp_path`, write its C block to
    out/host.c, compile and link it; returns the executable's path."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip(f"no C compiler (cc) on this machine: the host program of {PAGE} is not "
                    f"compiled here (install a C compiler, e.g. gcc, to check it)")
    text = open(os.path.join(ROOT, PAGE), encoding="utf-8").read()
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    code = [b for b in blocks(text) if b.lang == "c"]
    assert len(code) == 1, f"{PAGE} should hold one ```c block, has {len(code)}"
    for b in blocks(text):
        if b.lang == "python" and "no-run" not in b.flags:
            run_python(b.code, namespace, f"{PAGE}:{b.line}")
    (tmp_path / "out" / "host.c").write_text(code[0].code)
    exe = str(tmp_path / "out" / "host")
    done = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-o", exe,
                           "out/host.c", "-ldl", "-lm"], capture_output=True, text=True)
    assert done.returncode == 0, f"cc failed on the C block of {PAGE}:\n{done.stderr}"
    return exe


def test_the_host_program_compiles_and_runs_or_says_there_is_no_driver(tmp_path, monkeypatch):
    exe = host_program(tmp_path, monkeypatch)
    run = subprocess.run([exe, "out"], capture_output=True, text=True, timeout=120)
    out = run.stdout.strip()
    assert run.returncode == 0, (run.returncode, out, run.stderr)
    assert out.startswith(NO_DRIVER) and out.endswith(": not run") or (
        out.startswith("mm_C: max difference from the sim's result") and out.endswith(": ok")), out


@pytest.mark.cuda
def test_the_host_program_runs_the_exported_kernel_on_the_gpu(tmp_path, monkeypatch):
    exe = host_program(tmp_path, monkeypatch)
    run = subprocess.run([exe, "out"], capture_output=True, text=True, timeout=120)
    out = run.stdout.strip()
    assert run.returncode == 0 and out.endswith(": ok"), (run.returncode, out, run.stderr)
