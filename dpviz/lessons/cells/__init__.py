"""Cells on ranks: the `%%ranks` IPython magic runs a notebook cell on every warm rank at once
and draws what it did (`%load_ext dpviz`, then `%ranks 2` and `%%ranks` cells).

`live.py` runs cells on the ranks (torch), `records.py` is the record of one cell's run and its
errors (no torch), `plots.py` draws that record on the shared timeline, `magic.py` is the magic.
"""
