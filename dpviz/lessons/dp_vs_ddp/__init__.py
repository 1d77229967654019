"""Single-process DataParallel, a parameter server and DDP side by side (notebook 08)."""
