"""Run store, trajectory readers, and reports (loops today; aggregation and comparison next)."""
