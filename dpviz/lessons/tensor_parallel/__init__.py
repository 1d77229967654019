"""Tensor and sequence parallelism: a Megatron MLP split across ranks (notebook 13)."""
