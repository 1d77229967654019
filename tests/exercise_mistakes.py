"""Known-wrong answers to the exercises, as learners write them (importable by the ranks)."""
from contextlib import nullcontext

import torch


def unchunked_ring(buf, comm):
    """The "Writing Distributed Applications" tutorial's ring: whole buffers, N−1 steps."""
    n, rank = comm.world_size, comm.rank
    send_buf, recv_buf, total = buf.clone(), torch.empty_like(buf), buf.clone()
    for _ in range(n - 1):
        request = comm.isend(send_buf, (rank + 1) % n)
        comm.recv(recv_buf, (rank - 1) % n)
        request.wait()
        total += recv_buf
        send_buf = recv_buf.clone()
    buf.copy_(total)


def ring_adding_in_all_gather(buf, comm):
    """Reduce-scatter right, then adds where all-gather must overwrite."""
    n, rank = comm.world_size, comm.rank
    chunks, incoming = torch.tensor_split(buf, n), torch.empty(buf.numel() // n)
    for step in range(2 * (n - 1)):
        request = comm.isend(chunks[(rank - step) % n], (rank + 1) % n)
        comm.recv(incoming, (rank - 1) % n)
        request.wait()
        chunks[(rank - step - 1) % n].add_(incoming)


def ring_that_raises(buf, comm):
    return buf.numel() / undefined_name  # noqa: F821  (a notebook global the ranks lack)


def picotron_39(grad, comm):
    """picotron #39: register_post_accumulate_grad_hook passes the parameter, named `grad` here."""
    comm.all_reduce(grad)
    grad /= comm.world_size


def sum_without_divide(param, comm):
    comm.all_reduce(param.grad)


def close_after_cap(param_bytes, bucket_cap_mb):
    """Closes a bucket once it exceeds the cap (>) instead of reaching it (>=)."""
    mib = 1 << 20
    limits = [mib, 25 * mib] if bucket_cap_mb is None else [int(bucket_cap_mb * mib)]
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        if filled > limits[min(len(buckets), len(limits) - 1)]:
            buckets.append(current)
            current, filled = [], 0
    return buckets + [current] * bool(current)


def definition_order(param_bytes, bucket_cap_mb):
    limit = int((bucket_cap_mb or 25) * (1 << 20))
    buckets, current, filled = [], [], 0
    for index, size in enumerate(param_bytes):
        current.append(index)
        filled += size
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    return buckets + [current] * bool(current)


def no_first_bucket_cap(param_bytes, bucket_cap_mb):
    limit = int((25 if bucket_cap_mb is None else bucket_cap_mb) * (1 << 20))
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    return buckets + [current] * bool(current)


def no_sync_backward_only(ddp, micro_batches, loss_fn):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(ddp(x), y) / k
        with ddp.no_sync() if i < k - 1 else nullcontext():
            loss.backward()


def accumulate_without_1_over_k(ddp, micro_batches, loss_fn):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else nullcontext():
            loss_fn(ddp(x), y).backward()


def accumulate_without_no_sync(ddp, micro_batches, loss_fn):
    for x, y in micro_batches:
        (loss_fn(ddp(x), y) / len(micro_batches)).backward()


def zero1_without_all_gather(params, grad, state, comm):
    mine = torch.tensor_split(params, comm.world_size)[comm.rank]
    if not state:
        state["shard"] = mine.clone().requires_grad_()
        state["adam"] = torch.optim.Adam([state["shard"]], lr=1e-3)
    state["shard"].grad = torch.tensor_split(grad, comm.world_size)[comm.rank].clone()
    state["adam"].step()
    mine.copy_(state["shard"].detach())


def adam_on_every_rank(params, grad, state, comm):
    """Right parameters, no sharding: every rank keeps Adam's state for the whole model."""
    if not state:
        state["p"] = params.clone().requires_grad_()
        state["adam"] = torch.optim.Adam([state["p"]], lr=1e-3)
    state["p"].grad = grad
    state["adam"].step()
    params.copy_(state["p"].detach())


def zero1_by_hand(params, grad, state, comm):
    """A correct ZeRO-1 step with Adam written out (other roundings than torch.optim.Adam)."""
    n, r = comm.world_size, comm.rank
    shards, g = list(torch.tensor_split(params, n)), torch.tensor_split(grad, n)[r]
    if not state:
        state.update(m=torch.zeros_like(g), v=torch.zeros_like(g), t=0)
    state["t"] += 1
    t = state["t"]
    state["m"].mul_(0.9).add_(g, alpha=0.1)
    state["v"].mul_(0.999).addcmul_(g, g, value=0.001)
    m_hat, v_hat = state["m"] / (1 - 0.9 ** t), state["v"] / (1 - 0.999 ** t)
    comm.all_gather(shards, shards[r] - 1e-3 * m_hat / (v_hat.sqrt() + 1e-8))


def first_cap_on_explicit_caps(param_bytes, bucket_cap_mb):
    """Caps the first bucket at 1 MiB even when the caller chose a cap."""
    mib = 1 << 20
    limits = [mib, int((bucket_cap_mb or 25) * mib)]
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        if filled >= limits[min(len(buckets), 1)]:
            buckets.append(current)
            current, filled = [], 0
    return buckets + [current] * bool(current)


def forgets_the_head(param_bytes, bucket_cap_mb):
    return [list(range(len(param_bytes) - 2))[::-1]]


def ring_receiving_first(buf, comm):
    """Every rank waits for its left neighbour before sending anything: a deadlock."""
    incoming = torch.empty_like(buf)
    comm.recv(incoming, (comm.rank - 1) % comm.world_size)
    comm.isend(buf, (comm.rank + 1) % comm.world_size).wait()


def ring_sending_twice(buf, comm):
    """A right ring that sends every chunk twice: right sum, but two recvs (steps) per step."""
    n, rank = comm.world_size, comm.rank
    chunks, incoming, spare = torch.tensor_split(buf, n), torch.empty(buf.numel() // n), torch.empty(buf.numel() // n)
    for phase in ("reduce_scatter", "all_gather"):
        for s in range(n - 1):
            out, into = ((chunks[(rank - s) % n], chunks[(rank - s - 1) % n]) if phase == "reduce_scatter"
                         else (chunks[(rank + 1 - s) % n], chunks[(rank - s) % n]))
            requests = [comm.isend(out, (rank + 1) % n), comm.isend(out, (rank + 1) % n)]
            comm.recv(incoming, (rank - 1) % n)
            comm.recv(spare, (rank - 1) % n)
            for request in requests:
                request.wait()
            if phase == "reduce_scatter":
                into.add_(incoming)
            else:
                into.copy_(incoming)


def hook_keeping_the_local_gradient(param, comm):
    param.grad.mul_(1.0)


def accumulate_never_syncing(ddp, micro_batches, loss_fn):
    with ddp.no_sync():
        for x, y in micro_batches:
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()


def zero1_with_lr_1e_2(params, grad, state, comm):
    shards = list(torch.tensor_split(params, comm.world_size))
    if not state:
        state["shard"] = shards[comm.rank].clone().requires_grad_()
        state["adam"] = torch.optim.Adam([state["shard"]], lr=1e-2)
    state["shard"].grad = torch.tensor_split(grad, comm.world_size)[comm.rank].clone()
    state["adam"].step()
    comm.all_gather(shards, state["shard"].detach())


def packing_none_cap(param_bytes, bucket_cap_mb):
    """Forgets that bucket_cap_mb may be None (DDP's default): None * 2**20 raises."""
    limit = bucket_cap_mb * 2**20
    return [[i] for i in reversed(range(len(param_bytes))) if limit]
