"""Example pipelines, runnable end to end on the embedded stack (`rafka demo` runs them)."""
