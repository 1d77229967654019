"""A DDP job's lifecycle: ranks, samplers, construction broadcast, buffers, saving (notebook 08)."""
