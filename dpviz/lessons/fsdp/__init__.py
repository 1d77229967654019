"""ZeRO-3 / FSDP in time: one FSDP2 step recorded live, unit by unit, on every rank.

Each unit's all-gathers (forward and backward) cross an emulated link, its parameters
materialise, compute and are freed, its gradients are reduce-scattered; the bytes of gathered
parameters alive are read from the storage FSDP allocates and frees. `live` runs the ranks
(torch), `records` holds the record and the model of the peak (no torch), `plots` and
`widgets` draw it, `cli` is `dpviz fsdp`; the scene is `animations/fsdp.py`.
"""
