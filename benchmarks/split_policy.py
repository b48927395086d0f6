"""The split policy against the device: per layer of a ``device_speed.py --sweep`` file, the
policy's degree (the one select launched) against the fastest swept degree the kernel's
reduction admits (a packed 16-bit atomic's rounding cap holds), and the summary (geometric
mean of policy / best, layers within 1.1x, the worst).

    python benchmarks/split_policy.py benchmarks/results/sm90-h100-2026-12-07c/waves/sweep.json.xz
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def rows(doc: dict) -> list[dict]:
    """(layer, label, policy degree, its ms, best admitted degree, its ms) per swept layer."""
    from wgradcache.model.spec import from_label
    from wgradcache.wgrad.split_k import degree_cap

    out = []
    for r in doc["layers"]:
        sw = r.get("sweep") or {}
        ms = {int(k): v for k, v in sw.get("ms", {}).items()}
        if sw.get("policy") not in ms:
            continue
        spec = from_label(sw["label"])
        cap = degree_cap(spec.dw_dtype, spec.reduction)
        best = min((d for d in ms if d <= cap), key=ms.get)
        out.append({"layer": r["layer"], "label": sw["label"], "policy": sw["policy"],
                    "policy_ms": ms[sw["policy"]], "best": best, "best_ms": ms[best],
                    "ratio": ms[sw["policy"]] / ms[best]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", help="device_speed.py --out JSON (.xz too)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    opener = lzma.open if a.sweep.endswith(".xz") else open
    with opener(a.sweep, "rt") as f:
        got = rows(json.load(f))
    if not got:
        print("split_policy: no layer with its policy degree swept", file=sys.stderr)
        return 1
    ratios = [r["ratio"] for r in got]
    summary = {"layers": len(got),
               "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
               "within_1.1": sum(x <= 1.1 for x in ratios), "worst": max(ratios)}
    if a.json:
        print(json.dumps({"rows": got, "summary": summary}, indent=1))
        return 0
    for r in got:
        print(f"{r['layer']:28s} policy x{r['policy']:<4d} {r['policy_ms']:.4f} ms  best "
              f"x{r['best']:<4d} {r['best_ms']:.4f} ms  {r['ratio']:.2f}  {r['label']}")
    print(f"policy / best degree: geomean {summary['geomean']:.3f}, within 1.1x on "
          f"{summary['within_1.1']} of {summary['layers']} layers, worst {summary['worst']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
