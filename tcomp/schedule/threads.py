"""The GPU thread axes (ThreadAxis, the spellings a schedule binds): they
live in the machine model, tcomp/arch/threads.py; this module re-exports
them so that existing imports keep working until they switch to tcomp.arch."""
from __future__ import annotations

from ..arch.threads import (AXES, BLOCK, DIMS, INDEX_VARS, LEVELS, TAGS, THREAD, ThreadAxis,
                            axis, is_block, is_thread, parse)

__all__ = ["AXES", "BLOCK", "DIMS", "INDEX_VARS", "LEVELS", "TAGS", "THREAD", "ThreadAxis", "axis",
           "is_block", "is_thread", "parse"]
