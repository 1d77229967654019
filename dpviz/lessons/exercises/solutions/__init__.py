"""Reference answers to the exercises, written as a learner would write them.

The checkers never need these: they check against dpviz's own references (its ring
schedule, DDP's averaging, torch's bucket assignment, one process on the large batch,
plain Adam). A teacher who hands out the notebooks without solutions deletes this folder;
everything else keeps working, and `DPVIZ_SOLUTIONS=1` then says the solutions are missing.
"""
