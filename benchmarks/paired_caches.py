"""The same kernels from two sm_90 caches (the code objects before and after a generator
change), timed in one run on the GPU, interleaved, with cuDNN beside.

    python3 benchmarks/paired_caches.py --before devcache/old --after devcache/new \
        [--prefix resnet50/] [--dtype fp16] [--per-layer 6] --out paired.json

Which kernels: per layer, the ``--per-layer`` fastest (kernel, split degree) rows the
``--before`` cache's timings hold for that layer's problem (``wgradcache tune`` rows of its
only device class), each launched at the degree it was timed at, from both caches: the same
label, so the same identity key, with each cache's blob. A kernel whose blob is the same in
both is timed once (its ratio is 1 by construction and counted apart). Order per layer:
cuDNN, then before / after alternating per kernel, each ``--rounds`` times (the least mean
of each kept), then cuDNN again (its faster time kept). So the two code objects meet the
same clocks and the same buffers.

Printed per layer: cuDNN's TFLOP/s, the best before and after (TFLOP/s and kernel), after
over before; then the aggregate (total FLOPs over the summed time of each layer's best) of
cuDNN, before and after, and the after/before geomean over the kernels whose blob changed.
Why not ``device_speed.py`` on each cache: select ranks each cache by its own timings, and a
changed blob's rows are stale, so the two runs would time different kernels.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="cache root whose timings pick kernels")
    ap.add_argument("--after", required=True, help="cache root of the changed code objects")
    ap.add_argument("--layers", default=str(ROOT / "layers" / "reference.yaml"))
    ap.add_argument("--prefix", default="resnet50/")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    ap.add_argument("--per-layer", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--spin", type=float, default=20.0)
    ap.add_argument("--out", required=True)
    return ap.parse_args()


def picks(cache, dtype: str, problem: str, n: int) -> list[tuple[str, int]]:
    """The ``n`` fastest (identity key, degree) of the cache's current rows of ``problem``."""
    from wgradcache.cache.entry import Entry
    from wgradcache.cache.timings import row_is_current

    classes = cache.timing_classes()
    if len(classes) != 1:
        raise SystemExit(f"paired_caches: --before has {len(classes)} device classes, not 1")
    blob_of = {ik: e.blob for ik, e in cache.iter_entries() if isinstance(e, Entry)}
    rows = [r for r in cache.read_timings(classes[0]).rows
            if r.problem == problem and r.dtype == dtype and row_is_current(r, blob_of)]
    rows.sort(key=lambda r: r.median_ms)
    return [(r.identity_key, r.degree) for r in rows[:n]]


class _Loaded:
    """``device_speed.Bench.kernel`` keyed by blob: both caches name a kernel alike."""

    def __init__(self, bench):
        self.bench, self.torch, self.session, self.loaded = bench, bench.torch, bench.session, {}

    def kernel(self, cubin: bytes, symbol: str):
        import hashlib

        key = (hashlib.sha256(cubin).hexdigest(), symbol)
        if key not in self.loaded:
            self.loaded[key] = self.session.load_kernel(cubin, symbol)
        return self.loaded[key]


def main() -> int:
    a = _args()
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    from device_speed import Bench, cudnn_call, flops, layer_inputs, our_call, spin_up

    from wgradcache.cache.store import TargetCache
    from wgradcache.model.spec import KernelSpec
    from wgradcache.numerics.layers import load_layers
    from wgradcache.pipeline.select import Candidate
    from wgradcache.wgrad.split_k import plan_split_k

    target = "sm_90"
    bench = Bench(torch, target)
    loader = _Loaded(bench)
    caches = {"before": TargetCache(a.before, target), "after": TargetCache(a.after, target)}
    seen, layers = set(), []
    for ly in load_layers(a.layers):
        if ly.name.startswith(a.prefix) and ly.problem.short() not in seen:
            seen.add(ly.problem.short())
            layers.append(ly)
    doc = {"device": bench.dev.describe(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "before": a.before, "after": a.after,
           "dtype": a.dtype, "layers": [], "kernels": []}
    spin_up(torch, a.spin)
    print(f"{'layer':30s} {'cuDNN':>7s} {'before':>7s} {'after':>7s} {'a/b':>6s}  "
          "best after", flush=True)
    for ly in layers:
        p = ly.problem
        chosen = picks(caches["before"], a.dtype, p.short(), a.per_layer)
        if not chosen:
            continue
        x, dy, w = layer_inputs(torch, p, a.dtype)
        ref = cudnn_call(torch, p, x, dy, w)
        t_cudnn = bench.time(ref, a.warmup, a.iters)
        best = {"before": None, "after": None}
        for key, degree in chosen:
            entries = {side: c.read_entry(key) for side, c in caches.items()}
            if any(e is None for e in entries.values()):
                continue
            spec = KernelSpec.from_dict(entries["before"].identity)
            plan = plan_split_k(spec, p, split_k=degree)
            cand = Candidate(spec=spec, key=key, degree=plan.degree, slice_k=plan.slice_k,
                             reduction=plan.reduction, grid=plan.grid, block=spec.block_size,
                             lds_bytes=0, workspace_bytes=plan.workspace_bytes, score=0.0)
            same = entries["before"].blob == entries["after"].blob
            sides = ("before",) if same else ("before", "after")
            dw = torch.empty_like(w)
            runs = {s: our_call(loader, caches[s], cand, p, x, dy, dw) for s in sides}
            ms = {s: math.inf for s in sides}
            for _ in range(a.rounds):
                for s in sides:
                    ms[s] = min(ms[s], bench.time(runs[s], a.warmup, a.iters))
            if same:
                ms["after"] = ms["before"]
            doc["kernels"].append({"layer": ly.name, "label": spec.label(), "degree": degree,
                                   "same_blob": same, **{f"{s}_ms": v for s, v in ms.items()}})
            for s in ("before", "after"):
                if best[s] is None or ms[s] < best[s][0]:
                    best[s] = (ms[s], spec.label())
        t_cudnn = min(t_cudnn, bench.time(ref, a.warmup, a.iters))
        if best["before"] is None:
            continue
        f = flops(p)
        row = {"layer": ly.name, "problem": p.short(), "count": ly.count, "flops": f,
               "cudnn_ms": t_cudnn, "before_ms": best["before"][0],
               "before_label": best["before"][1], "after_ms": best["after"][0],
               "after_label": best["after"][1]}
        doc["layers"].append(row)
        print(f"{ly.name:30s} {f / t_cudnn / 1e9:7.1f} {f / row['before_ms'] / 1e9:7.1f} "
              f"{f / row['after_ms'] / 1e9:7.1f} {row['after_ms'] / row['before_ms']:6.3f}  "
              f"{row['after_label']}", flush=True)
        del x, dy, w
        torch.cuda.empty_cache()
    rows = doc["layers"]
    if rows:
        tot = sum(r["flops"] for r in rows)
        agg = {s: tot / sum(r[f"{s}_ms"] for r in rows) / 1e9 for s in ("cudnn", "before",
                                                                          "after")}
        changed = [k["after_ms"] / k["before_ms"] for k in doc["kernels"] if not k["same_blob"]]
        agg["changed_kernels"] = len(changed)
        agg["same_kernels"] = len(doc["kernels"]) - len(changed)
        agg["changed_geomean_after_over_before"] = (
            math.exp(sum(map(math.log, changed)) / len(changed)) if changed else None)
        doc["aggregate"] = agg
        print(f"aggregate {a.dtype} ({len(rows)} layers): cuDNN {agg['cudnn']:.1f} TFLOP/s, "
              f"before {agg['before']:.1f} ({agg['before'] / agg['cudnn']:.2f}x), after "
              f"{agg['after']:.1f} ({agg['after'] / agg['cudnn']:.2f}x); {len(changed)} "
              f"kernels changed blob (after/before geomean "
              f"{agg['changed_geomean_after_over_before'] or float('nan'):.3f}), "
              f"{agg['same_kernels']} the same", flush=True)
    doc["when"] = time.time()
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
