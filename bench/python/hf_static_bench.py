#!/usr/bin/env python3
"""Decode under CUDA graphs with offloaded weights: a Llama-3.1-8B-shaped model in bf16 (random
weights, a Hugging Face StaticCache) decoding --tokens tokens at batch 1 with its decoder layers at
30% of their bytes in HBM, side by side in one process:

  resident        the whole model in HBM, the decode step captured once (torch.cuda.graph) and
                  replayed: the reference every other mode must give the tokens of
  static          htp.torch.offload(static=True): fixed addresses, the step's copies inside the
                  captured graph
  static-compress the same with compress=True: coded weights, decoded inside the graph
  dynamic         htp.torch.offload (the dynamic pager; eager, it cannot be captured)
  resident-compiled  the whole model in HBM under torch.compile(mode="reduce-overhead"): the
                  reference of the compiled mode (inductor's kernels round differently from
                  eager's, so a greedy decode of random weights may pick other tokens)
  compiled        static, under torch.compile(mode="reduce-overhead") (CUDA graphs by inductor)

Reports tokens/s and checks every mode's tokens are its reference's (resident, or
resident-compiled for compiled). Writes hf-static.json under
--out. --dry-run: sim, a tiny model, eager steps and torch.compile on the CPU (no CUDA graphs), so
the script itself runs in the test command. Exits 77 (SKIP) without torch/transformers or a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

LLAMA_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                rope_theta=500000.0)
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
KEEP = ["model.embed_tokens", "lm_head", "model.norm", "model.rotary_emb"]


def parse_args() -> argparse.Namespace:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--out", required=True, help="folder for hf-static.json")
    a.add_argument("--dry-run", action="store_true", help="sim, a tiny model, no CUDA graphs")
    a.add_argument("--tokens", type=int, default=16)
    a.add_argument("--prompt", type=int, default=16)
    a.add_argument("--fraction", type=float, default=0.3)
    a.add_argument("--modes",
                   default="resident,static,static-compress,dynamic,resident-compiled,compiled")
    return a.parse_args()


def main() -> int:
    args = parse_args()
    try:
        import torch
        import transformers

        import htp
        import htp.torch as ht
    except ImportError as e:
        print(f"SKIP: {e}")
        return 77
    gpu = not args.dry_run
    if gpu and not torch.cuda.is_available():
        print("SKIP: no GPU visible to torch")
        return 77
    dev = htp.make_device("cuda" if gpu else "sim")
    where = torch.device("cuda" if gpu else "cpu")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**(LLAMA_8B if gpu else TINY))
    dtype = torch.bfloat16 if gpu else torch.float32
    with torch.device(where):
        model = transformers.LlamaForCausalLM(cfg).to(dtype).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt), device=where)
    host = {n: p.detach().cpu() for n, p in model.named_parameters()}  # the true bytes
    layer_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                      if n.startswith("model.layers."))
    results, tokens_of = {}, {}
    for mode in args.modes.split(","):
        model = rebuild(model, host, where, mode)
        t, tokens, extra = run_mode(mode, model, prompt, args, dev, layer_bytes, where, gpu, ht,
                                    torch, transformers)
        tokens_of[mode] = tokens
        reference = {"compiled": "resident-compiled",
                     "resident-compiled": "resident-compiled"}.get(mode, "resident")
        results[mode] = dict(tokens_per_s=args.tokens / t, ms_per_token=1e3 * t / args.tokens,
                             reference=reference, **extra)
        if mode == "resident-compiled" and "resident" in tokens_of:  # information, not a check
            results[mode]["same_tokens_as_eager"] = bool(torch.equal(tokens, tokens_of["resident"]))
        want = tokens_of.get(reference, tokens)
        results[mode]["tokens_identical"] = bool(torch.equal(tokens, want))
        print(f"{mode:18s} {results[mode]['tokens_per_s']:9.2f} tok/s   identical to "
              f"{reference}: {results[mode]['tokens_identical']}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hf-static.json"), "w") as f:
        json.dump(dict(gpu=gpu, fraction=args.fraction, tokens=args.tokens, modes=results), f,
                  indent=1)
    return 0 if all(r["tokens_identical"] for r in results.values()) else 1


def rebuild(model, host, where, mode):
    """The model with its own weights back on `where` (resident) or on the CPU (to offload)."""
    target = where if mode.startswith("resident") else "cpu"
    for n, p in model.named_parameters():
        p.data = host[n].to(target)
    return model


def run_mode(mode, model, prompt, args, dev, layer_bytes, where, gpu, ht, torch, transformers):
    budget = int(layer_bytes * args.fraction)
    handle, extra = None, {}
    ids = prompt
    if mode in ("static", "static-compress", "compiled"):
        handle = ht.offload(model, hbm_budget=budget, keep=KEEP, device=dev, static=True,
                            compress=mode == "static-compress", example_inputs=(ids,))
        extra["plan"] = {k: v for k, v in handle.plan.items() if k not in ("resident", "streamed")}
    elif mode == "dynamic":
        handle = ht.offload(model, hbm_budget=budget, keep=KEEP, device=dev)
    elif mode.startswith("resident"):
        model.to(where)
    compiled = mode.endswith("compiled")
    step = decoder(model, args, where, torch, transformers,
                   graph=gpu and mode != "dynamic" and not compiled, compiled=compiled, gpu=gpu)
    t, tokens = step(ids)
    if handle is not None:
        handle.remove()
    return t, tokens, extra


def decoder(model, args, where, torch, transformers, graph: bool, compiled: bool, gpu: bool):
    """A greedy decode with a StaticCache: prefill eagerly, then each token one step of one
    token, captured once and replayed when `graph`, compiled when `compiled`."""
    def sync():
        if gpu:
            torch.cuda.synchronize()

    def run(ids):
        cache = transformers.StaticCache(config=model.config, max_batch_size=1,
                                         max_cache_len=args.prompt + args.tokens + 4)
        forward = model.forward
        if compiled:
            forward = torch.compile(model.forward, mode="reduce-overhead" if gpu else "default",
                                    fullgraph=True)
        with torch.no_grad():
            n = ids.shape[1]
            out = model(input_ids=ids, past_key_values=cache,
                        cache_position=torch.arange(n, device=where), use_cache=True)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            static_ids, pos = tok.clone(), torch.tensor([n], device=where)
            step = lambda: forward(input_ids=static_ids, past_key_values=cache,  # noqa: E731
                                   cache_position=pos, use_cache=True).logits
            if compiled:
                for _ in range(3):  # compile, then record inductor's graphs (warm-up, rewritten)
                    step()
            if graph:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    step()  # warm-up (writes the cache at n, rewritten by the first replay)
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    logits = step()
            tokens = [tok]
            sync()
            t0 = time.perf_counter()
            for _ in range(args.tokens - 1):
                if graph:
                    g.replay()
                    out_logits = logits
                else:
                    out_logits = step()
                tok = out_logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(tok)
                static_ids.copy_(tok)
                pos += 1
            sync()
            return time.perf_counter() - t0, torch.cat(tokens, dim=1).cpu()
    return run


if __name__ == "__main__":
    sys.exit(main())
