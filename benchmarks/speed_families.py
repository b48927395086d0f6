"""What the larger tiles bought, from one ``device_speed.py --out`` run (no device needed).

    python benchmarks/speed_families.py speed.json [speed2.json ...]

Per dtype: the aggregate TFLOP/s of cuDNN, of the best kernel over every timed candidate,
of the best kernel of the earlier ladder alone (CTA tiles <= 128 and <= 64 accumulators per
lane: the geometries the walk had before sm_90 got its own ladder) and of select's pick, all
from the same run, so the ratios compare kernels timed side by side. Per layer the two bests
and which family won. With ``--sweep`` rows: per layer the policy's split degree, the
measured best degree and the time the policy loses (policy ms / best ms).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

_GEOM = re.compile(r"-t(\d+)x(\d+)x(\d+)-w(\d+)x(\d+)-")


def earlier_ladder(label: str) -> bool:
    """A geometry of the walk before 2026-12-06: tiles <= 128, <= 64 accumulators a lane."""
    tm, tn, _, wm, wn = (int(v) for v in _GEOM.search(label).groups())
    return max(tm, tn) <= 128 and (tm // wm) * (tn // wn) // 32 <= 64


def summarise(doc: dict) -> list[str]:
    out = [f"device: {doc.get('device')}"]
    by: dict[tuple[str, str], list[dict]] = {}
    for t in doc["timings"]:
        by.setdefault((t["layer"], t["dtype"]), []).append(t)
    for dtype in dict.fromkeys(r["dtype"] for r in doc["layers"]):
        rows = [r for r in doc["layers"] if r["dtype"] == dtype and "best_ms" in r]
        tot = {"flops": 0.0, "cudnn": 0.0, "best": 0.0, "old": 0.0, "select": 0.0}
        new_wins = 0
        out.append(f"== {dtype}")
        out.append(f"{'layer':34s} {'cuDNN':>7s} {'old':>7s} {'all':>7s} {'all/old':>7s} "
                   f"{'all/cuDNN':>9s}  best kernel")
        for r in rows:
            ts = by[(r["layer"], dtype)]
            old = [t for t in ts if earlier_ladder(t["label"])]
            if not old:
                continue
            best = min(ts, key=lambda t: t["ms"])
            best_old = min(old, key=lambda t: t["ms"])
            new_wins += not earlier_ladder(best["label"])
            tot["flops"] += r["flops"]
            tot["cudnn"] += r["cudnn_ms"]
            tot["best"] += best["ms"]
            tot["old"] += best_old["ms"]
            tot["select"] += r["select_ms"]
            f = r["flops"] / 1e9
            out.append(f"{r['layer']:34s} {f / r['cudnn_ms']:7.1f} {f / best_old['ms']:7.1f} "
                       f"{f / best['ms']:7.1f} {best_old['ms'] / best['ms']:7.2f} "
                       f"{r['cudnn_ms'] / best['ms']:9.2f}  {best['label']}")
        if not tot["flops"]:
            continue
        tf = {k: tot["flops"] / v / 1e9 for k, v in tot.items() if k != "flops"}
        out.append(f"aggregate {dtype}: cuDNN {tf['cudnn']:.1f} TFLOP/s; best of the earlier "
                   f"ladder {tf['old']:.1f} ({tf['old'] / tf['cudnn']:.2f}x cuDNN); best of "
                   f"all {tf['best']:.1f} ({tf['best'] / tf['cudnn']:.2f}x cuDNN, "
                   f"{tf['best'] / tf['old']:.2f}x the earlier ladder); select's pick "
                   f"{tf['select']:.1f} ({tf['select'] / tf['cudnn']:.2f}x); a new geometry "
                   f"is the best on {new_wins} of {len(rows)} layers")
        sweeps = [r for r in rows if r.get("sweep", {}).get("ms")]
        if sweeps:
            out.append(f"split degree sweep ({dtype}): layer, kernel, policy, best, "
                       "policy ms / best ms")
            losses = []
            for r in sweeps:
                sw = r["sweep"]
                ms = {int(k): v for k, v in sw["ms"].items()}
                best_d = min(ms, key=ms.get)
                pol = ms.get(sw["policy"])
                if pol is None:  # a run before device_speed.py swept the policy's degree
                    out.append(f"  {r['layer']:32s} {sw['label']}: x{sw['policy']} not "
                               f"timed, best x{best_d}")
                    continue
                loss = pol / ms[best_d]
                losses.append(loss)
                out.append(f"  {r['layer']:32s} {sw['label']}: x{sw['policy']} vs "
                           f"x{best_d}: {loss:.2f}")
            if losses:
                out.append(f"  policy within 1.1x of the best degree on "
                           f"{sum(x <= 1.1 for x in losses)} of {len(losses)} layers; "
                           f"median loss {statistics.median(losses):.2f}x")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for path in argv:
        print("\n".join(summarise(json.loads(Path(path).read_text()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
