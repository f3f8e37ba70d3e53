"""Layer-level localisation: find the op where an export starts to diverge (issue 8)."""
