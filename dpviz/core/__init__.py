"""The torch-free core every layer stands on: records and their JSON (`record`), run
configuration (`config`), float rounding bounds (`rounding`), the source-reading registries
(`discover`), the emulated link's arithmetic (`link`), DDP's bucket layout (`bucket_layout`) and
the workloads' descriptions (`workloads`). Nothing here imports torch or a higher layer."""
