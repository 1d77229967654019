"""ipywidgets panels: a slider that steps through a record, or re-runs live and redraws."""
from dpviz.widgets.slider import rerun, stepper

__all__ = ["rerun", "stepper"]
