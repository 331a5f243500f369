"""Megatron-core tiny GPT pretrain on GPUs: one process per GPU under torch.distributed.run.

Any layout of TP x PP (x VPP) x CP x DP, optional sequence parallelism and distributed
optimizer. Mock data (data.py), fixed seed, bf16. The global last rank (last pipeline
stage) writes {"losses", "tokens_per_s", ...} to --out.

TE present: TE layer spec (needed for CP). TE absent: Megatron's local spec; with sequence
parallelism the local spec's torch LayerNorm refuses SP, so we substitute a torch LayerNorm
whose parameters carry `sequence_parallel=True` (what apex's FusedLayerNorm does), which
makes finalize_model_grads all-reduce their gradients across the TP group.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

from envbuilder.certify import gpulock
from envbuilder.certify.data import batches


def have_te() -> bool:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:
        return False
    return True


class SeqParallelTorchNorm(torch.nn.LayerNorm):
    """torch LayerNorm usable under sequence parallelism (its grads are reduced across TP)."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any) -> None:
        super().__init__(hidden_size, eps=eps)
        for p in self.parameters():
            setattr(p, "sequence_parallel", True)  # noqa: B010 (a plain attribute mcore reads)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--vpp", type=int, default=0)
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--sp", action="store_true")
    ap.add_argument("--dist-opt", action="store_true")
    ap.add_argument("--spec", choices=["auto", "te", "local"], default="auto")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--nmb", type=int, default=1, help="micro-batches per step (per DP rank)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--overlap-p2p", action="store_true", help="interleaved schedule: overlap p2p communication")
    ap.add_argument("--fp32", action="store_true", help="float32 parameters and math instead of bf16")
    ap.add_argument("--pos", choices=["rope", "learned_absolute"], default="rope")
    a = ap.parse_args()

    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt import gpt_layer_specs as specs
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    held = gpulock.acquire()  # before the first CUDA call: this worker's GPU work runs alone (certify/gpulock.py)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    torch.distributed.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    vpp = a.vpp or None
    ps.initialize_model_parallel(tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp,
                                 virtual_pipeline_model_parallel_size=vpp, context_parallel_size=a.cp)
    dp = world // (a.tp * a.pp * a.cp)
    torch.manual_seed(a.seed)
    model_parallel_cuda_manual_seed(a.seed)

    dtype = torch.float32 if a.fp32 else torch.bfloat16
    use_te = a.spec == "te" or (a.spec == "auto" and have_te())
    config = TransformerConfig(
        num_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads, ffn_hidden_size=4 * a.hidden,
        tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp,
        virtual_pipeline_model_parallel_size=vpp, context_parallel_size=a.cp, sequence_parallel=a.sp,
        bf16=not a.fp32, params_dtype=dtype, pipeline_dtype=dtype,
        hidden_dropout=0.0, attention_dropout=0.0,
        overlap_p2p_comm=a.overlap_p2p, batch_p2p_comm=not a.overlap_p2p,
    )
    layer_spec = specs.get_gpt_layer_with_transformer_engine_spec() if use_te else specs.get_gpt_layer_local_spec()
    norm = "te" if use_te else "torch"
    if a.sp and not use_te and not specs.HAVE_APEX:
        layer_spec.submodules.input_layernorm = SeqParallelTorchNorm
        layer_spec.submodules.pre_mlp_layernorm = SeqParallelTorchNorm
        norm = "torch LayerNorm marked sequence_parallel"

    chunks: list[torch.nn.Module] = []
    for i in range(vpp or 1):
        vp_stage = i if vpp else None
        spec: Any = layer_spec
        if norm.startswith("torch LayerNorm"):
            n = get_num_layers_to_build(config, vp_stage=vp_stage)
            spec = TransformerBlockSubmodules(layer_specs=[layer_spec] * n, layer_norm=SeqParallelTorchNorm)
        gpt = GPTModel(
            config=config, transformer_layer_spec=spec, vocab_size=a.vocab, max_sequence_length=a.seq,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
            position_embedding_type=a.pos, vp_stage=vp_stage,
        ).cuda()
        chunks.append(gpt)
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                               use_distributed_optimizer=a.dist_opt)
    model = [DistributedDataParallel(config=config, ddp_config=ddp_config,
                                     module=m if a.fp32 else Float16Module(config, m),
                                     disable_bucketing=i > 0)
             for i, m in enumerate(chunks)]
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=a.lr, weight_decay=0.0, bf16=not a.fp32, params_dtype=torch.float32,
                        use_distributed_optimizer=a.dist_opt, clip_grad=1.0),
        model)
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss

    dp_rank = ps.get_data_parallel_rank()
    cp_group = ps.get_context_parallel_group()

    def make_iter() -> Any:
        return batches(torch, a.vocab, a.seq, a.mbs, a.seed + 1000 * dp_rank, torch.device("cuda"))

    iters = [make_iter() for _ in model] if vpp else make_iter()
    positions = torch.arange(a.seq, device="cuda").unsqueeze(0).expand(a.mbs, -1)

    def loss_func(loss_mask: torch.Tensor, output: torch.Tensor) -> Any:
        losses = output.float().view(-1)
        mask = loss_mask.view(-1).float()
        loss = torch.sum(losses * mask)
        ntok = mask.sum().to(torch.int)
        return loss, ntok, {"lm loss": torch.stack([loss.detach(), mask.sum().detach()])}

    def forward_step(data_iterator: Any, m: torch.nn.Module) -> Any:
        tokens, labels = next(data_iterator)
        batch = {"tokens": tokens, "labels": labels, "loss_mask": torch.ones_like(labels, dtype=torch.float),
                 "position_ids": positions}
        if a.cp > 1:
            from megatron.core.utils import get_batch_on_this_cp_rank

            # megatron-core 0.17 takes (batch, cp_group); later releases put a flag before cp_group
            if list(inspect.signature(get_batch_on_this_cp_rank).parameters)[1] == "cp_group":
                batch = get_batch_on_this_cp_rank(batch, cp_group=cp_group)
            else:
                batch = get_batch_on_this_cp_rank(batch, False, cp_group=cp_group)
        out = m(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
        return out, partial(loss_func, batch["loss_mask"])

    fwd_bwd = get_forward_backward_func()
    is_last = ps.is_pipeline_last_stage(ignore_virtual=True)
    losses: list[float] = []
    grad_norms: list[float | None] = []
    t0, warm = 0.0, min(3, a.steps - 1)
    for step in range(a.steps):
        if step == warm:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        for m in model:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        reduced = fwd_bwd(forward_step_func=forward_step, data_iterator=iters, model=model,
                          num_microbatches=a.nmb, seq_length=a.seq, micro_batch_size=a.mbs,
                          decoder_seq_length=a.seq, forward_only=False)
        ok, grad_norm, _ = optimizer.step()
        grad_norms.append(None if grad_norm is None else round(float(grad_norm), 4))
        if is_last:
            tot = torch.stack([d["lm loss"] for d in reduced]).sum(0)
            torch.distributed.all_reduce(tot, group=ps.get_data_parallel_group(with_context_parallel=True))
            losses.append(float(tot[0] / tot[1]) if ok else float("nan"))
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tokens = (a.steps - warm) * a.mbs * a.nmb * dp * a.seq
    if rank == world - 1:
        a.out.write_text(json.dumps({
            "losses": losses, "grad_norms": grad_norms, "tokens_per_s": tokens / dt if dt > 0 else None,
            "world_size": world,
            "layout": {"tp": a.tp, "pp": a.pp, "vpp": vpp, "cp": a.cp, "dp": dp, "sp": a.sp,
                       "distributed_optimizer": a.dist_opt},
            "spec": "te" if use_te else "local", "norm": norm,
            "model": {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": a.seq, "vocab": a.vocab,
                      "mbs": a.mbs, "num_microbatches": a.nmb},
            "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            **gpulock.waited(held),
        }))
    torch.distributed.barrier()
    ps.destroy_model_parallel()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
