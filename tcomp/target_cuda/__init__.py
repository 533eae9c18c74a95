"""tcomp.target_cuda: CUDA C++ codegen, NVRTC, the driver runtime, export/load (docs/targets.md)."""
