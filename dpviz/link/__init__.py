"""The emulated link: a wire of set bandwidth and latency that all-reduces cross (sized to this machine)."""
