#!/usr/bin/env python3
"""Tensor parallelism through htp, one process per GPU: a Hugging Face Llama split by rank, each
rank's shard held once per node in the node's shared tier and paged into its GPU.

    torchrun --nproc-per-node 4 examples/python/tensor_parallel.py            # CPU: sim, gloo
    torchrun --nproc-per-node 1 examples/python/tensor_parallel.py --model DIR  # GPU: cuda, nccl

- The model: ``--model DIR`` (save_pretrained's safetensors files), or by default a tiny random
  Llama made with a fixed seed and saved to a temporary directory by rank 0 (the others wait).
- The split (Megatron's): q/k/v/gate/up projections column-parallel (each rank takes its rows of
  the weight: its attention heads, its slice of the MLP), o_proj/down_proj row-parallel (its
  columns), their partial outputs summed with torch.distributed.all_reduce in a forward hook.
  Heads, key/value heads and the intermediate size must divide by the world size.
- Each rank reads only its slices (safetensors ``safe_open(...).get_slice``, a mapped file), plus
  the small modules every rank holds (embeddings, norms, lm_head), publishes its shard into the
  node's tier (htp.distributed.node_tier) and offloads it with
  ``htp.torch.offload(tier=..., tier_prefix=f"rank{rank}/")`` at an HBM budget of 30% of the shard.
- Rank 0 computes the logits of the whole model, resident in one process, from the same files in
  float32; every rank compares its logits with them (torch.allclose, atol = rtol = 1e-5: the
  row-parallel sum adds the partial products in another order, so the result is not bit-exact),
  prints one JSON line and exits non-zero on a mismatch.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import transformers as tf
from accelerate import init_empty_weights
from safetensors import safe_open

import htp
import htp.distributed
import htp.torch

COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW = ("o_proj", "down_proj")
KEEP = ["model.embed_tokens", "lm_head", "*norm"]
PAGE = 4096
DTYPE = torch.float32  # the reference's: a bfloat16 checkpoint is compared in float32 too


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a directory of safetensors files (default: a tiny random Llama)")
    p.add_argument("--hbm-fraction", type=float, default=0.3,
                   help="each rank's HBM budget as a fraction of its shard's bytes")
    p.add_argument("--backend", choices=["auto", "sim", "cuda"], default="auto")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--tokens", type=int, default=12)
    return p.parse_args()


def private_memory() -> dict[str, int]:
    """This process's Private_Clean and Private_Dirty bytes (/proc/self/smaps_rollup)."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Private_Clean", "Private_Dirty"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def tiny_llama(path: str) -> None:
    """A small random Llama (grouped-query attention) made with a fixed seed, saved to `path`."""
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=128)
    tf.LlamaForCausalLM(cfg).float().eval().save_pretrained(path, safe_serialization=True)


class Files:
    """The checkpoint's tensors by name, each read through its file's safe_open (mapped)."""

    def __init__(self, path: str) -> None:
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                owner = json.load(f)["weight_map"]
        else:
            owner = {}
            for name in sorted(os.listdir(path)):
                if name.endswith(".safetensors"):
                    with safe_open(os.path.join(path, name), framework="pt") as f:
                        owner.update({k: name for k in f.keys()})
        self.owner = owner
        self.handles = {n: safe_open(os.path.join(path, n), framework="pt")
                        for n in sorted(set(owner.values()))}

    def __contains__(self, name: str) -> bool:
        return name in self.owner

    def slice(self, name: str):
        return self.handles[self.owner[name]].get_slice(name)


def check_divisible(cfg: tf.LlamaConfig, world: int) -> None:
    for what in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        n = getattr(cfg, what)
        if n % world:
            raise ValueError(f"tensor_parallel: {what} = {n} does not divide by the world size "
                             f"{world}; run with a world size that divides it "
                             "(torchrun --nproc-per-node)")


def sharded_linear(files: Files, name: str, dense: torch.nn.Linear, rank: int, world: int,
                   column: bool) -> torch.nn.Linear:
    """Rank `rank`'s part of the Linear `name`: rows of the weight (column-parallel) or columns
    (row-parallel; the bias, if any, on rank 0 only so the sum adds it once)."""
    w = files.slice(f"{name}.weight")
    out_f, in_f = w.get_shape()
    has_bias = dense.bias is not None
    if column:
        n = out_f // world
        weight = w[rank * n:(rank + 1) * n]
        bias = files.slice(f"{name}.bias")[rank * n:(rank + 1) * n] if has_bias else None
    else:
        n = in_f // world
        weight = w[:, rank * n:(rank + 1) * n]
        bias = files.slice(f"{name}.bias")[:] if has_bias and rank == 0 else None
    with torch.device("meta"):
        lin = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    lin.weight = torch.nn.Parameter(weight.to(DTYPE).contiguous(), requires_grad=False)
    if bias is not None:
        lin.bias = torch.nn.Parameter(bias.to(DTYPE).contiguous(), requires_grad=False)
    return lin


def all_reduce_output(module, args, output):
    dist.all_reduce(output)
    return output


def shard_model(path: str, rank: int, world: int) -> tuple[torch.nn.Module, int]:
    """The model with rank `rank`'s projections and every other parameter whole, read from the
    files; returns it and the shard's bytes (the projections)."""
    cfg = tf.LlamaConfig.from_pretrained(path)
    check_divisible(cfg, world)
    with init_empty_weights():  # parameters on the meta device, buffers (rotary tables) real
        model = tf.LlamaForCausalLM(cfg).to(DTYPE)
    files = Files(path)
    shard_bytes = 0
    for name, module in list(model.named_modules()):
        for child, sub in list(module.named_children()):
            if child in COLUMN + ROW:
                full = f"{name}.{child}"
                lin = sharded_linear(files, full, sub, rank, world, child in COLUMN)
                if child in ROW:
                    lin.register_forward_hook(all_reduce_output)
                setattr(module, child, lin)
                shard_bytes += sum(p.numel() * p.element_size() for p in lin.parameters())
    for name, p in list(model.named_parameters()):
        if not p.is_meta:
            continue
        if name not in files:
            if name == "lm_head.weight" and cfg.tie_word_embeddings:
                continue  # tied to the token embedding below
            raise ValueError(f"tensor_parallel: {path} holds no tensor {name!r}")
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._parameters[leaf] = torch.nn.Parameter(
            files.slice(name)[:].to(DTYPE), requires_grad=False)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval(), shard_bytes


def reference_logits(path: str, ids: torch.Tensor, device: torch.device) -> torch.Tensor:
    model = tf.LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    with torch.no_grad():
        return model(ids.to(device)).logits.float()


def main() -> int:
    args = parse_args()
    where = htp.distributed.placement()
    backend = args.backend
    if backend == "auto":
        backend = "cuda" if htp.cuda_device_count() > 0 else "sim"
    if backend == "cuda":
        torch.cuda.set_device(where.local_rank)
    dist.init_process_group("nccl" if backend == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    made = None
    path = args.model
    if path is None:
        box = [None]
        if rank == 0:
            made = tempfile.mkdtemp(prefix="htp-tp-")
            tiny_llama(made)
            box = [made]
        dist.broadcast_object_list(box, src=0)  # the others wait here until it is saved
        path = box[0]
    device = htp.make_device(backend, where.local_rank if backend == "cuda" else 0)
    exec_device = torch.device("cuda", where.local_rank) if backend == "cuda" else torch.device(
        "cpu")
    try:
        return run(args, path, rank, world, where, device, exec_device)
    finally:
        dist.barrier()
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        dist.destroy_process_group()


def run(args, path, rank, world, where, device, exec_device) -> int:
    model, shard_bytes = shard_model(path, rank, world)
    rounded = sum(-(-p.numel() * p.element_size() // PAGE) * PAGE
                  for n, p in model.named_parameters() if n.rpartition(".")[0].endswith(COLUMN + ROW))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.tokens), generator=g)
    with torch.no_grad():  # the same split with its shard resident: offloading changes no bit
        resident = model.to(exec_device)(ids.to(exec_device)).logits.float()
    tier = htp.distributed.node_tier(where.local_world_size * rounded + (1 << 20), page_bytes=PAGE)
    handle = htp.torch.offload(model, hbm_budget=int(args.hbm_fraction * shard_bytes), keep=KEEP,
                               device=device, tier=tier, tier_prefix=f"rank{rank}/")
    with torch.no_grad():
        logits = [model(ids).logits.float() for _ in range(2)]  # the second runs on the schedule
    ref = reference_logits(path, ids, exec_device) if rank == 0 else torch.empty_like(logits[0])
    dist.broadcast(ref, src=0)
    dist.barrier()  # every rank of the node has published its shard
    diff = max(float((x - ref).abs().max()) for x in logits)
    ok = all(torch.allclose(x, ref, atol=1e-5, rtol=1e-5) for x in logits)
    tier_state = tier.describe()
    mem = private_memory()
    metrics = handle.metrics()
    line = json.dumps({
        "rank": rank, "local_rank": where.local_rank, "node": where.node, "world_size": world,
        "backend": device.backend, "allclose": ok, "max_abs_diff": diff,
        "equal_to_resident_shard": all(torch.equal(x, resident) for x in logits),
        "tier": tier.name, "tier_bytes": tier.data_bytes, "tier_entries": tier_state["entries"],
        "tier_entry_bytes": tier_state["entry_bytes"], "tier_live_ranks": tier_state["live_ranks"],
        "shard_bytes": shard_bytes, "hbm_budget": handle.pager.config.hbm_budget_bytes,
        "page_ins": metrics["page_ins"], "evictions": metrics["evictions"],
        "private_rss": mem.get("Private_Clean", 0) + mem.get("Private_Dirty", 0),
        "private_dirty": mem.get("Private_Dirty", 0),
    })
    sys.stdout.write(line + "\n")  # one write: the ranks share torchrun's stdout
    sys.stdout.flush()
    dist.barrier()  # nobody releases its entries before every rank has described the tier
    handle.remove()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
