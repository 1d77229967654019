"""Matplotlib figures drawn from records. Each is `plot_x(record, ax=None) -> Axes`."""
