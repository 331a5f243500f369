"""Torch-only tiny GPT pretrain (no Megatron): data parallel over gloo (CPU) or NCCL (GPU).

Run under torch.distributed.run; rank 0 writes {"losses", "tokens_per_s", ...} to --out.
This is the trainer CI can run without a GPU; it exercises the loss rule and the certificate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from envbuilder.certify import gpulock
from envbuilder.certify.data import batches


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, seq: int, hidden: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    # before the first CUDA call: this worker's GPU work runs alone (certify/gpulock.py)
    held = gpulock.acquire() if a.device == "cuda" else None
    distributed = "RANK" in os.environ
    rank, world = 0, 1
    if distributed:
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    if a.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        device = torch.device("cpu")
    torch.manual_seed(a.seed)  # same init on every rank (DDP also broadcasts it)
    model: nn.Module = TinyGPT(a.vocab, a.seq, a.hidden, a.heads, a.layers).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    data = batches(torch, a.vocab, a.seq, a.mbs, a.seed + rank, device)
    losses: list[float] = []
    t0, warm = 0.0, min(3, a.steps - 1)
    for step in range(a.steps):
        if step == warm:
            if a.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        tokens, labels = next(data)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.device == "cuda"):
            logits = model(tokens)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), labels.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        rep = loss.detach().clone()
        if distributed:
            dist.all_reduce(rep)
            rep /= world
        losses.append(float(rep))
    if a.device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tokens_per_s = (a.steps - warm) * a.mbs * a.seq * world / dt if dt > 0 else math.nan
    if rank == 0:
        a.out.write_text(json.dumps({
            "losses": losses, "tokens_per_s": tokens_per_s, "world_size": world,
            "layout": {"dp": world}, "model": {"layers": a.layers, "hidden": a.hidden, "heads": a.heads,
                                               "seq": a.seq, "vocab": a.vocab, "mbs": a.mbs},
            **gpulock.waited(held),
        }))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
