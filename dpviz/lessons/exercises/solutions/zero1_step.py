"""ZeRO-1: Adam over this rank's shard only, then all-gather every shard."""


def zero1_step(params, grad, state, comm) -> None:
    import torch

    shards = list(torch.tensor_split(params, comm.world_size))   # views of params
    mine = shards[comm.rank]
    if not state:
        state["shard"] = mine.clone().requires_grad_()
        state["adam"] = torch.optim.Adam([state["shard"]], lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    shard = state["shard"]
    shard.grad = torch.tensor_split(grad, comm.world_size)[comm.rank].clone()
    state["adam"].step()
    shard.grad = None                       # the gradient is not optimizer state
    comm.all_gather(shards, shard.detach())  # writes every rank's shard into params
