"""DDP's gradient buckets and their all-reduces overlapping backward (notebook 03)."""
