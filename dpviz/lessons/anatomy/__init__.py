"""A training step's anatomy: per-layer forward/backward time, B and W work (notebook 06)."""
