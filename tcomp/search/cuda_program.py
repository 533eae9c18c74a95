"""`CudaProgram`: the DeviceProgram of the GPU runners.

prepare (CPU, no GPU needed): replay the schedule; lower it at the real
sizes and compile it with NVRTC for the device's architecture; when the real
sizes are larger than the check's budget (identity.small_sizes, default
2**22 iterations), lower and compile it again at the small check sizes;
make the check's random inputs and the oracle's outputs there.

run (the GPU): load the check kernel and run it on the check inputs (NumPy
in, NumPy out: tcomp's ordinary call), compare with the oracle; then time the
real kernel at the real sizes on random device inputs (made once per op and
sizes in each worker): `warmup` untimed runs, then up to `repeats` timed
ones (at least 3; fewer when they take more than `max_run_s` together), each
after a write of a buffer twice the L2 cache's size (so no run finds its
inputs in L2), between two CUDA events on the default stream. A timed run is
what a call does on the GPU: zero-fill the outputs that need it, launch every
kernel. The times are the events' milliseconds.

Any CUDA error while running makes the worker's context suspect (an illegal
address leaves it unusable): `poisoned` asks the runner to restart it.
"""
from __future__ import annotations

import numpy as np

from ..build import lower
from ..schedule import Schedule
from .identity import op_hash, small_sizes
from .oracle import random_inputs, seed_of
from .runner import DeviceInfo, DeviceProgram, MeasureInput, stage
from .sim_runner import Cases, check

CUDA_BUDGET = 1 << 22


class CudaProgram(DeviceProgram):
    def __init__(self, repeats: int = 20, warmup: int = 2, max_run_s: float = 1.0,
                 budget: int = CUDA_BUDGET, inputs=None):
        self.repeats, self.warmup, self.max_run_s = int(repeats), int(warmup), float(max_run_s)
        self.budget = budget
        self.cases = Cases(inputs)
        self._bench = None  # the worker's Bench, made at setup

    def __getstate__(self):
        return dict(self.__dict__, _bench=None)

    def setup(self) -> DeviceInfo:
        from ..target_cuda import cuda_api
        dev = cuda_api.ensure_context()
        self._bench = Bench(self.cases.inputs)
        return DeviceInfo(dev.name, dev.arch)

    def prepare(self, inp: MeasureInput, device: DeviceInfo):
        target = f"cuda:{device.arch}" if inp.target == "cuda" else inp.target
        sched = stage("schedule", Schedule.from_json, inp.op, inp.schedule)
        timed = self._compile(sched, inp.sizes, target)
        small = small_sizes(inp.op, inp.sizes, self.budget)
        checked = timed if small == inp.sizes else self._compile(sched, small, target)
        arrays, want = self.cases.get(inp.op, small)
        return inp.op, inp.sizes, small, timed, checked, arrays, want

    @staticmethod
    def _compile(sched, sizes: dict, target: str) -> tuple[dict, bytes]:
        from ..target_cuda.kernel import CudaKernel
        prog = stage("lowering", lower, sched, sizes)
        k = stage("compile", CudaKernel.from_program, prog, target)
        return k.meta, k.cubin

    def run(self, payload) -> tuple[float, ...]:
        from ..target_cuda.kernel import CudaKernel
        op, sizes, small, timed, checked, arrays, want = payload
        k = CudaKernel(*checked)
        try:
            got = stage("runtime", k, *arrays)
        finally:
            unload(k)
        check(op, got, want, small)
        k = CudaKernel(*timed)
        try:
            return stage("runtime", self._bench.time, k, op, sizes, self.warmup, self.repeats,
                         self.max_run_s)
        finally:
            unload(k)

    def poisoned(self, kind: str) -> bool:
        return kind == "runtime"


def unload(k) -> None:
    for v in k._variants.values():
        if v.module is not None:
            try:
                v.module.unload()
            except Exception:  # a context an error left unusable: the worker restarts
                pass


class Bench:
    """A GPU worker's timing state: the L2 flush buffer, two events, and the
    random device inputs of the op and sizes it times now."""

    def __init__(self, inputs=None):
        from ..target_cuda import cuda_api
        self.api = cuda_api
        self.inputs = inputs
        self.flush_words = 2 * cuda_api.l2_cache_bytes() // 4
        self.flush = cuda_api.mem_alloc(self.flush_words * 4)
        self.start, self.stop = cuda_api.event_create(), cuda_api.event_create()
        self.key, self.host, self.device = None, [], []

    def _inputs(self, op, sizes: dict):
        key = (op_hash(op), tuple(sizes.items()))
        if key != self.key:
            for p in self.device:
                self.api.mem_free(p)
            self.key, self.host, self.device = None, [], []
            rng = np.random.default_rng(seed_of(op, sizes))
            host = [np.ascontiguousarray(a) for a in (self.inputs or random_inputs)(op, sizes,
                                                                                     rng)]
            for a in host:
                p = self.api.mem_alloc(a.nbytes)
                self.device.append(p)
                self.api.memcpy_htod(p, a.ctypes.data, a.nbytes)
            self.api.synchronize()
            self.key, self.host = key, host
        return self.host, self.device

    def time(self, k, op, sizes: dict, warmup: int, repeats: int, max_run_s: float):
        api = self.api
        host, ptrs = self._inputs(op, sizes)
        _, bound_sizes = k._check(host)  # the shared call checks, on the host copies
        bound = k._bind(bound_sizes, tuple(bound_sizes.items()))
        made = []  # (pointer, bytes, zero-filled by a call)
        try:
            for (dt, zero, _), shape in zip(k._made, bound.shapes):
                n = int(np.prod(shape, dtype=np.int64)) * dt.numpy.itemsize
                made.append((api.mem_alloc(n), n, zero))
            args = list(ptrs) + [p for p, _, _ in made]

            def call():
                for p, n, zero in made:
                    if zero:
                        api.memset_zero(p, n)
                bound.run(args, 0)
            for _ in range(warmup):
                call()
            api.synchronize()
            times = []
            while len(times) < max(repeats, 1):
                api.memset_d32(self.flush, len(times), self.flush_words)
                api.event_record(self.start)
                call()
                api.event_record(self.stop)
                api.event_synchronize(self.stop)
                times.append(api.event_elapsed_ms(self.start, self.stop))
                if len(times) >= 3 and sum(times) > 1000 * max_run_s:
                    break
            return tuple(times)
        finally:
            for p, _, _ in made:
                try:
                    api.mem_free(p)
                except Exception:  # a context an error left unusable: the worker restarts
                    pass
