"""Gradient averaging: the worked example, uneven shards, parameter vs gradient averaging (notebook 07)."""
