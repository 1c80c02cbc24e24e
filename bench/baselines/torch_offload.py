#!/usr/bin/env python3
"""The naive ways, on the same layer shapes as htp-stream-bench, for a side-by-side comparison on
one GPU: (1) a plain per-layer `.to("cuda")` before each layer's GEMMs (pageable host weights,
blocking copies), (2) accelerate's `cpu_offload` hooks, (3) everything resident (the floor).

Needs PyTorch with CUDA and accelerate (both on the GPU machines this project uses). Prints a table
and, with --json, writes {"policies": [{"name", "step_ms": {"p50", "p99", "max"}, ...}]} in the
stream bench's shape, so scripts/plot.py and docs/benchmarks.md can put them next to htp's numbers.

  python3 bench/baselines/torch_offload.py --model llama-3.1-8b --layers 16 --steps 5 --json out.json
"""
import argparse
import json
import statistics
import sys
import time

PRESETS = {  # hidden, intermediate, heads, kv_heads (facts from the published configs)
    "llama-3.1-8b": (4096, 14336, 32, 8),
    "llama-3.1-70b": (8192, 28672, 64, 8),
    "llama-3.1-405b": (16384, 53248, 128, 8),
}


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-3.1-8b", choices=sorted(PRESETS))
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--tokens", type=int, default=1, help="tokens per step (decode batch or prefill length)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--policies", default="resident,to-cuda,accelerate")
    p.add_argument("--json")
    return p.parse_args()


def main():
    args = parse()
    # Exit 77 (skipped, with the reason last) when this machine cannot run it: gpu-check reports SKIP.
    try:
        import torch
    except ImportError as e:
        print(f"torch_offload.py: cannot import torch ({e}); run it where PyTorch with CUDA is installed")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("torch_offload.py: torch sees no CUDA device; this baseline only means something on a GPU")
        sys.exit(77)
    hidden, inter, heads, kv_heads = PRESETS[args.model]
    kv = kv_heads * hidden // heads
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    shapes = [("q", hidden, hidden), ("k", hidden, kv), ("v", hidden, kv), ("o", hidden, hidden),
              ("gate", hidden, inter), ("up", hidden, inter), ("down", inter, hidden)]

    class Layer(torch.nn.Module):
        """One decoder layer's matrices; forward runs one GEMM per matrix, like htp-stream-bench.

        Built on the meta device (no memory, no initialisation), then given storage on `device`
        and filled once with random weights drawn on the GPU: PyTorch's CPU generator is serial,
        and initialising ~7 GB twice on it (Linear's own init, then normal_) takes minutes."""

        def __init__(self, device):
            super().__init__()
            with torch.device("meta"):
                self.m = torch.nn.ModuleDict({n: torch.nn.Linear(i, o, bias=False, dtype=dtype)
                                              for n, i, o in shapes})
            self.to_empty(device=device)
            for lin in self.m.values():  # random weights: zeros would run faster than real data
                w = torch.empty(lin.weight.shape, dtype=dtype, device="cuda").normal_(std=0.02)
                lin.weight.data.copy_(w)

        def forward(self, x):
            h = self.m["o"](self.m["q"](x))
            self.m["k"](x)
            self.m["v"](x)
            g = self.m["gate"](x) * self.m["up"](x)
            return x + h + self.m["down"](g)

    t_build = time.perf_counter()
    layers = [Layer("cpu") for _ in range(args.layers)]  # the one host copy, shared by both offloads
    weight_bytes = sum(p.numel() * p.element_size() for l in layers for p in l.parameters())
    print(f"torch_offload: {args.model}, {args.layers} layers, {weight_bytes / 2**30:.2f} GiB of {args.dtype} "
          f"weights, {args.tokens} token(s) per step, on {torch.cuda.get_device_name()} "
          f"(built in {time.perf_counter() - t_build:.1f} s)")
    x0 = torch.randn(args.tokens, hidden, dtype=dtype, device="cuda")

    def timed(step_fn):
        times = []
        for s in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step_fn()
            torch.cuda.synchronize()
            if s >= args.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        return {"p50": statistics.median(times), "p99": times[min(len(times) - 1, int(0.99 * len(times)))],
                "max": times[-1], "mean": statistics.fmean(times)}, times

    results = []
    wanted = args.policies.split(",")
    with torch.no_grad():
        if "resident" in wanted:
            free, _ = torch.cuda.mem_get_info()
            if weight_bytes * 1.2 < free:
                gpu = [Layer("cuda") for _ in range(args.layers)]  # no host copy at all

                def resident():
                    x = x0
                    for l in gpu:
                        x = l(x)
                step, times = timed(resident)
                results.append({"name": "all-resident (torch)", "step_ms": step, "steps_ms": times})
                del gpu
                torch.cuda.empty_cache()
        if "to-cuda" in wanted:
            from torch.func import functional_call
            cpu_params = [dict(l.named_parameters()) for l in layers]

            def to_cuda():  # the naive way: copy the layer in (blocking, pageable), run it, drop it
                x = x0
                for l, params in zip(layers, cpu_params):
                    gpu_params = {k: v.to("cuda") for k, v in params.items()}
                    x = functional_call(l, gpu_params, (x,))
                    del gpu_params
            step, times = timed(to_cuda)
            results.append({"name": "per-layer .to(cuda)", "step_ms": step, "steps_ms": times})
        if "accelerate" in wanted:
            try:
                from accelerate import cpu_offload
            except ImportError:
                print("torch_offload: accelerate is not installed; skipping its policy")
            else:
                model = torch.nn.Sequential(*layers)
                cpu_offload(model, execution_device=torch.device("cuda"))

                def accel():
                    model(x0)
                step, times = timed(accel)
                results.append({"name": "accelerate cpu_offload", "step_ms": step, "steps_ms": times})

    print(f"{'policy':28} {'p50 ms':>10} {'p99 ms':>10} {'max ms':>10}")
    for r in results:
        s = r["step_ms"]
        print(f"{r['name']:28} {s['p50']:10.2f} {s['p99']:10.2f} {s['max']:10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "torch_offload", "model": args.model, "layers": args.layers,
                       "tokens": args.tokens, "weight_bytes": weight_bytes,
                       "device": torch.cuda.get_device_name(), "policies": results}, f, indent=2)


if __name__ == "__main__":
    main()
