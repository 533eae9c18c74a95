"""The SASS and resource usage of a cubin through cuobjdump (on the GPU
machine's PATH), for the bench scripts' SASS counts."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile


def dump(cubin: bytes) -> tuple[str, str] | None:
    """(resource usage text, SASS text) of `cubin`; None without cuobjdump."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True,
                             text=True).stdout
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
    return res, sass


def resources(res: str) -> dict:
    """Registers, shared and local bytes from the resource usage text."""
    m = re.search(r"REG:(\d+).*?SHARED:(\d+).*?LOCAL:(\d+)", res)
    return dict(regs=int(m.group(1)), smem=int(m.group(2)), local=int(m.group(3))) if m else {}
