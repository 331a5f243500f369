"""NCCL all-reduce bus bandwidth (nccl-tests convention: busbw = algbw * 2(n-1)/n).

Run under torch.distributed.run, one process per GPU; rank 0 writes the result to --out.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

SIZES_MIB = [64, 256, 1024]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, n = dist.get_rank(), dist.get_world_size()
    # correctness first: sum of (rank + 1) over ranks
    t = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    correct = bool(torch.all(t == n * (n + 1) / 2))
    per_size = {}
    for mib in SIZES_MIB:
        x = torch.randn(mib * (1 << 20) // 2, device="cuda", dtype=torch.bfloat16)
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(a.iters):
            dist.all_reduce(x)
        e.record()
        e.synchronize()
        sec = s.elapsed_time(e) / 1e3 / a.iters
        algbw = x.numel() * x.element_size() / sec / 1e9
        per_size[f"{mib}MiB"] = round(algbw * 2 * (n - 1) / n, 1)
        del x
    if rank == 0:
        a.out.write_text(json.dumps({"correct": correct, "busbw_gbps": per_size, "world_size": n,
                                     "nccl": ".".join(map(str, torch.cuda.nccl.version()))}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
