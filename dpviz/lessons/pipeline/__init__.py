"""Pipeline parallelism: GPipe and 1F1B on live stages (notebook 14)."""
