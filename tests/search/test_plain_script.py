"""Tuning from a plain script (issue 26 item 6): LocalRunner's workers start
from tcomp's own entry point (`python -m tcomp.search.worker_main`), so a
script without `if __name__ == "__main__":` works and its top level runs
once. Only a program defined in the script itself needs the guard, and
without it the error says so (and no worker starts workers)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

PLAIN = """
import os, sys
import tcomp
from tcomp.search import LocalRunner, SimProgram

with open(sys.argv[1], "a") as f:          # one line per run of this top level
    f.write(f"{os.getpid()}\\n")
mm = tcomp.op("def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
runner = LocalRunner(devices=[0], program=SimProgram(), prepare_workers=1)
res = tcomp.tune(mm, {"M": 16, "N": 16, "K": 16}, trials=2, batch=2, target="sim",
                 runner=runner, records=sys.argv[2])
runner.close()
print("tuned", res.stopped, len(res.history), [t.error for t in res.history])
print("best", tcomp.search.best(sys.argv[2], mm, {"M": 16, "N": 16, "K": 16}) is not None)
"""

OWN_PROGRAM = """
import sys
import tcomp
from tcomp.search import LocalRunner, MeasureInput
from tests.search.fake_programs import MM, FakeProgram, fake_schedule

class Mine(FakeProgram):                   # defined in the script: workers must run it to find it
    pass

def measure():
    with LocalRunner(devices=[0], program=Mine(), prepare_workers=1) as r:
        res = r.run([MeasureInput(tcomp.op(MM), {"M": 2, "N": 2, "K": 2}, fake_schedule("ok"),
                                  "sim")])
    print("measured", [x.error for x in res])

GUARD
"""


def run_script(tmp_path, text, *args):
    script = tmp_path / "script.py"
    script.write_text(text)
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT))


def test_a_script_without_a_main_guard_tunes_and_runs_its_top_level_once(tmp_path):
    runs, records = tmp_path / "runs.txt", tmp_path / "mm.jsonl"
    proc = run_script(tmp_path, PLAIN, runs, records)
    assert proc.returncode == 0, proc.stderr
    assert "tuned trials 2 [None, None]" in proc.stdout
    assert "best True" in proc.stdout
    assert len(runs.read_text().split()) == 1  # the workers never ran the script


def test_a_program_defined_in_the_script_works_under_the_guard(tmp_path):
    guarded = OWN_PROGRAM.replace("GUARD", 'if __name__ == "__main__":\n    measure()')
    proc = run_script(tmp_path, guarded)
    assert proc.returncode == 0, proc.stderr
    assert "measured [None]" in proc.stdout


def test_a_program_defined_in_the_script_without_the_guard_is_an_error(tmp_path):
    proc = run_script(tmp_path, OWN_PROGRAM.replace("GUARD", "measure()"))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    which = "GPU 0" if "for GPU 0" in last else "prepare"  # whichever worker reports first
    assert last == (f"tcomp.errors.TcompError: LocalRunner: the worker for {which} could not "
                    "start: cannot load the program (TcompError: LocalRunner: a worker process, "
                    "running the script's top level to find the program defined there, reached "
                    "code that starts workers: make the LocalRunner (or call tcomp.tune) under "
                    "`if __name__ == \"__main__\":`, or move the program into a module)"), \
        proc.stderr
