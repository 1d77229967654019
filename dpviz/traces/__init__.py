"""Your job's traces: per-rank PyTorch profiler traces of a job dpviz did not run, read into
the record a live run makes (`files`), its numbers (`summary`), who waited for whom
(`stragglers`), the collectives figure (`plots`), one HTML page (`report`) and the
`load-trace` and `report` commands (`cli`, `cli_report`)."""
