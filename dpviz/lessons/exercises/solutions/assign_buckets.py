"""Greedy packing in ready order (reverse definition), first bucket capped at 1 MiB by default."""


def assign_buckets(param_bytes, bucket_cap_mb):
    mib = 1 << 20
    limits = [mib, 25 * mib] if bucket_cap_mb is None else [int(bucket_cap_mb * mib)]
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        if filled >= limits[min(len(buckets), len(limits) - 1)]:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets
