"""tcomp.search: see DESIGN.md (in progress)."""
