"""How select's model ranks the kernels a device run measured (benchmarks/device_speed.py).

    python3 benchmarks/select_vs_measured.py benchmarks/results/sm90-h200-2026-12-03/speed.json \
        [--cache-dir devcache/cache]

Per layer and dtype the measured candidates are ranked again with the current model
(``pipeline.select.select`` over exactly the measured specs, no width pruning); its top-1's
measured time over the best measured time is "sel/best". "before" is the pick the file
records (rank 1: the model of the build that ran the benchmark). Printed per dtype: the
fraction of layers whose pick is within 1.2x of the best, and the mean sel/best. With
``--cache-dir`` the kernels that cache holds are ranked by their code objects' counts
(``select.CodeFacts``), as ``wgradcache select`` ranks a cache's entries; without it, by
the formula.

Caveat: device_speed times only select's top N (12 in the first run), so this measures the
model within that set: a kernel outside it that is faster is invisible here.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from wgradcache.jobs import default_jobdata
from wgradcache.jobs.timings import Timing, TimingsError, load_timings
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import from_label
from wgradcache.pipeline.select import CostSources, candidates_from_cache, select

WITHIN = 1.2


def _pick_now(target: str, rows: list[Timing], facts: dict) -> Timing | None:
    by_label = {r.label: r for r in rows}
    ranked = select(target, ConvProblem.parse(rows[0].problem),
                    [from_label(r.label) for r in rows], prune=False, costs=CostSources(facts))
    return by_label[ranked[0].spec.label()] if ranked else None


def _summary(ratios: list[float]) -> str:
    if not ratios:
        return "n/a"
    within = sum(r <= WITHIN for r in ratios) / len(ratios)
    mean = sum(ratios) / len(ratios)
    return f"within {WITHIN}x on {within:.0%} of layers, mean sel/best {mean:.3f}"


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--cache-dir"):
        print("usage: select_vs_measured.py SPEED_JSON [--cache-dir DIR]", file=sys.stderr)
        return 2
    try:
        tm = load_timings(argv[0], default_jobdata())
    except TimingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    facts: dict = {}
    if len(argv) == 3:
        for dtype in sorted({r.dtype for r in tm.rows}):
            facts.update(candidates_from_cache(argv[2], tm.target, dtype).facts)
    layers: dict[tuple[str, str], list[Timing]] = defaultdict(list)
    for r in tm.rows:
        layers[(r.dtype, r.layer)].append(r)
    before: dict[str, list[float]] = defaultdict(list)
    after: dict[str, list[float]] = defaultdict(list)
    for (dtype, layer), rows in sorted(layers.items()):
        best = min(r.ms for r in rows)
        ranked = [r for r in rows if r.rank]
        old = min(ranked, key=lambda r: r.rank) if ranked else None
        new = _pick_now(tm.target, rows, facts)
        if old is not None:
            before[dtype].append(old.ms / best)
        if new is not None:
            after[dtype].append(new.ms / best)
        print(f"{dtype:5s} {layer:28s} before {old.ms / best if old else float('nan'):5.2f}"
              f"  after {new.ms / best if new else float('nan'):5.2f}"
              f"  {new.label if new else '-'}")
    for dtype in sorted(set(before) | set(after)):
        print(f"{dtype}: before (recorded ranks): {_summary(before[dtype])}")
        print(f"{dtype}: after (current model):   {_summary(after[dtype])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
