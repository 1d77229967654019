"""What if: one recorded DDP step predicted on another cluster (world size, link, bucket cap,
accumulation), and the prediction checked against live runs on an emulated link.

`learn.py` reads what a step is made of from a live record or a loaded trace (no torch),
`records.py` holds the model, its records and the scaling table (no torch), `load.py` gloo's
measured rates under load (no torch), `live.py` runs the live check and that measurement on ranks, `plots.py` and `widgets.py` draw, `cli.py` is `dpviz predict`.
"""
