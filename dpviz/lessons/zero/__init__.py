"""ZeRO and FSDP: sharded optimizer state, gradients and parameters (notebook 09)."""
