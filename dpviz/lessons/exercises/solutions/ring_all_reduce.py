"""Ring all-reduce: reduce-scatter, then all-gather, one chunk per step to the right."""


def ring_all_reduce(buf, comm) -> None:
    import torch

    n, rank = comm.world_size, comm.rank
    right, left = (rank + 1) % n, (rank - 1) % n
    chunks = torch.tensor_split(buf, n)              # views: writing them writes buf
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):                        # reduce-scatter: add what arrives
        request = comm.isend(chunks[(rank - step) % n], right)
        into = chunks[(rank - step - 1) % n]
        comm.recv(incoming[:into.numel()], left)
        request.wait()
        into.add_(incoming[:into.numel()])
    for step in range(n - 1):                        # all-gather: overwrite with finished sums
        request = comm.isend(chunks[(rank + 1 - step) % n], right)
        into = chunks[(rank - step) % n]
        comm.recv(incoming[:into.numel()], left)
        request.wait()
        into.copy_(incoming[:into.numel()])
