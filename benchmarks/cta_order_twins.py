"""Grouped CTA order against row-major, from a cache's measured timings, on the CPU.

    python3 benchmarks/cta_order_twins.py --cache-dir devcache/cache --target sm_90 \
        [--device-class C] [--json]

select's formula and fit give a grouped-order kernel (``-g8``: ``spec.cta_group`` tile-rows
per group) and its row-major twin (the same label without ``-gN``) the same terms, so only
the device's timings tell them apart. Per pair of rows of the two kernels at one problem,
dtype and split degree (current rows only: the blob the entry names now), the ratio of the
grouped kernel's median time over its twin's (< 1: the grouped order is faster). Printed per
group size and per dtype: the pairs, the geometric mean of the ratios, the share faster
than the twin and within 2 % of it, the best and the worst pair; then per problem the same
over its pairs, and how often the problem's fastest measured kernel has a grouped order.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default="devcache/cache")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--device-class", default=None)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def _summary(pairs: list[dict]) -> dict:
    if not pairs:
        return {"pairs": 0}
    rs = [p["ratio"] for p in pairs]
    best, worst = min(pairs, key=lambda p: p["ratio"]), max(pairs, key=lambda p: p["ratio"])
    return {"pairs": len(rs), "geomean": math.exp(sum(map(math.log, rs)) / len(rs)),
            "faster": sum(r < 1.0 for r in rs) / len(rs),
            "within_2pct": sum(abs(r - 1.0) <= 0.02 for r in rs) / len(rs),
            "best": best, "worst": worst}


def twins(cache_dir: str, target: str, device_class: str | None) -> dict:
    """The grouped-vs-row-major pairs of the class's current rows, summarised (see the
    module's docstring)."""
    from wgradcache.cache.entry import Entry
    from wgradcache.cache.store import TargetCache
    from wgradcache.cache.timings import row_is_current
    from wgradcache.model.spec import KernelSpec
    from wgradcache.pipeline.select import pick_class

    cache = TargetCache(cache_dir, target)
    slug = pick_class(cache, device_class)
    tf = cache.read_timings(slug) if slug else None
    out: dict = {"device_class": slug, "rows": 0}
    if tf is None:
        return out
    specs = {ik: KernelSpec.from_dict(e.identity) for ik, e in cache.iter_entries()
             if isinstance(e, Entry)}
    blob_of = {ik: e.blob for ik, e in cache.iter_entries() if isinstance(e, Entry)}
    rows = [r for r in tf.rows if row_is_current(r, blob_of)]
    out["rows"], out["stale_rows"] = len(rows), len(tf.rows) - len(rows)
    key_of = {s.label(): ik for ik, s in specs.items()}
    time = {(r.identity_key, r.problem, r.dtype, r.degree): r.median_ms for r in rows}
    pairs, no_twin = [], 0
    for r in rows:
        s = specs[r.identity_key]
        if s.cta_group == 1:
            continue
        twin = replace(s, cta_group=1).label()
        t = time.get((key_of.get(twin, ""), r.problem, r.dtype, r.degree))
        if t is None:
            no_twin += 1
            continue
        pairs.append({"label": s.label(), "group": s.cta_group, "problem": r.problem,
                      "dtype": r.dtype, "degree": r.degree, "ms": r.median_ms,
                      "twin_ms": t, "ratio": r.median_ms / t})
    out["grouped_rows_without_twin"] = no_twin
    by: dict[str, list[dict]] = defaultdict(list)
    for p in pairs:
        by[f"g{p['group']} {p['dtype']}"].append(p)
    out["by_group"] = {k: _summary(v) for k, v in sorted(by.items())}
    per_problem: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for p in pairs:
        per_problem[(p["problem"], p["dtype"])].append(p)
    fastest: dict[tuple[str, str], tuple[float, str]] = {}
    for r in rows:
        k = (r.problem, r.dtype)
        if k not in fastest or r.median_ms < fastest[k][0]:
            fastest[k] = (r.median_ms, r.identity_key)
    out["problems"] = {
        f"{p} {d}": {**{k: v for k, v in _summary(v).items() if k not in ("best", "worst")},
                     "fastest_grouped": specs[fastest[(p, d)][1]].cta_group != 1}
        for (p, d), v in sorted(per_problem.items())}
    out["fastest_grouped"] = sum(specs[ik].cta_group != 1 for _, ik in fastest.values())
    out["measured_pairs"] = len(fastest)
    return out


def _pair(p: dict) -> str:
    return (f"{p['ratio']:.3f} ({p['label']} at {p['problem']} x{p['degree']}: "
            f"{p['ms']:.4f} vs {p['twin_ms']:.4f} ms)")


def report_lines(out: dict) -> list[str]:
    lines = [f"device class {out['device_class']}: {out['rows']} current rows "
             f"({out.get('stale_rows', 0)} stale), "
             f"{out.get('grouped_rows_without_twin', 0)} grouped rows without a twin's row"]
    for k, s in out.get("by_group", {}).items():
        if not s["pairs"]:
            continue
        lines += [f"{k}: {s['pairs']} pairs, geomean grouped/row-major {s['geomean']:.3f}, "
                  f"faster {100 * s['faster']:.1f}%, within 2% {100 * s['within_2pct']:.1f}%",
                  f"  best  {_pair(s['best'])}", f"  worst {_pair(s['worst'])}"]
    if out.get("problems"):
        lines.append(f"{'problem':34s} {'pairs':>5s} {'geomean':>8s} {'faster':>7s} "
                     "fastest kernel grouped")
        for k, s in out["problems"].items():
            lines.append(f"{k:34s} {s['pairs']:5d} {s['geomean']:8.3f} "
                         f"{100 * s['faster']:6.1f}% {'yes' if s['fastest_grouped'] else 'no'}")
        lines.append(f"fastest measured kernel has a grouped order on {out['fastest_grouped']}"
                     f" of {out['measured_pairs']} (problem, dtype) pairs")
    return lines


def main() -> int:
    a = _args()
    sys.path.insert(0, str(ROOT / "src"))
    out = twins(a.cache_dir, a.target, a.device_class)
    print(json.dumps(out, indent=1) if a.json else "\n".join(report_lines(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
