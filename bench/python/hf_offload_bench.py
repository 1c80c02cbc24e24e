#!/usr/bin/env python3
"""The comparison Python users ask for: a Llama-3.1-8B-shaped model in bf16 (random weights)
decoding 32 tokens at batch 1 and 16, with its decoder layers in host memory and HBM budgets of
30% and 50% of their bytes, run side by side in one process:

  resident    the whole model in HBM (the reference: every other mode must give its tokens)
  htp         htp.torch.offload (zero copy over the pinned host weights, prefetch, Belady)
  htp-compress  htp.torch.offload(compress=True): the weights kept entropy-coded in htp's pinned
              tier, about two thirds of the bytes on the link, decoded on the GPU (30% only)
  accelerate  accelerate.cpu_offload (what users run today)
  naive       a forward pre-hook per decoder layer: .to("cuda", non_blocking=True) from pinned memory

Reports tokens/s and ms per token, htp's page-ins, stalls and link use, and the link bound: the
bytes htp paged per token over the H2D bandwidth measured here. Writes hf-offload.json and
hf-offload.md under --out. --dry-run: the same on sim with a tiny model (part of the test command).
Exits 77 (SKIP) without torch/transformers or without a GPU (unless --dry-run).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

torch = transformers = htp = ht = None  # imported by main, after --help


def import_stack() -> None:
    """torch, transformers and htp; exit 77 (the GPU check's SKIP) when one is missing."""
    global torch, transformers, htp, ht
    try:
        import torch
        import transformers

        import htp
        import htp.torch as ht
    except ImportError as e:
        print(f"SKIP: {e}")
        sys.exit(77)

KEEP = ["model.embed_tokens", "lm_head", "model.norm", "model.rotary_emb"]
LLAMA_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                rope_theta=500000.0)
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)


def parse_args() -> argparse.Namespace:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--out", required=True, help="folder for hf-offload.json and hf-offload.md")
    a.add_argument("--dry-run", action="store_true", help="sim, a tiny model, 4 tokens")
    a.add_argument("--tokens", type=int, default=32)
    a.add_argument("--prompt", type=int, default=16, help="prompt length")
    a.add_argument("--batches", default="1,16")
    a.add_argument("--fractions", default="0.3,0.5", help="HBM budgets as fractions of the layers")
    a.add_argument("--modes", default="resident,htp,htp-compress,accelerate,naive")
    a.add_argument("--inject-failure", default="", metavar="MODE",
                   help="make MODE raise (tests that one mode's error is its rows' and the others run)")
    return a.parse_args()


def build_on(device, shape: dict, dtype):
    """The model with seeded random weights made where it will run (the CPU generator takes
    minutes for 16 GB): built on `device`, its parameters refilled with normal_ there."""
    with torch.device(device):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape))
    model = model.to(dtype).eval()
    g = torch.Generator(device=device).manual_seed(1234)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=g)
    return model


def host_copy(model, pin: bool):
    """The same weights in (pinned) host memory: the starting point of every offloading mode, and
    those tensors by parameter name (restore() puts them back before each mode). Built on meta
    and given storage, so nothing is initialised on the CPU."""
    with torch.device("meta"):
        host = transformers.LlamaForCausalLM(model.config)
    host = host.to(model.dtype).to_empty(device="cpu").eval()
    weights = {}
    with torch.no_grad():
        for (name, dst), src in zip(host.named_parameters(), model.parameters()):
            buf = torch.empty(src.shape, dtype=src.dtype, pin_memory=pin)
            buf.copy_(src)
            dst.data = buf
            weights[name] = buf
        for dst, src in zip(host.buffers(), model.buffers()):
            dst.copy_(src)
    return host, weights


def restore(host, weights: dict) -> None:
    """Every mode starts from the same state: each parameter is the (pinned) host tensor of
    host_copy again, whatever the last mode left (htp's remove() gives back decoded pageable
    copies after compress=True, accelerate leaves meta parameters, keep= and the naive mode move
    modules back into pageable memory)."""
    for mname, module in host.named_modules():
        for local, p in list(module._parameters.items()):
            if p is not None:
                name = f"{mname}.{local}" if mname else local
                module._parameters[local] = torch.nn.Parameter(weights[name], requires_grad=False)


def layer_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.model.layers.parameters())


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode(model, ids, tokens: int, device):
    """Greedy decode of exactly `tokens` tokens; (tokens, seconds), after one warm-up step."""
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
        sync(device)
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        sync(device)
    return out[:, ids.shape[1]:].cpu(), time.perf_counter() - t0


def naive_hooks(model, device) -> list:
    """What people write first: each decoder layer's weights copied in before it runs."""
    hooks = []
    for layer in model.model.layers:
        host = {n: p.data for n, p in layer.named_parameters()}

        def pre(module, args, host=host):
            for n, p in module.named_parameters():
                p.data = host[n].to(device, non_blocking=True)

        def post(module, args, out, host=host):
            for n, p in module.named_parameters():
                p.data = host[n]

        hooks += [layer.register_forward_pre_hook(pre), layer.register_forward_hook(post)]
    return hooks


def h2d_bandwidth(device) -> float:
    """Bytes/s of one large pinned-to-HBM copy (the link bound's denominator)."""
    if device.type != "cuda":
        return 0.0
    src = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst.copy_(src, non_blocking=True)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    sync(device)
    return 3 * (1 << 30) / (time.perf_counter() - t0)


def run_htp(host, dev, budget, ids_by_batch, args, exec_device, want, bw, compress=False):
    rows = []
    t0 = time.perf_counter()
    # compress: the weights are encoded into htp's own pinned tier (copy=True; remove() decodes
    # them back into the parameters), otherwise htp pages from the pinned host copy itself.
    handle = ht.offload(host, hbm_budget=budget, keep=KEEP, device=dev, copy=compress,
                        compress=compress, eviction="belady")
    setup_s = time.perf_counter() - t0
    try:
        for batch, ids in ids_by_batch.items():
            handle.pager.reset_metrics()
            tokens, secs = decode(host, ids, args.tokens, exec_device)
            m = handle.metrics()
            steps = args.tokens + 1  # prefill + decode steps of the timed generate
            paged = m["page_in_bytes"] / steps
            row = dict(mode="htp-compress" if compress else "htp", batch=batch, budget_bytes=budget,
                       seconds=secs, setup_seconds=setup_s, page_in_wire_bytes_per_token=m["page_in_wire_bytes"] / steps,
                       identical=bool(torch.equal(tokens, want[batch])),
                       page_ins=m["page_ins"], page_in_bytes_per_token=paged,
                       faults=m["faults"], prefetch_hits=m["prefetch_hits"],
                       late_prefetches=m["late_prefetches"], host_blocked_ms=m["host_blocked_ns"] / 1e6,
                       fault_wait=m["fault_wait"], h2d=m["transfers"].get("h2d", {}))
            if bw:
                row["link_bound_ms_per_token"] = 1e3 * m["page_in_wire_bytes"] / steps / bw
            rows.append(row)
    finally:
        handle.remove()
    return rows


def run_accelerate(host, ids_by_batch, args, exec_device, want):
    import accelerate
    from accelerate.hooks import remove_hook_from_submodules
    accelerate.cpu_offload(host, execution_device=exec_device)
    rows = []
    try:
        for batch, ids in ids_by_batch.items():
            tokens, secs = decode(host, ids, args.tokens, exec_device)
            rows.append(dict(mode="accelerate", batch=batch, seconds=secs,
                             identical=bool(torch.equal(tokens, want[batch]))))
    finally:
        remove_hook_from_submodules(host)
    return rows


def run_naive(host, ids_by_batch, args, exec_device, want):
    resident = (host.model.embed_tokens, host.model.norm, host.model.rotary_emb, host.lm_head)
    for m in resident:
        m.to(exec_device)
    hooks = naive_hooks(host, exec_device)
    rows = []
    try:
        for batch, ids in ids_by_batch.items():
            tokens, secs = decode(host, ids.to(exec_device), args.tokens, exec_device)
            rows.append(dict(mode="naive", batch=batch, seconds=secs,
                             identical=bool(torch.equal(tokens, want[batch]))))
    finally:
        for h in hooks:
            h.remove()
        for m in resident:
            m.to("cpu")
    return rows


def finish(row: dict, args) -> dict:
    if "seconds" in row:
        row["ms_per_token"] = 1e3 * row["seconds"] / args.tokens
        row["tokens_per_second"] = row["batch"] * args.tokens / row["seconds"]
    return row


def markdown(result: dict) -> str:
    lines = [f"# {result['model']} offload, {result['tokens']} tokens, backend {result['backend']}", "",
             "| mode | budget | batch | tokens/s | ms/token | vs accelerate | link bound ms/token | identical |",
             "|---|---|---|---|---|---|---|---|"]
    acc = {r["batch"]: r for r in result["rows"] if r["mode"] == "accelerate" and "error" not in r}
    for r in result["rows"]:
        budget = f"{r['budget_fraction']:.0%}" if "budget_fraction" in r else "-"
        if "error" in r:
            lines.append(f"| {r['mode']} | {budget} | {r['batch']} | error: {r['error'][:120]} | | | | |")
            continue
        speed = f"{acc[r['batch']]['ms_per_token'] / r['ms_per_token']:.2f}x" if r["batch"] in acc else "-"
        bound = f"{r['link_bound_ms_per_token']:.1f}" if "link_bound_ms_per_token" in r else "-"
        lines.append(f"| {r['mode']} | {budget} | {r['batch']} | {r['tokens_per_second']:.1f} | "
                     f"{r['ms_per_token']:.1f} | {speed} | {bound} | {r['identical']} |")
    return "\n".join(lines) + "\n"


def modes_to_run(args, host, dev, layers, ids_by_batch, exec_device, want, bw):
    """(mode, budget fraction or None, a function giving its rows), in the order they run."""
    out = []
    if "naive" in args.modes:
        out.append(("naive", None, lambda: run_naive(host, ids_by_batch, args, exec_device, want)))
    fractions = [float(x) for x in args.fractions.split(",")]
    for f in fractions if "htp" in args.modes else []:
        out.append(("htp", f, lambda f=f: run_htp(host, dev, int(layers * f), ids_by_batch, args,
                                                  exec_device, want, bw)))
    if "htp-compress" in args.modes:  # one budget: encoding 16 GB takes a while even on every core
        out.append(("htp-compress", fractions[0], lambda: run_htp(
            host, dev, int(layers * fractions[0]), ids_by_batch, args, exec_device, want, bw,
            compress=True)))
    if "accelerate" in args.modes:
        out.append(("accelerate", None, lambda: run_accelerate(host, ids_by_batch, args,
                                                               exec_device, want)))
    return out


def write_results(args, result: dict) -> None:
    """hf-offload.json and hf-offload.md as they stand (after each mode: a crash keeps the rest)."""
    for r in result["rows"]:
        finish(r, args)
    with open(os.path.join(args.out, "hf-offload.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "hf-offload.md"), "w") as f:
        f.write(markdown(result))


def main() -> int:
    args = parse_args()
    import_stack()
    os.makedirs(args.out, exist_ok=True)
    if args.dry_run:
        dev, shape, args.tokens, batches = htp.make_device("sim"), TINY, min(args.tokens, 4), [1, 2]
    else:
        if not torch.cuda.is_available() or htp.cuda_device_count() == 0:
            print("SKIP: no GPU visible to torch and htp")
            return 77
        dev, shape, batches = htp.make_device("cuda"), LLAMA_8B, [int(b) for b in args.batches.split(",")]
    exec_device = torch.device("cuda", 0) if dev.backend == "cuda" else torch.device("cpu")
    args.modes = args.modes.split(",")
    t_setup = time.perf_counter()
    resident = build_on(exec_device, shape, torch.bfloat16)
    g = torch.Generator().manual_seed(7)
    ids_by_batch = {b: torch.randint(0, shape["vocab_size"], (b, args.prompt), generator=g) for b in batches}
    want, rows = {}, []
    for b, ids in ids_by_batch.items():
        want[b], secs = decode(resident, ids.to(exec_device), args.tokens, exec_device)
        if "resident" in args.modes:
            rows.append(dict(mode="resident", batch=b, seconds=secs, identical=True))
    host, weights = host_copy(resident, pin=exec_device.type == "cuda")
    del resident
    if exec_device.type == "cuda":
        torch.cuda.empty_cache()
    layers = layer_bytes(host)
    bw = h2d_bandwidth(exec_device)
    print(f"setup {time.perf_counter() - t_setup:.1f} s; decoder layers {layers / 1e9:.2f} GB; "
          f"H2D {bw / 1e9:.1f} GB/s", flush=True)
    result = dict(model="Llama-3.1-8B-shaped" if shape is LLAMA_8B else "tiny Llama", dtype="bfloat16",
                  backend=dev.backend, tokens=args.tokens, prompt=args.prompt,
                  decoder_layer_bytes=layers, h2d_bytes_per_second=bw, rows=rows)
    write_results(args, result)
    for mode, fraction, run in modes_to_run(args, host, dev, layers, ids_by_batch, exec_device,
                                             want, bw):
        restore(host, weights)
        t0 = time.perf_counter()
        try:
            if mode == args.inject_failure:
                raise RuntimeError(f"injected failure in {mode} (--inject-failure)")
            got = run()
        except Exception as e:  # reported in the mode's rows; the other modes still run
            got = [dict(mode=mode, batch=b, identical=False, error=f"{type(e).__name__}: {e}")
                   for b in batches]
        for r in got:
            if fraction is not None:
                r["budget_fraction"] = fraction
        rows += got
        write_results(args, result)
        print(f"{mode}{'' if fraction is None else f' {fraction:.0%}'}: "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    table = markdown(result)
    print(table)
    bad = [r for r in result["rows"] if not r["identical"]]
    for r in bad:
        print(f"FAIL: {r['mode']} batch {r['batch']} "
              + (f"failed: {r['error']}" if "error" in r else "gave different tokens from the resident model"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
