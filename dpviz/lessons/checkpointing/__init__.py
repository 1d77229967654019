"""Activation checkpointing: memory through forward and backward, recomputed forwards (notebook 05)."""
