"""Ranks sharing this machine's cores: raw loopback timings explained by pinned ranks (notebook 03)."""
