"""Cached sm_90 wgrad kernels against cuDNN on the GPU: TFLOP/s per layer, ratios, aggregate.

Run on a machine with an sm_90 GPU, PyTorch (with cuDNN) and cuda-bindings, from the repo
root with ``PYTHONPATH=src``:

    python3 benchmarks/device_speed.py --cache-dir devcache/cache --out speed.json

Layer set: the ResNet-50 v1.5 conv layers at batch 32 of ``layers/reference.yaml``
(``--prefix resnet50/``; each distinct layer once, as the issue's cuDNN baseline), in fp16
and bf16 (dW of the same type). Per layer and dtype:

* cuDNN: ``torch.ops.aten.convolution_backward`` with only the weight gradient
  (``output_mask=[False, True, False]``), X and dY channels-last, timed with CUDA events
  after warm-up: a CUDA graph of ``--iters`` calls, the median of 5 replays (``--eager``:
  the mean of ``--iters`` calls from the host, as before 2026-12-07);
* ours: ``select``'s ranking of the cached kernels that serve the layer; its top
  ``--top`` candidates are timed the same way, each launch with what its contract needs
  (dW zeroed before an atomic split-K launch, the workspace zeroed and stage 2 after a
  two-stage one). Buffers are PyTorch's (NHWC X, NHWK dY and KYXC dW are our layouts), the
  arguments are ``runtime/abi.py``'s packing, the launches go to PyTorch's stream through
  ``runtime/cuda.py``. The best of them is "best measured"; select's pick is its rank 1.
  The best kernel's dW is compared with cuDNN's (peak-normalised error, recorded).

Printed: per layer the TFLOP/s of cuDNN, select's pick and the best measured kernel, the
ratios to cuDNN, select's pick's measured rank; then the aggregate (total FLOPs over total
time of the layer set) and how often select's pick is within 1.2x of the best. The JSON
(``--out``) holds every measured time, per (layer, dtype, kernel): what ``wgradcache
cover --timings`` reads.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def flops(p) -> float:
    """2 M N K of the wgrad GEMM over all groups."""
    return 2.0 * p.wg_M * p.wg_N * p.wg_K * p.groups


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default="devcache/cache")
    ap.add_argument("--layers", default=str(ROOT / "layers" / "reference.yaml"))
    ap.add_argument("--prefix", default="resnet50/")
    ap.add_argument("--dtype", action="append", choices=["fp16", "bf16"])
    ap.add_argument("--top", type=int, default=8, help="select's candidates timed per layer")
    ap.add_argument("--include", default="",
                    help="also time, per layer, the best-ranked serving kernel of each geometry "
                         "and reduction "
                         "whose label matches this regex (e.g. new tiles select's model has "
                         "not learnt), at most --include-top of them")
    ap.add_argument("--include-top", type=int, default=12)
    ap.add_argument("--sweep", default="",
                    help="comma-separated split degrees: time the layer's best split-K kernel "
                         "at each and at the policy's own degree (the policy's degree against "
                         "the measured best degree)")
    ap.add_argument("--eager", action="store_true",
                    help="time calls launched from the host between two events, as before "
                         "2026-12-07 (times the host for short kernels), not graph replays")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--spin", type=float, default=30.0,
                    help="seconds of GPU work before timing, so clocks are up")
    ap.add_argument("--limit", type=int, default=0, help="first N layers only (0: all)")
    ap.add_argument("--layer", action="append", help="only these layers (repeatable)")
    ap.add_argument("--out", required=True, help="JSON of the measured timings")
    return ap.parse_args()


class Bench:
    """One device, a PyTorch stream of the run's own (every torch op and our launches on
    it), our launches through the driver API."""

    def __init__(self, torch, target: str, graphs: bool = True):
        from wgradcache.runtime.cuda import CudaSession, device_for

        dev, why = device_for(target)
        if dev is None:
            raise SystemExit(f"device_speed: no {target} device: {why}")
        self.torch = torch
        self.dev = dev
        torch.cuda.init()
        self.tstream = torch.cuda.Stream()  # not the NULL stream: graphs capture it
        torch.cuda.set_stream(self.tstream)
        self.stream = self.tstream.cuda_stream
        self.session = CudaSession(dev, stream=self.stream).__enter__()
        self.loaded: dict[str, object] = {}
        self.graphs = graphs
        self.fallbacks = 0  # calls timed from the host because their capture failed

    def kernel(self, cubin: bytes, symbol: str):
        if symbol not in self.loaded:
            self.loaded[symbol] = self.session.load_kernel(cubin, symbol)
        return self.loaded[symbol]

    def time(self, fn, warmup: int, iters: int) -> float:
        """Milliseconds of one ``fn()`` after ``warmup`` calls: with graphs (the default)
        the median of 5 replays of a graph of ``iters`` calls, over ``iters``; else the mean
        of ``iters`` calls launched from the host between two events, which times the host
        for a call shorter than its host work (pipeline/tune.py's docstring: 28-62 us
        pointwise layers all measured 57-60 us in one run)."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        if self.graphs:
            try:
                return self._replayed(fn, iters)
            except Exception as e:  # said, counted, and timed the other way
                self.fallbacks += 1
                print(f"  graph capture failed ({type(e).__name__}: {e}); timed from the host",
                      flush=True)
                torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters

    def _replayed(self, fn, iters: int) -> float:
        from wgradcache.runtime.timing import torch_graph_samples

        return torch_graph_samples(self.torch, self.tstream, fn, 1, 5, iters)[2]


def spin_up(torch, seconds: float) -> None:
    """Keep the GPU busy for ``seconds``: an idle H200 sits at 345 MHz and the first layers'
    timings (cuDNN's, which come first) would otherwise be taken while the clock ramps.
    30 s, not 3: on 12-04 the first run after the machine started, with 3 s, measured
    cuDNN at 104-137 TFLOP/s against 155-180 in the runs after it, and select's pick within
    1.2x of the best on 67-76 % of layers against 83-91 %; a first run with 30 s: cuDNN
    155, select 87 %."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(8):
            a @ a
        torch.cuda.synchronize()


def _torch_dtype(torch, name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def layer_inputs(torch, p, dtype):
    """X (N, C, H, W) and dY (N, K, Ho, Wo) channels-last, weight (K, C/g, Y, X) likewise."""
    g = torch.Generator(device="cuda").manual_seed(0)
    td = _torch_dtype(torch, dtype)
    x = torch.randn(p.N, p.C, p.H, p.W, device="cuda", generator=g).to(td)
    dy = torch.randn(p.N, p.K, p.Ho, p.Wo, device="cuda", generator=g).to(td)
    w = torch.zeros(p.K, p.cpg, p.Y, p.X, device="cuda", dtype=td)
    cl = torch.channels_last
    return (x.contiguous(memory_format=cl), dy.contiguous(memory_format=cl),
            w.contiguous(memory_format=cl))


def cudnn_call(torch, p, x, dy, w):
    def run():
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, [p.stride] * 2, [p.pad] * 2, [p.dilation] * 2, False, [0, 0],
            p.groups, [False, True, False])[1]
    return run


def our_call(bench, cache, cand, p, x, dy, dw):
    """A closure launching one candidate on (x, dy) into dw (PyTorch tensors)."""
    from wgradcache.model.spec import dynamic_lds_bytes
    from wgradcache.runtime import LaunchDims
    from wgradcache.runtime.launch import stage2_code
    from wgradcache.wgrad.abi import (
        STAGE2_ARGS,
        STAGE2_BLOCK,
        WGRAD_ARGS,
        kernarg_layout,
        pack,
        stage2_values,
        wgrad_values,
    )
    from wgradcache.wgrad.kernel import kernel_symbol
    from wgradcache.wgrad.stage2 import stage2_grid

    torch = bench.torch
    spec = cand.spec
    entry = cache.read_entry(spec.identity_key())
    k1 = bench.kernel(cache.read_blob(entry.blob), entry.symbol or kernel_symbol(spec))
    ws = None
    two = cand.reduction == "two_stage"
    if two:
        ws = torch.zeros(p.groups * spec.ws_replicas * p.wg_M * p.wg_N, device="cuda",
                         dtype=torch.float32)
        s2 = stage2_code(cache, spec.dw_dtype, spec.ws_replicas)
        k2 = bench.kernel(s2.hsaco, s2.symbol)
    ptr = {"x": x.data_ptr(), "dy": dy.data_ptr(), "dw": dw.data_ptr(),
           "ws": ws.data_ptr() if ws is not None else 0}
    vals = wgrad_values(p, spec, degree=cand.degree, slice_k=cand.slice_k, pointers=ptr)
    args1 = pack(WGRAD_ARGS, vals)
    off1 = tuple(o for _, o, _ in kernarg_layout(WGRAD_ARGS))
    if two:
        v2 = stage2_values(p, spec.dw_dtype, spec.ws_replicas, pointers=ptr)
        args2 = pack(STAGE2_ARGS, v2)
        off2 = tuple(o for _, o, _ in kernarg_layout(STAGE2_ARGS))
        grid2 = stage2_grid(v2["total_elems"])
    s = bench.session
    shared = dynamic_lds_bytes(spec)  # past 48 KB: the opt-in and the size at launch

    def run():
        if cand.reduction == "atomic":
            dw.zero_()
        if two:
            ws.zero_()
        s.launch(k1, LaunchDims(cand.grid, spec.block_size, shared), args1, offsets=off1)
        if two:
            s.launch(k2, LaunchDims(grid2, STAGE2_BLOCK), args2, offsets=off2)
    return run


def sweep_set(text: str, policy: int) -> list[int]:
    """The degrees a sweep times: ``--sweep``'s and the policy's own, ascending, once each.
    Without the policy's degree its loss against the best is not known (a policy degree of
    93 among 1, 2, 4, ..., 128 read as nan in speed_families.py's report)."""
    return sorted({int(v) for v in text.split(",") if v.strip()} | {policy})


def sweep_degrees(bench, cache, ranked, measured, p, x, dy, w, a) -> dict:
    """The fastest measured split-K kernel of a layer at each degree of ``sweep_set``:
    {"label", "policy": the degree select gave it, "ms": {degree run: ms}, "best"}."""
    import dataclasses

    from wgradcache.wgrad.split_k import plan_split_k

    split = [m for m in sorted(measured, key=lambda m: m["ms"]) if m["reduction"] != "none"]
    if not split:
        return {}
    cand = next(c for c in ranked if c.spec.label() == split[0]["label"])
    out = {"label": cand.spec.label(), "policy": cand.degree, "ms": {}}
    for asked in sweep_set(a.sweep, cand.degree):
        try:
            plan = plan_split_k(cand.spec, p, split_k=asked)
        except ValueError:
            continue
        d = plan.degree  # the degree that runs (an override past a cap moves)
        if d in out["ms"]:
            continue
        c = dataclasses.replace(cand, degree=plan.degree, slice_k=plan.slice_k,
                                grid=plan.grid, reduction=plan.reduction)
        dw = bench.torch.empty_like(w)
        try:
            out["ms"][d] = bench.time(our_call(bench, cache, c, p, x, dy, dw), a.warmup,
                                      a.iters)
        except Exception as e:  # a launch failure is a result
            print(f"  sweep {cand.spec.label()} x{d}: {type(e).__name__}: {e}", flush=True)
    if out["ms"]:
        out["best"] = min(out["ms"], key=out["ms"].get)
        print(f"  sweep {cand.spec.label()}: policy x{cand.degree}, best x{out['best']} "
              + " ".join(f"x{d}:{ms:.3f}" for d, ms in out["ms"].items()), flush=True)
    return out


def main() -> int:
    a = _args()
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np
    import torch

    from wgradcache.cache.store import TargetCache
    from wgradcache.numerics.layers import load_layers
    from wgradcache.pipeline.select import candidates_from_cache, select

    target = "sm_90"
    bench = Bench(torch, target, graphs=not a.eager)
    cache = TargetCache(a.cache_dir, target)
    layers = [ly for ly in load_layers(a.layers) if ly.name.startswith(a.prefix)]
    seen, distinct = set(), []
    for ly in layers:  # each distinct problem once
        if ly.problem.short() not in seen:
            seen.add(ly.problem.short())
            distinct.append(ly)
    if a.layer:
        distinct = [ly for ly in distinct if ly.name in a.layer]
    if a.limit:
        distinct = distinct[:a.limit]
    dtypes = a.dtype or ["fp16", "bf16"]
    doc = {"device": bench.dev.describe(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "cache_dir": a.cache_dir,
           "timing": "eager" if a.eager else "graph",
           "warmup": a.warmup, "iters": a.iters, "top": a.top, "layers": [],
           "timings": [], "aggregate": {}}
    spin_up(torch, a.spin)
    t_start = time.time()
    for dtype in dtypes:
        got = candidates_from_cache(a.cache_dir, target, dtype)
        specs, skipped = got.specs, got.skipped
        print(f"== {dtype}: {len(specs)} cached kernels"
              + (f", {len(skipped)} skipped (not servable)" if skipped else ""), flush=True)
        print(f"{'layer':34s} {'cuDNN':>7s} {'select':>7s} {'best':>7s} {'best/cuDNN':>10s} "
              f"{'sel/best':>8s} {'sel rank':>8s}  best kernel", flush=True)
        for ly in distinct:
            p = ly.problem
            x, dy, w = layer_inputs(torch, p, dtype)
            f = flops(p)
            ref = cudnn_call(torch, p, x, dy, w)
            t_cudnn = bench.time(ref, a.warmup, a.iters)
            dw_ref = ref().float()
            everything = select(target, p, specs, costs=got.costs())
            ranked = everything[:a.top]
            if a.include:  # the first-ranked serving kernel of each matching geometry
                pat, seen = re.compile(a.include), {c.spec.label() for c in ranked}
                first: dict = {}
                for c in everything:
                    kind = (c.spec.geometry, c.reduction)
                    if pat.search(c.spec.label()) and kind not in first:
                        first[kind] = c
                ranked += [c for c in list(first.values())[:a.include_top]
                           if c.spec.label() not in seen]
            measured = []
            for rank, cand in enumerate(ranked, 1):
                dw = torch.empty_like(w)
                try:
                    run = our_call(bench, cache, cand, p, x, dy, dw)
                    ms = bench.time(run, a.warmup, a.iters)
                except Exception as e:  # a launch failure is a result, not the end
                    print(f"  {cand.spec.label()}: {type(e).__name__}: {e}", flush=True)
                    continue
                measured.append({"rank": rank, "label": cand.spec.label(),
                                 "geometry": list(cand.spec.geometry), "split_k": cand.degree,
                                 "reduction": cand.reduction, "ms": ms,
                                 "tflops": f / ms / 1e9, "dw": dw})
            # cuDNN again after the candidates, its faster time kept: fair to cuDNN
            t_cudnn = min(t_cudnn, bench.time(ref, a.warmup, a.iters))
            row = {"layer": ly.name, "problem": p.short(), "dtype": dtype, "count": ly.count,
                   "flops": f, "cudnn_ms": t_cudnn, "cudnn_tflops": f / t_cudnn / 1e9,
                   "candidates": len(ranked)}
            if measured:
                best = min(measured, key=lambda m: m["ms"])
                pick = next(m for m in measured if m["rank"] == min(x["rank"] for x in measured))
                order = sorted(measured, key=lambda m: m["ms"])
                err = float((best["dw"].float() - dw_ref).abs().max() /
                            max(float(dw_ref.abs().max()), 1e-30))
                row.update(best_label=best["label"], best_ms=best["ms"],
                           best_tflops=best["tflops"], best_vs_cudnn=t_cudnn / best["ms"],
                           select_label=pick["label"], select_ms=pick["ms"],
                           select_tflops=pick["tflops"], select_vs_best=pick["ms"] / best["ms"],
                           select_measured_rank=order.index(pick) + 1,
                           best_select_rank=best["rank"], best_error_vs_cudnn=err)
                print(f"{ly.name:34s} {row['cudnn_tflops']:7.1f} {pick['tflops']:7.1f} "
                      f"{best['tflops']:7.1f} {row['best_vs_cudnn']:10.2f} "
                      f"{row['select_vs_best']:8.2f} {row['select_measured_rank']:8d}  "
                      f"{best['label']} (err {err:.1e})", flush=True)
            else:
                print(f"{ly.name:34s} {row['cudnn_tflops']:7.1f}  no cached kernel ran",
                      flush=True)
            if a.sweep and measured:
                row["sweep"] = sweep_degrees(bench, cache, ranked, measured, p, x, dy, w, a)
            for m in measured:
                doc["timings"].append({"layer": ly.name, "problem": p.short(), "dtype": dtype,
                                       **{k: v for k, v in m.items() if k != "dw"}})
            doc["layers"].append(row)
            del x, dy, w, measured
            torch.cuda.empty_cache()
        rows = [r for r in doc["layers"] if r["dtype"] == dtype and "best_ms" in r]
        if rows:
            tot_f = sum(r["flops"] for r in rows)
            agg = {
                "layers": len(rows),
                "cudnn_tflops": tot_f / sum(r["cudnn_ms"] for r in rows) / 1e9,
                "best_tflops": tot_f / sum(r["best_ms"] for r in rows) / 1e9,
                "select_tflops": tot_f / sum(r["select_ms"] for r in rows) / 1e9,
                "best_layer_ratio": max(r["best_vs_cudnn"] for r in rows),
                "median_layer_ratio": float(np.median([r["best_vs_cudnn"] for r in rows])),
                "select_within_1p2": sum(r["select_vs_best"] <= 1.2 for r in rows) / len(rows),
            }
            agg["best_vs_cudnn"] = agg["best_tflops"] / agg["cudnn_tflops"]
            agg["select_vs_cudnn"] = agg["select_tflops"] / agg["cudnn_tflops"]
            doc["aggregate"][dtype] = agg
            print(f"aggregate {dtype}: cuDNN {agg['cudnn_tflops']:.1f} TFLOP/s, best cached "
                  f"{agg['best_tflops']:.1f} ({agg['best_vs_cudnn']:.2f}x), select's pick "
                  f"{agg['select_tflops']:.1f} ({agg['select_vs_cudnn']:.2f}x); best layer "
                  f"ratio {agg['best_layer_ratio']:.2f}; select within 1.2x of best on "
                  f"{100 * agg['select_within_1p2']:.0f}% of layers", flush=True)
        if bench.fallbacks:
            doc["timing"] = "eager"
        Path(a.out).write_text(json.dumps(doc, indent=1))  # after each dtype: partial results
    doc["seconds"] = time.time() - t_start
    if bench.fallbacks:  # a file that says graph must hold graph-timed rows only
        doc["timing"] = "eager"
        print(f"{bench.fallbacks} calls timed from the host (capture failed): the file says "
              "timing eager", flush=True)
    Path(a.out).write_text(json.dumps(doc, indent=1))
    bench.session.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
