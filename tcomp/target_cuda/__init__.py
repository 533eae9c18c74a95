"""tcomp.target_cuda: see DESIGN.md (in progress)."""
