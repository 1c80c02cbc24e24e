#!/usr/bin/env python3
"""One training step (forward, backward, the gradients all-reduced as in data parallel) of a
Llama-3.1-8B-shaped model in bf16 with random weights, four ways, side by side in one process:

  resident     the whole model in HBM (the reference: every other mode's gradients must equal its own)
  save_on_cpu  the same, its saved tensors through torch.autograd.graph.save_on_cpu(pin_memory=True)
  htp          htp.torch.offload(model, hbm_budget=f x the decoder layers' bytes, training=True) with
               htp.torch.offload_activations(handle), at each of --budgets (default 30% and 50%)

Per mode: one warm-up step, then --steps timed steps; loss = cross-entropy on random labels (the
model's own `labels=` loss); no optimizer step. Reports the step time (CUDA-synchronised wall time,
p50), the bytes paged per step (htp: the pager's page_in_bytes + write_back_bytes, the activation
slots' write-backs included; save_on_cpu: every saved tensor's bytes to the host and back;
resident: 0), the gradients' bytes copied to the host (htp on cuda copies each paged gradient to its
host copy), and the reduction: every parameter's gradient all-reduced (torch.distributed NCCL, world
size 1) on a stream of its own as it is ready (register_post_accumulate_grad_hook). exposed = from
the end of backward's compute (an event recorded on the compute stream when loss.backward()
returns) to the end of the last reduction (an event on the reduction stream), CUDA events; total =
the sum of the reductions' own times; hidden share = 1 - exposed / total. htp on cuda copies each
paged parameter's gradient to the host inside backward (offload(training=True)), so those are
reduced on the GPU before that copy, from a gradient hook, and the compute stream waits for each:
their whole time counts as exposed (the row says how many were reduced that way).
Correctness: the first step's gradients of a sample of parameters (the embedding, the first, middle
and last layers, the final norm, lm_head) must torch.equal the resident model's ("grads_equal").

Size: --layers decoder layers of the 8B shape (default 16 of its 32: each layer is the real one, the
bytes paged per step are half the full model's), batch 1 x --seq 512. Estimate on an H100 for 16
layers: imports ~12 s, 9 GB built on the GPU ~3 s, NCCL ~2 s, resident ~2 s, save_on_cpu ~5 s
(11.5 GB of pinned buffers the first step, then ~23 GB over the link per step), the pinned host
copy ~4 s, htp 30% and 50% ~8 s each (~10 GB paged and ~7 GB of gradients to pageable host memory
per step): ~50 s. --layers 32 roughly doubles the size-bound parts (~85 s). gpu-check runs it as the
`train` set's train-step step, outside the session plan (docs/gpu.md says why).
--device sim (or auto without a GPU): htp's sim backend, a tiny Llama on the CPU, the reduction on
gloo inside each hook (counted, not timed: "reduction" says why; htp's paged weights from the
same gradient hooks as on cuda), so CI can run it.
Writes the JSON to --out FILE and a table to stdout. Exit 1 when a mode fails or its gradients
differ from the resident model's; 77 (SKIP) without torch/transformers, or without a GPU under
--device cuda.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_offload_bench as hf  # noqa: E402  (its model builders and host copy)

torch = htp = ht = dist = None  # imported by main, after --help


def parse_args() -> argparse.Namespace:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--out", required=True, help="the JSON file to write")
    a.add_argument("--device", choices=["auto", "cuda", "sim"], default="auto",
                   help="cuda (exit 77 without a GPU), sim (a tiny model on the CPU), or auto")
    a.add_argument("--layers", type=int, default=None,
                   help="decoder layers (default 16 of the 8B shape on cuda, 4 of the tiny one on sim)")
    a.add_argument("--seq", type=int, default=None, help="tokens per step (default 512; sim 32)")
    a.add_argument("--steps", type=int, default=None, help="timed steps after one warm-up (default 3; sim 2)")
    a.add_argument("--budgets", default="0.3,0.5", help="htp's HBM budgets, fractions of the layers' bytes")
    a.add_argument("--modes", default="resident,save_on_cpu,htp")
    a.add_argument("--inject-difference", default="", metavar="MODE",
                   help="change MODE's first sampled gradient before the comparison (tests that a "
                        "difference fails the run and the other modes still run)")
    args = a.parse_args()
    try:
        args.budgets = [float(x) for x in args.budgets.split(",")]
    except ValueError:
        a.error(f"--budgets {args.budgets!r}: give fractions separated by commas, e.g. 0.3,0.5")
    if not all(0 < f <= 1 for f in args.budgets):
        a.error(f"--budgets {args.budgets}: each must be in (0, 1]")
    args.modes = args.modes.split(",")
    unknown = set(args.modes) - {"resident", "save_on_cpu", "htp"}
    if unknown or "resident" not in args.modes:
        a.error(f"--modes: resident (the reference) plus any of save_on_cpu, htp; got {args.modes}")
    for name in ("layers", "seq", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            a.error(f"--{name} must be at least 1")
    return args


def import_stack() -> None:
    global torch, htp, ht, dist
    hf.import_stack()  # exits 77 without torch, transformers or htp
    torch, htp, ht = hf.torch, hf.htp, hf.ht
    import torch.distributed as dist


def sync(device) -> None:
    hf.sync(device)


def counting_save_on_cpu():
    """torch's save_on_cpu(pin_memory=True), counting the bytes it copies to the host and back and,
    of those, the parameters' (a resident model's weights are saved tensors too)."""
    class Counting(torch.autograd.graph.save_on_cpu):
        def __init__(self):
            super().__init__(pin_memory=True)
            self.bytes = self.param_bytes = 0
            pack, unpack = self.pack_hook, self.unpack_hook

            def counted_pack(t):
                n = t.numel() * t.element_size()
                self.bytes += n
                base = t._base if t._base is not None else t
                if base.is_leaf and base.requires_grad:
                    self.param_bytes += 2 * n
                return pack(t)

            def counted_unpack(packed):
                self.bytes += packed[1].numel() * packed[1].element_size()
                return unpack(packed)
            self.pack_hook, self.unpack_hook = counted_pack, counted_unpack
    return Counting()


# ---- the reduction ---------------------------------------------------------------------------------
class Reducer:
    """Each gradient all-reduced as it is ready, as data parallel does (world size 1): on cuda on
    a stream of its own, each reduction between two timed events; on the CPU (sim) at once, on
    gloo, only counted."""

    def __init__(self, device) -> None:
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.spans: list = []          # (start, end, serial) events of this step's reductions
        self.backward_end = None
        self.count = self.bytes = self.serial = 0    # this step's reductions
        self.handles: list = []

    def attach(self, params, serial=()) -> None:
        """Hooks on `params` (the model's Parameters): a reduction of each .grad once it has
        accumulated; those in `serial` (by id) are reduced from a gradient hook before the hooks
        registered after this one (htp's copy to the host), and the compute stream waits."""
        for p in params:
            if id(p) in serial:
                self.handles.append(p.register_hook(lambda g: self.launch(g, serial=True)))
            else:
                self.handles.append(p.register_post_accumulate_grad_hook(self._accumulated))

    def detach(self) -> None:
        """Removes the hooks (the next mode's reducer reduces the same Parameters)."""
        for h in self.handles:
            h.remove()
        self.handles = []

    def _accumulated(self, p) -> None:
        self.launch(p.grad)

    def launch(self, t, serial: bool = False):
        self.count += 1
        self.serial += serial
        self.bytes += t.numel() * t.element_size()
        if not self.cuda:
            dist.all_reduce(t)
            return t
        compute = torch.cuda.current_stream(t.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.stream.wait_stream(compute)
        with torch.cuda.stream(self.stream):
            start.record()
            dist.all_reduce(t, async_op=True).wait()  # the reduction stream waits for NCCL's
            end.record()
        self.spans.append((start, end, serial))
        if serial:
            compute.wait_event(end)
        return t

    def backward_done(self) -> None:
        if self.cuda:
            self.backward_end = torch.cuda.Event(enable_timing=True)
            self.backward_end.record()

    def end_step(self) -> dict:
        """This step's reduction (after a device synchronize), and a fresh start for the next."""
        row = dict(reductions=self.count, bytes=self.bytes, serial=self.serial)
        if self.cuda:
            total = sum(s.elapsed_time(e) for s, e, _ in self.spans)
            serial = sum(s.elapsed_time(e) for s, e, is_serial in self.spans if is_serial)
            tail = max(0.0, self.backward_end.elapsed_time(self.spans[-1][1])) if self.spans else 0.0
            row.update(total_ms=total, exposed_ms=serial + tail)
        self.spans, self.count, self.bytes, self.serial = [], 0, 0, 0
        return row


def reduction_summary(steps: list[dict], cuda: bool) -> dict:
    out = dict(backend="nccl" if cuda else "gloo", world_size=1,
               reductions_per_step=steps[-1]["reductions"], bytes_per_step=steps[-1]["bytes"],
               serial_reductions=steps[-1]["serial"])
    if not cuda:
        out.update(exposed_ms=None, total_ms=None, hidden_share=None,
                   reason="sim: the gradients are CPU tensors, reduced on gloo inside each hook "
                          "(nothing to overlap, no CUDA events); counted only")
        return out
    exposed = statistics.median(s["exposed_ms"] for s in steps)
    total = statistics.median(s["total_ms"] for s in steps)
    out.update(exposed_ms=exposed, total_ms=total,
               hidden_share=(1 - exposed / total) if total > 0 else None)
    return out


# ---- one mode's steps --------------------------------------------------------------------------------
def sample_names(layers: int) -> list[str]:
    last = layers - 1
    return ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
            f"model.layers.{layers // 2}.mlp.up_proj.weight", f"model.layers.{last}.mlp.down_proj.weight",
            f"model.layers.{last}.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"]


def run_steps(model, batch, device, reducer, steps, context, after_warmup, names):
    """One warm-up step and `steps` timed ones: (seconds per timed step, their reductions, the
    warm-up step's loss and sampled gradients on the CPU)."""
    ids, labels = batch
    params = dict(model.named_parameters())
    times, reductions, first = [], [], None
    for i in range(1 + steps):
        for p in params.values():
            p.grad = None
        sync(device)
        t0 = time.perf_counter()
        with context():
            loss = model(ids, labels=labels).loss
        loss.backward()
        reducer.backward_done()
        sync(device)
        secs = time.perf_counter() - t0
        red = reducer.end_step()
        if i == 0:
            first = (loss.detach().float().cpu(), {n: params[n].grad.cpu() for n in names})
            after_warmup()
        else:
            times.append(secs)
            reductions.append(red)
    for p in params.values():
        p.grad = None
    return times, reductions, first


def compare(first, want) -> dict:
    """The sampled gradients against the resident model's: equal, and a checksum of each."""
    (loss, grads), (_, want_grads) = first, want
    differ = [n for n, g in grads.items() if not torch.equal(g, want_grads[n])]
    return dict(loss=float(loss), grads_equal=not differ, grads_differ=differ,
                grad_checksums={n: float(g.double().sum()) for n, g in grads.items()})


def row_of(mode, times, reductions, cuda) -> dict:
    return dict(mode=mode, step_ms=[1e3 * t for t in times],
                step_ms_p50=1e3 * statistics.median(times),
                reduction=reduction_summary(reductions, cuda))


def run_resident(model, ctx, save_on_cpu: bool) -> dict:
    """The model in HBM; its saved tensors through save_on_cpu when asked."""
    counters = []

    def context():
        if not save_on_cpu:
            return contextlib.nullcontext()
        counters.append(counting_save_on_cpu())
        return counters[-1]
    reducer = Reducer(ctx["device"])
    reducer.attach(model.parameters())
    try:
        times, reductions, first = run_steps(model, ctx["batch"], ctx["device"], reducer,
                                             ctx["steps"], context, counters.clear, ctx["names"])
    finally:
        reducer.detach()
    row = row_of("save_on_cpu" if save_on_cpu else "resident", times, reductions,
                 ctx["device"].type == "cuda")
    n = len(times)
    row.update(bytes_paged_per_step=sum(c.bytes for c in counters) / n if save_on_cpu else 0,
               param_bytes_per_step=sum(c.param_bytes for c in counters) / n if save_on_cpu else 0,
               grad_to_host_bytes_per_step=0)
    return row, first


def run_htp(host, ctx, fraction: float) -> dict:
    """htp.torch.offload(training=True) at `fraction` of the layers' bytes, with
    offload_activations. The paged Parameters' reductions run from gradient hooks registered
    before the offload, so on cuda they come before htp's hook that copies each gradient to the
    host (on sim, the same hooks, with nothing after them)."""
    device, cuda = ctx["device"], ctx["device"].type == "cuda"
    kept = {id(p) for name, m in host.named_modules() if name in hf.KEEP for p in m.parameters()}
    paged = [p for p in host.parameters() if id(p) not in kept]
    reducer = Reducer(device)
    reducer.attach(paged, serial={id(p) for p in paged})
    budget = max(int(ctx["layer_bytes"] * fraction), 64 << 10)
    handle = ht.offload(host, hbm_budget=budget, keep=hf.KEEP, device=ctx["dev"], eviction="belady",
                        training=True)
    try:
        reducer.attach([p for p in host.parameters() if id(p) in kept])
        acts = ht.offload_activations(handle)

        def after_warmup():
            handle.pager.reset_metrics()
            acts.store.reset_counters()
        times, reductions, first = run_steps(host, ctx["batch"], device, reducer, ctx["steps"],
                                             lambda: acts, after_warmup, ctx["names"])
        m, n = handle.metrics(), len(times)
    finally:
        reducer.detach()
        handle.remove()
    row = row_of("htp", times, reductions, cuda)
    row.update(budget_fraction=fraction, budget_bytes=budget,
               # activation write-backs are part of write_back_bytes (the slots are the pager's)
               bytes_paged_per_step=(m["page_in_bytes"] + m["write_back_bytes"]) / n,
               page_in_bytes_per_step=m["page_in_bytes"] / n,
               write_back_bytes_per_step=m["write_back_bytes"] / n,
               activation_host_write_bytes_per_step=m["activation_write_back_bytes"] / n,
               activation_packed_bytes_per_step=acts.store.packed_bytes / n,
               grad_to_host_bytes_per_step=(sum(p.numel() * p.element_size() for p in paged)
                                            if cuda else 0),
               faults=m["faults"] / n, prefetch_hits=m["prefetch_hits"] / n,
               late_prefetches=m["late_prefetches"] / n)
    return row, first


def setup(args):
    """The device, the shape, the process group; exit 77 under --device cuda without a GPU."""
    gpu = torch.cuda.is_available() and htp.cuda_device_count() > 0
    if args.device == "cuda" and not gpu:
        print("SKIP: no GPU visible to torch and htp (--device cuda)")
        sys.exit(77)
    cuda = args.device == "cuda" or (args.device == "auto" and gpu)
    if args.device == "auto" and not cuda:
        print("no GPU visible to torch and htp: running on sim with a tiny model")
    dev = htp.make_device("cuda" if cuda else "sim")
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    shape = dict(hf.LLAMA_8B if cuda else hf.TINY, attn_implementation="eager")
    shape["num_hidden_layers"] = args.layers or (16 if cuda else 4)
    args.seq = args.seq or (512 if cuda else 32)
    args.steps = args.steps or (3 if cuda else 2)
    if cuda:
        torch.cuda.set_device(device)
        # Equal gradients across modes need the same kernels: deterministic ones where torch has
        # them (a warning where not), without the NaN fills of fresh memory on the timed path.
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
    store = tempfile.NamedTemporaryFile(prefix="htp-train-step-", delete=False)
    store.close()
    os.unlink(store.name)  # the file store makes it; it must not exist yet
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{store.name}",
                            rank=0, world_size=1)
    warm = torch.zeros(1, device=device)
    dist.all_reduce(warm)  # the communicator made here, not inside the first timed mode
    sync(device)
    return dev, device, shape


# ---- the run -------------------------------------------------------------------------------------------
def table(result: dict) -> str:
    lines = [f"# one training step, {result['model']}, {result['layers']} layers, batch 1 x "
             f"{result['seq']} tokens, backend {result['backend']}", "",
             "| mode | budget | step ms (p50) | paged MB/step | grads to host MB/step | "
             "reduction exposed / total ms | hidden | grads equal |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        budget = f"{r['budget_fraction']:.0%}" if "budget_fraction" in r else "-"
        if "error" in r:
            lines.append(f"| {r['mode']} | {budget} | error: {r['error'][:120]} | | | | | False |")
            continue
        red = r["reduction"]
        timed = red["total_ms"] is not None
        lines.append(
            f"| {r['mode']} | {budget} | {r['step_ms_p50']:.1f} | {r['bytes_paged_per_step'] / 1e6:.1f} | "
            f"{r['grad_to_host_bytes_per_step'] / 1e6:.1f} | "
            + (f"{red['exposed_ms']:.2f} / {red['total_ms']:.2f} | " if timed else "- | ")
            + (f"{red['hidden_share']:.0%} | " if timed and red["hidden_share"] is not None else "- | ")
            + f"{r['grads_equal']} |")
    return "\n".join(lines) + "\n"


def write(args, result: dict) -> None:
    """The JSON as it stands (after each mode: a crash keeps the rest)."""
    result["grads_equal"] = all(r.get("grads_equal", False) for r in result["rows"])
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


def run_mode(result, args, mode, fraction, run, want):
    """One mode's row (its error, if it raised), checked against the resident gradients."""
    t0 = time.perf_counter()
    try:
        if want is None and mode != "resident":
            raise RuntimeError("the resident mode failed: no gradients to compare with")
        row, first = run()
        if mode == args.inject_difference:
            name = next(iter(first[1]))
            first[1][name] = first[1][name] + 1
        want = want or first
        row.update(compare(first, want))
    except Exception as e:  # the mode's row says why; the other modes still run
        row = dict(mode=mode, grads_equal=False, error=f"{type(e).__name__}: {e}")
        if fraction is not None:
            row["budget_fraction"] = fraction
    result["rows"].append(row)
    write(args, result)
    print(f"{mode}{'' if fraction is None else f' {fraction:.0%}'}: {time.perf_counter() - t0:.1f} s",
          flush=True)
    return want


def main() -> int:
    args = parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS deterministic across streams
    import_stack()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    t_setup = time.perf_counter()
    dev, device, shape = setup(args)
    model = hf.build_on(device, shape, torch.bfloat16).train()
    g = torch.Generator().manual_seed(7)
    batch = tuple(torch.randint(0, shape["vocab_size"], (1, args.seq), generator=g).to(device)
                  for _ in range(2))
    layers = hf.layer_bytes(model)
    ctx = dict(device=device, dev=dev, batch=batch, steps=args.steps, layer_bytes=layers,
               names=sample_names(shape["num_hidden_layers"]))
    result = dict(model="Llama-3.1-8B-shaped" if device.type == "cuda" else "tiny Llama",
                  dtype="bfloat16", backend=dev.backend, layers=shape["num_hidden_layers"],
                  seq=args.seq, batch=1, timed_steps=args.steps, warmup_steps=1,
                  loss="cross-entropy on random labels", optimizer_step=False,
                  attention="eager", decoder_layer_bytes=layers, rows=[])
    print(f"setup {time.perf_counter() - t_setup:.1f} s; decoder layers {layers / 1e9:.2f} GB", flush=True)
    want = run_mode(result, args, "resident", None, lambda: run_resident(model, ctx, False), None)
    if "save_on_cpu" in args.modes:
        run_mode(result, args, "save_on_cpu", None, lambda: run_resident(model, ctx, True), want)
    if "htp" in args.modes:
        host, weights = hf.host_copy(model, pin=device.type == "cuda")
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
        for f in args.budgets:
            hf.restore(host, weights)
            for p in host.parameters():
                p.requires_grad_(True)
            run_mode(result, args, "htp", f, lambda f=f: run_htp(host.train(), ctx, f), want)
    dist.destroy_process_group()
    print(table(result))
    bad = [r for r in result["rows"] if not r.get("grads_equal", False)]
    for r in bad:
        print(f"FAIL: {r['mode']} {r.get('budget_fraction', '')}: "
              + (f"failed: {r['error']}" if "error" in r else f"gradients differ: {r['grads_differ']}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
