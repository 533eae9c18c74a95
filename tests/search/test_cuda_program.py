"""CudaProgram: its prepare half on the CPU (NVRTC needs no GPU), and the
whole GPU path through LocalRunner (`cuda`: a good GEMM, a wrong result, a
hang and an illegal address, each recorded, the batch going on; two GPUs)."""
from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

import tcomp
from tcomp.search import (CandidateFailed, CudaProgram, DeviceInfo, LocalRunner, MeasureInput,
                          Records, best)
from tcomp.search.identity import work_of
from tcomp.search.local_runner import gpu_count
from tests.search.fake_programs import MM, ImpostorProgram, with_impostor
from tests.search.test_sim_runner import tiled

H200 = DeviceInfo("a fake H200", "sm_90a")
BIG = {"M": 512, "N": 512, "K": 512}
GATHER = "def g(float(N) X, int32(M) I) -> (O) { O(i) = X(I(i)) }"


def test_prepare_compiles_at_the_real_and_the_check_sizes():
    op = tcomp.op(MM)
    prog = CudaProgram()
    payload = prog.prepare(MeasureInput.of(tiled(op), BIG, "cuda"), H200)
    op2, sizes, small, timed, checked, arrays, want = payload
    assert sizes == BIG and small != BIG and work_of(op, small) <= 1 << 22
    assert timed[0]["arch"] == checked[0]["arch"] == "sm_90a"
    assert timed[0]["bound_sizes"] == BIG and checked[0]["bound_sizes"] == small
    assert isinstance(timed[1], bytes) and timed[1] != checked[1]
    assert [a.shape for a in arrays] == [(small["M"], small["K"]), (small["K"], small["N"])]
    np.testing.assert_allclose(want[0], arrays[0].astype(np.float64) @ arrays[1], rtol=1e-5,
                               atol=1e-5)
    # the payload and the program travel to worker processes
    pickle.loads(pickle.dumps(payload))
    assert pickle.loads(pickle.dumps(prog)).repeats == 20
    # an explicit architecture in the target wins over the device's
    cand = MeasureInput.of(tiled(op), {"M": 8, "N": 8, "K": 8}, "cuda:sm_80")
    assert prog.prepare(cand, H200)[3][0]["arch"] == "sm_80"


def test_prepare_failures_by_stage(monkeypatch):
    op = tcomp.op(MM)
    prog = CudaProgram()
    with pytest.raises(CandidateFailed) as e:
        prog.prepare(MeasureInput(op, BIG, '{"tcomp_schedule": 1, "directives": [{}]}'), H200)
    assert e.value.kind == "schedule"
    bad = tcomp.Schedule(op)
    bad["C"].bind(bad["C"].axes[0], "threadIdx.x")  # 512 x 512 threads
    bad["C"].bind(bad["C"].axes[1], "threadIdx.y")
    with pytest.raises(CandidateFailed) as e:
        prog.prepare(MeasureInput.of(bad, BIG), H200)
    assert e.value.kind == "lowering" and e.value.message.startswith("LoweringError: ")
    from tcomp.target_cuda import kernel

    def nvrtc_fails(*a, **k):
        raise tcomp.CudaError("NVRTC failed to compile 'matmul': error: expected a ';'")
    monkeypatch.setattr(kernel.CudaKernel, "from_program", nvrtc_fails)
    with pytest.raises(CandidateFailed) as e:
        prog.prepare(MeasureInput.of(tiled(op), BIG), H200)
    assert (e.value.kind, e.value.message) == (
        "compile", "CudaError: NVRTC failed to compile 'matmul': error: expected a ';'")


def test_impostors_compile():
    """The GPU fault tests' impostor kernels build here (so those tests fail only on the GPU)."""
    op, g = tcomp.op(MM), tcomp.op(GATHER)
    prog = ImpostorProgram()
    real = prog.prepare(MeasureInput(op, BIG, tiled(op).to_json()), H200)
    for name in ("wrong", "hang"):
        fake = prog.prepare(MeasureInput(op, BIG, with_impostor(tiled(op).to_json(), name)),
                            H200)
        assert fake[3][1] != real[3][1] and fake[4][1] != real[4][1]  # other cubins
        # the same check data and oracle outputs: only the kernels are swapped
        assert all(np.array_equal(a, b) for a, b in zip(fake[5] + fake[6], real[5] + real[6]))
    gather = tcomp.Schedule(g).to_json()
    real = prog.prepare(MeasureInput(g, {"N": 64, "M": 32}, gather), H200)
    fake = prog.prepare(MeasureInput(g, {"N": 64, "M": 32}, with_impostor(gather, "fault")),
                        H200)
    assert fake[3][1] != real[3][1] and fake[3][0]["op"] == real[3][0]["op"] == "g"


# ------------------------------------------------------------------ on the GPU
@pytest.mark.cuda
def test_a_good_gemm_is_checked_timed_and_recorded(tmp_path):
    op = tcomp.op(MM)
    cands = [MeasureInput.of(tiled(op, 8), BIG), MeasureInput.of(tiled(op, 16), BIG)]
    with LocalRunner(devices=[0], prepare_workers=2) as r:
        res = r.run(cands)
    for x in res:
        assert x.ok, x.message
        assert 3 <= len(x.times_ms) <= 20 and all(t > 0 for t in x.times_ms)
        assert x.device and x.build_s > 0
    # a 512^3 GEMM with 8x8 tiles: well under a second, well over a microsecond
    assert 1e-3 < res[0].median_ms < 1000
    recs = Records(tmp_path / "r.jsonl")
    for c, x in zip(cands, res):
        recs.add(c, x)
    fastest = min(range(2), key=lambda i: res[i].median_ms)
    assert best(tmp_path / "r.jsonl", op, BIG, device=res[0].device).to_json() == \
        cands[fastest].schedule


@pytest.mark.cuda
def test_gpu_faults_are_recorded_and_the_batch_goes_on():
    op, g = tcomp.op(MM), tcomp.op(GATHER)
    good = tiled(op).to_json()
    gather = tcomp.Schedule(g).to_json()
    gsizes = {"N": 64, "M": 32}
    batch = [MeasureInput(op, BIG, good),
             MeasureInput(op, BIG, with_impostor(good, "wrong")),
             MeasureInput(op, BIG, with_impostor(good, "hang")),
             MeasureInput(op, BIG, good),
             MeasureInput(g, gsizes, with_impostor(gather, "fault")),
             MeasureInput(g, gsizes, gather)]
    with LocalRunner(devices=[0], program=ImpostorProgram(), prepare_workers=2,
                     timeout_s=15) as r:
        res = r.run(batch)
    assert [x.error for x in res] == [None, "wrong_result", "timeout", None, "runtime", None], \
        [x.message for x in res]
    assert res[1].message.startswith("output 'C': ")
    assert "timeout_s=15 s (a hang?)" in res[2].message
    # The kernel's own fault, whichever the driver names for a read that far out
    # (the H200 said INVALID_ADDRESS_SPACE: the address fell in a shared window),
    # not an error of a call made after it on the broken context.
    assert re.search(r"CUDA_ERROR_(ILLEGAL_ADDRESS|INVALID_ADDRESS_SPACE)", res[4].message), \
        res[4].message
    assert res[5].ok and res[3].ok  # on fresh workers after the hang and the fault


@pytest.mark.cuda
def test_two_gpus():
    if gpu_count() < 2:
        pytest.skip("needs two GPUs")
    op = tcomp.op(MM)
    batch = [MeasureInput.of(tiled(op, t), BIG) for t in (4, 8, 16, 4, 8, 16)]
    with LocalRunner(devices=[0, 1], prepare_workers=4) as r:
        res = r.run(batch)
        assert all(w.info is not None for w in r.devices)
        assert r.devices[0].info == r.devices[1].info
    assert all(x.ok for x in res), [x.message for x in res]
    # the same candidate on either GPU: times of one kind of GPU, within 3x of each other
    for a, b in ((0, 3), (1, 4), (2, 5)):
        assert res[a].median_ms < 3 * res[b].median_ms and res[b].median_ms < 3 * res[a].median_ms
