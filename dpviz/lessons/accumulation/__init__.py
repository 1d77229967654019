"""Gradient accumulation: `no_sync()` micro-steps, one all-reduce per step (notebook 04)."""
