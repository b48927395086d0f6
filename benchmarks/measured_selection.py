"""How well select picks from a cache's measured timings (issue 33's goals), on the CPU.

    python3 benchmarks/measured_selection.py --cache-dir devcache/cache --target sm_90 \
        [--device-class C] [--layers layers/reference.yaml] [--train resnet50/ --train vgg16/]

Reads the device class's timings that ``wgradcache tune`` (or ``tune --import``) kept in
the cache, rows of the entries' current blobs only. Per measured (layer problem, dtype):
the best measured kernel, and the measured time of each ranking's top-1 over it:

* ``measured``: select as ``wgradcache select`` ranks now (measured, then fitted, then the
  formula). After ``tune --all`` every serving kernel is measured and this is 1.0 by
  construction; after ``tune --top N`` it shows what the unmeasured kernels cost;
* ``formula``: select without timings (the hand-set model);
* ``held out`` (with ``--train``): the cost model fitted only to the rows of the layers
  whose name starts with a ``--train`` prefix, ranking the other layers' problems with no
  measured time of them (issue 33: within 1.2x on >= 85 % of pairs, geomean <= 1.10).

A top-1 with no measured time of its own is counted apart ("pick not measured"): its ratio
is not known. Printed: per ranking, the pairs within 1.05x and 1.2x of the best and the
geometric mean of the ratios; ``--json`` for the numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default="devcache/cache")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--device-class", default=None)
    ap.add_argument("--layers", default=str(ROOT / "layers" / "reference.yaml"))
    ap.add_argument("--train", action="append", default=[],
                    help="layer-name prefix whose rows the held-out fit uses (repeatable)")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def _summary(ratios: list[float], unmeasured: int) -> dict:
    n = len(ratios)
    return {"pairs": n, "pick_not_measured": unmeasured,
            "within_1p05": sum(r <= 1.05 for r in ratios) / n if n else None,
            "within_1p2": sum(r <= 1.2 for r in ratios) / n if n else None,
            "geomean": math.exp(sum(map(math.log, ratios)) / n) if n else None}


def main() -> int:
    a = _args()
    sys.path.insert(0, str(ROOT / "src"))
    from wgradcache.cache.store import TargetCache
    from wgradcache.cache.timings import row_is_current
    from wgradcache.model.problem import ConvProblem
    from wgradcache.numerics.layers import load_layers
    from wgradcache.pipeline.fit import fit_samples, samples_of
    from wgradcache.pipeline.select import (
        Measurements,
        candidates_from_cache,
        measurements,
        select,
    )

    cache = TargetCache(a.cache_dir, a.target)
    names = defaultdict(list)  # problem -> layer names
    for ly in load_layers(a.layers):
        names[ly.problem.short()].append(ly.name)

    def trained(problem: str) -> bool:
        return any(n.startswith(tuple(a.train)) for n in names.get(problem, ()))

    all_rows = _rows(cache, a)
    held_fit: dict[str, float] = {}
    if a.train:
        blob_of = {ik: e.blob for ik, e in cache.iter_entries() if not isinstance(e, Exception)}
        fitted = fit_samples(samples_of(cache, tuple(
            r for r in all_rows if row_is_current(r, blob_of) and trained(r.problem)))[0])
        if isinstance(fitted, str):
            print(f"held out: not fitted: {fitted}", file=sys.stderr)
        else:
            held_fit = fitted.constants
    rankings: dict[str, list[float]] = defaultdict(list)
    unmeasured: dict[str, int] = defaultdict(int)
    for dtype in sorted({r.dtype for r in all_rows}):
        got = candidates_from_cache(a.cache_dir, a.target, dtype)
        m = measurements(a.cache_dir, a.target, a.device_class, got.blobs)
        for text in sorted({k[1] for k in m.times if k[2] == dtype}):
            p = ConvProblem.parse(text)
            times = {k[0]: v for k, v in m.times.items() if k[1:3] == (text, dtype)}
            best = min(times.values())
            ways = {"measured": m, "formula": Measurements()}
            if held_fit and not trained(text):
                ways["held out"] = Measurements(constants=held_fit)
            for way, meas in ways.items():
                ranked = select(a.target, p, got.specs, facts=got.facts, measured=meas)
                pick = times.get(ranked[0].key) if ranked else None
                if pick is None:
                    unmeasured[way] += 1
                else:
                    rankings[way].append(pick / best)
    out = {way: _summary(rankings[way], unmeasured[way])
           for way in dict.fromkeys([*rankings, *unmeasured])}
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'ranking':10s} {'pairs':>6s} {'<=1.05x':>8s} {'<=1.2x':>8s} {'geomean':>8s} "
          f"{'pick not measured':>18s}")
    for way, s in out.items():
        if not s["pairs"]:
            print(f"{way:10s} {0:6d} {'':>8s} {'':>8s} {'':>8s} {s['pick_not_measured']:18d}")
            continue
        print(f"{way:10s} {s['pairs']:6d} {100 * s['within_1p05']:7.1f}% "
              f"{100 * s['within_1p2']:7.1f}% {s['geomean']:8.3f} {s['pick_not_measured']:18d}")
    return 0


def _rows(cache, a):
    slug = a.device_class or (cache.timing_classes() or [None])[0]
    tf = cache.read_timings(slug) if slug else None
    return tf.rows if tf else ()


if __name__ == "__main__":
    raise SystemExit(main())
