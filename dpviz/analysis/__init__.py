"""One home for traces: reading profiler trace files (`trace_files`), scanning their events
into spans (`scan`), how Holistic Trace Analysis reads the same events (`hta`), overlap and
exposed communication (`overlap`), recomputed forwards (`recompute`), who waited for whom
(`stragglers`) and a job's numbers (`summary`). Torch-free; imports the core only."""
