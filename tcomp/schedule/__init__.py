"""tcomp.schedule: see DESIGN.md (in progress)."""
