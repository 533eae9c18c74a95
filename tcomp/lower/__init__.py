"""tcomp.lower: see DESIGN.md (in progress)."""
