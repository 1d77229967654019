"""Ranks and torch: the only spawner (`launch`), rank stderr, the torch gate (every private
torch call, each with its fallback), the DDP step as taught (`ddp_run`), what makes a re-run
fast (`warm_ranks`), the profiler and assembly into records, the emulated link's thread and
its sizing, and the built-in workloads. Imports the core and the analysis, never a lesson."""
