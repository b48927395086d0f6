"""The depthwise kernels' launch shape per depthwise layer, on the CPU: CTAs and dependent
CTA steps (positions of a slice / tile_k) at the split policy's degree.

    python3 benchmarks/direct_steps.py [--target sm_90] [--dtype fp16] [--layers FILE]

A direct kernel's CTA walks its slice of N·Ho·Wo tile_k positions a step, each step's
loads waited on before the next (no ring), so its time goes with the steps when the CTAs
are few (the packed atomic's degree stops at 97 in fp16). The residency is the code
object's where ``--cache-dir`` holds the entry, else the split rule's default.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--layers", default=str(ROOT / "layers" / "reference.yaml"))
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from wgradcache.jobs import default_jobdata
    from wgradcache.jobs.walk import depthwise_jobs
    from wgradcache.model.spec import VARIANT_KEYS
    from wgradcache.model.targets import get_target
    from wgradcache.numerics.layers import load_layers
    from wgradcache.wgrad.capability import serves
    from wgradcache.wgrad.split_k import plan_split_k

    resident: dict[str, int] = {}
    if a.cache_dir:
        from wgradcache.pipeline.select import candidates_from_cache
        resident = candidates_from_cache(a.cache_dir, a.target, a.dtype).resident
    specs = [s for s in depthwise_jobs(default_jobdata(), get_target(a.target), a.dtype,
                                       a.dtype, VARIANT_KEYS) if s.reduction == "atomic"]
    print("layer", *(f"t{s.tile_m}x{s.tile_n}x{s.tile_k}v{s.vec_b}" for s in specs), sep="\t")
    for ly in load_layers(a.layers):
        p = ly.problem
        if p.groups == 1 or p.groups != p.C:
            continue
        row = []
        for s in specs:
            if not serves(s, p)[0]:
                row.append("-")
                continue
            plan = plan_split_k(s, p, resident_ctas=resident.get(s.identity_key()))
            row.append(f"{plan.grid[0] * plan.grid[1] * plan.grid[2]}c/"
                       f"{-(-plan.slice_k // s.tile_k)}s")
        print(ly.name, *row, sep="\t")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
