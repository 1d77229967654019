"""The GPU check (`make gpu-check`, `scripts/gpu_check.py`): dpviz's CUDA paths run end to end on
a machine with GPUs (NCCL across them, gloo ranks sharing one, the CUDA allocator, kernel
timelines), their CPU equivalents everywhere else, so CI keeps the script working."""
