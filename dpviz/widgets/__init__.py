"""ipywidgets panels: a slider that steps through a record, or re-runs live and redraws."""
from .slider import rerun, stepper

__all__ = ["rerun", "stepper"]
