"""tcomp.search: schedule search (not implemented yet; see docs/README.md)."""
