"""Mixture-of-experts expert parallelism with all_to_all (notebook 14)."""
