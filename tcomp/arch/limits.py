"""Device limits: what one launch may ask of a GPU, per architecture where
it differs, and the values only known when a kernel is launched.

LaunchLimits is what the launch check (lower/launch.py's `launch_problem`)
compares a grid and block against; the CUDA target fills one from the device
and the compiled function. `DeviceLimits` gathers the per-architecture
figures of the CUDA C++ Programming Guide's "Technical Specifications per
Compute Capability" table that tcomp plans with: opt-in shared memory per
block (227 KiB on sm_90), registers per thread and per block.

`LaunchValue` names a number the kernel may use that is fixed only at launch,
from the device (the SM count a persistent grid sizes itself by); the targets
bind it when they launch.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchLimits:
    """What a device accepts in one launch. The defaults are CUDA's limits on
    every GPU since compute capability 2.0. `kernel_threads` is the compiled
    kernel's own limit on threads per block (lower than the device's when the
    kernel uses many registers), when the driver reports one."""
    threads_per_block: int = 1024
    block: tuple[int, int, int] = (1024, 1024, 64)
    grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    kernel_threads: int | None = None


CUDA_LIMITS = LaunchLimits()

# The most shared memory one block may opt into, by compute capability (CUDA C++
# Programming Guide, technical specifications per compute capability): a kernel above it
# compiles but can never launch there.
SHARED_PER_BLOCK = {"sm_70": 96 * 1024, "sm_72": 96 * 1024, "sm_75": 64 * 1024,
                    "sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_87": 163 * 1024,
                    "sm_89": 99 * 1024, "sm_90": 227 * 1024, "sm_100": 227 * 1024,
                    "sm_103": 227 * 1024, "sm_120": 99 * 1024}


@dataclass(frozen=True)
class DeviceLimits:
    """Per-architecture limits (one block unless said otherwise)."""
    shared_per_block: int  # bytes a block may opt into (dynamic shared memory)
    shared_default: int = 48 * 1024  # bytes without the opt-in attribute
    registers_per_thread: int = 255
    registers_per_block: int = 64 * 1024
    registers_per_sm: int = 64 * 1024
    launch: LaunchLimits = CUDA_LIMITS


def device_limits(arch: str) -> DeviceLimits | None:
    """The limits of `arch` ("sm_90a", "sm_80"; the "a"/"f" feature suffix
    does not change them), or None for an arch not in the table (the CUDA
    target then asks the device)."""
    shared = SHARED_PER_BLOCK.get(arch.rstrip("af"))
    if shared is None:
        return None
    return DeviceLimits(shared_per_block=shared)


def shared_per_block(arch: str, default: int | None = None) -> int | None:
    """The shared memory one block of `arch` may opt into (bytes), or `default`
    for an arch not in the table."""
    limits = device_limits(arch)
    return default if limits is None else limits.shared_per_block


@dataclass(frozen=True)
class LaunchValue:
    """A value fixed when the kernel is launched, read from the device: its
    name (the size variable a kernel would take), the CUDA driver attribute it
    comes from, and what it is."""
    name: str
    attribute: str
    doc: str


SM_COUNT = LaunchValue("sm_count", "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
                       "streaming multiprocessors of the device the kernel runs on (132 on an "
                       "H100 SXM or H200): what a persistent grid launches one block per")
LAUNCH_VALUES = {v.name: v for v in (SM_COUNT,)}
