"""The subjects, one package each, in the notebooks' order: rank code (`live.py`), records
(`records.py`), figures (`plots.py`), sliders (`widgets.py`) and, where a notebook has one, the
exercise (`exercise.py`). A lesson imports the engine, the analysis, the core and the shared
drawing; `exercises` holds what the five exercises share."""
