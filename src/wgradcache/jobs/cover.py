"""The geometry cover recomputed from measured timings: a greedy set cover, its loss, and
the ``cover:`` block of ``geometries.yaml`` that says it.

The shipped cover is modelled (tile shape against the reference layers), never measured.
Here each (layer, dtype) pair of a timings file has a best time per geometry (the fastest
of the kernels measured at that geometry: any vector width, split degree, reduction) and a
best over every measured geometry (the "full ladder": what the cache serves when it holds
every geometry the benchmark timed). A geometry *covers* a pair when its best is within
``factor`` of the pair's best. Greedy: each step takes the geometry that covers the most
pairs not yet covered (ties: the lower sum of its own times on those pairs, so the faster
of two equal covers wins; then the smaller geometry, so the result never depends on row
order), until every pair is covered or ``size`` geometries are chosen.

Greedy set cover is within ln(pairs) of the smallest cover; the exact one is NP-hard and
a timings file's pairs (a few dozen: benchmarks/README.md) do not need it. Every pair is
covered by its own fastest geometry, so each step covers at least one pair and the loop
ends.

The loss is over the layer set as measured: each distinct layer once per dtype (the
benchmark's own aggregate), total time with the cover's best geometry per pair against
the total with every geometry.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from wgradcache.files.capped import Refused
from wgradcache.files.written import refusal, write_text
from wgradcache.jobs.geometries import MAX_COVER, default_jobdata
from wgradcache.jobs.timings import Timing, Timings, TimingsError, load_timings
from wgradcache.jobs.walk import LADDER_VARIANTS
from wgradcache.model.spec import DTYPE_KEYS, geometry_tag

__all__ = ["CoverPick", "PairLoss", "CoverResult", "compute_cover", "cover_block",
           "summary_lines", "cover_from_file", "cover_of", "check_request", "pair_losses",
           "walked_losses", "totals", "write_block", "check_options", "reason",
           "DEFAULT_SIZE", "DEFAULT_FACTOR", "MAX_FACTOR"]

Geometry = tuple[int, int, int, int, int]
Pair = tuple[str, str]  # (layer, dtype)
DEFAULT_SIZE = 19  # the shipped cover's shared entries
DEFAULT_FACTOR = 1.2  # the "select within 1.2x of the best" bar
MAX_FACTOR = 100.0
REASON_CHARS = 200  # the loader's limit on a cover reason


def pair_name(p: Pair) -> str:
    return f"{p[0]} {p[1]}"


@dataclass(frozen=True)
class CoverPick:
    """One chosen geometry: the pairs it newly covered when chosen, every pair it keeps
    within the factor, and the pairs on which it is the cover's fastest geometry."""

    geometry: Geometry
    new: tuple[Pair, ...]
    covers: tuple[Pair, ...]
    fastest: tuple[Pair, ...]

    @property
    def tag(self) -> str:
        return geometry_tag(self.geometry)


@dataclass(frozen=True)
class PairLoss:
    """One pair with the cover against the full ladder. ``cover_ms`` is None when no
    chosen geometry was measured on the pair (only possible when ``size`` cut the cover)."""

    layer: str
    dtype: str
    best_ms: float
    best_geometry: Geometry
    cover_ms: float | None
    cover_geometry: Geometry | None

    @property
    def ratio(self) -> float:
        return math.inf if self.cover_ms is None else self.cover_ms / self.best_ms


def totals(pairs: Sequence[PairLoss], dtype: str | None = None) -> tuple[float, float, int]:
    """(cover ms, full-ladder ms, pairs left out: no cover time) over ``dtype``'s pairs
    (every pair when None)."""
    rows = [p for p in pairs if dtype is None or p.dtype == dtype]
    timed = [p for p in rows if p.cover_ms is not None]
    return (sum(p.cover_ms for p in timed), sum(p.best_ms for p in timed),  # type: ignore[misc]
            len(rows) - len(timed))


@dataclass(frozen=True)
class CoverResult:
    """The greedy cover and, beside it, the current cover of the geometries file (its
    entries for the target) measured on the same timings: what pasting the block changes."""

    target: str
    factor: float
    size: int
    geometries_measured: int
    picks: tuple[CoverPick, ...]
    pairs: tuple[PairLoss, ...]  # every pair, sorted by (dtype, layer)
    uncovered: tuple[PairLoss, ...]  # over the factor with the cover (``size`` reached)
    current: tuple[Geometry, ...] = ()  # the geometries file's cover for the target
    current_pairs: tuple[PairLoss, ...] = ()  # every pair with the current cover
    # What a cache walked with each cover would serve of the measured kernels: the cover's
    # geometries with every variant, every other geometry with the ladder's variants.
    walked: tuple[PairLoss, ...] = ()
    current_walked: tuple[PairLoss, ...] = ()

    def totals(self, dtype: str | None = None) -> tuple[float, float, int]:
        return totals(self.pairs, dtype)

    def dtypes(self) -> tuple[str, ...]:
        return tuple(sorted({p.dtype for p in self.pairs}))

    def worst(self) -> PairLoss:
        """The pair the cover slows most (first by (dtype, layer) on a tie)."""
        return max(self.pairs, key=lambda p: p.ratio)

    def current_within(self) -> int:
        return sum(p.ratio <= self.factor for p in self.current_pairs)

    def to_json(self) -> dict:
        cov, full, left = self.totals()
        w = self.worst()
        current = set(self.current)
        doc = {
            "target": self.target, "factor": self.factor, "size": self.size,
            "geometries_measured": self.geometries_measured, "pairs": len(self.pairs),
            "cover": [{"geometry": list(p.geometry), "tag": p.tag,
                       "in_current_cover": p.geometry in current,
                       "new": [pair_name(q) for q in p.new],
                       "covers": [pair_name(q) for q in p.covers],
                       "fastest": [pair_name(q) for q in p.fastest],
                       "reason": reason(p, self)} for p in self.picks],
            "uncovered": [_loss_json(p) for p in self.uncovered],
            "loss": {**_ratio_json(cov, full, left),
                     "per_dtype": {d: _ratio_json(*self.totals(d)) for d in self.dtypes()},
                     "worst": _loss_json(w)},
            "per_pair": [_loss_json(p) for p in self.pairs],
            "walked": _ratio_json(*totals(self.walked)),
        }
        if self.current:
            doc["current_cover"] = {
                "entries": len(self.current), "within": self.current_within(),
                "loss": {**_ratio_json(*totals(self.current_pairs)),
                         "per_dtype": {d: _ratio_json(*totals(self.current_pairs, d))
                                       for d in self.dtypes()}},
                "per_pair": [_loss_json(p) for p in self.current_pairs],
                "walked": _ratio_json(*totals(self.current_walked))}
        return doc


def _ratio_json(cov: float, full: float, left: int) -> dict:
    return {"cover_ms": cov, "full_ms": full, "ratio": cov / full if full else None,
            "pairs_without_cover_time": left}


def _loss_json(p: PairLoss) -> dict:
    return {"layer": p.layer, "dtype": p.dtype, "best_ms": p.best_ms,
            "best_geometry": list(p.best_geometry), "cover_ms": p.cover_ms,
            "cover_geometry": list(p.cover_geometry) if p.cover_geometry else None,
            "ratio": None if p.cover_ms is None else p.ratio}


def best_per_geometry(rows: Sequence[Timing]) -> dict[Pair, dict[Geometry, float]]:
    """Per pair, the fastest time at each measured geometry."""
    best: dict[Pair, dict[Geometry, float]] = {}
    for r in rows:
        per = best.setdefault((r.layer, r.dtype), {})
        if r.ms < per.get(r.geometry, math.inf):
            per[r.geometry] = r.ms
    return best


def check_options(size: int, factor: float) -> tuple[bool, str]:
    if type(size) is not int or not 1 <= size <= MAX_COVER:
        return False, f"--size {size!r}: expected an integer in [1, {MAX_COVER}]"
    if not (isinstance(factor, (int, float)) and math.isfinite(factor)
            and 1.0 <= factor <= MAX_FACTOR):
        return False, f"--factor {factor!r}: expected a number in [1, {MAX_FACTOR:g}]"
    return True, ""


def pair_losses(best: dict[Pair, dict[Geometry, float]], cover: Sequence[Geometry]
                ) -> tuple[PairLoss, ...]:
    """Every pair (by (dtype, layer)) with the fastest of ``cover`` measured on it (the
    earlier geometry of ``cover`` on a tie) against its best over every geometry."""
    out = []
    for p in sorted(best, key=_pair_order):
        per = best[p]
        measured = [g for g in cover if g in per]
        cg = min(measured, key=lambda g: per[g]) if measured else None
        bg = min(per, key=lambda g: (per[g], g))
        out.append(PairLoss(p[0], p[1], per[bg], bg, per[cg] if cg else None, cg))
    return tuple(out)


def walked_losses(rows: Sequence[Timing], cover: Sequence[Geometry]) -> tuple[PairLoss, ...]:
    """Every pair with the fastest kernel a cache walked with ``cover`` holds of those
    measured: any variant at a cover geometry, the ladder's variants (``LADDER_VARIANTS``)
    at any other. The cover decides variants, not geometries: the walk keeps every ladder
    geometry, so a cover's real cost is the lost variants (two-stage, cshuffle, async)."""
    keep = set(cover)
    best: dict[Pair, tuple[float, Geometry]] = {}
    served: dict[Pair, tuple[float, Geometry]] = {}
    for r in rows:
        p = (r.layer, r.dtype)
        best[p] = min(best.get(p, (math.inf, r.geometry)), (r.ms, r.geometry))
        if r.geometry in keep or r.variant in LADDER_VARIANTS:
            served[p] = min(served.get(p, (math.inf, r.geometry)), (r.ms, r.geometry))
    return tuple(PairLoss(p[0], p[1], best[p][0], best[p][1],
                          served[p][0] if p in served else None,
                          served[p][1] if p in served else None)
                 for p in sorted(best, key=_pair_order))


def compute_cover(timings: Timings, size: int = DEFAULT_SIZE,
                  factor: float = DEFAULT_FACTOR, current: Sequence[Geometry] = ()
                  ) -> CoverResult:
    """The greedy cover of ``timings`` (see the module docstring), and the losses of the
    ``current`` cover beside it; ValueError for a size or factor out of range."""
    ok, why = check_options(size, factor)
    if not ok:
        raise ValueError(why)
    best = best_per_geometry(timings.rows)
    full = {p: min(per.values()) for p, per in best.items()}
    geoms = sorted({g for per in best.values() for g in per})
    within = {g: {p for p, per in best.items() if g in per and per[g] <= factor * full[p]}
              for g in geoms}
    uncovered = set(best)
    chosen: list[tuple[Geometry, tuple[Pair, ...]]] = []
    while uncovered and len(chosen) < size:
        g = min((g for g in geoms if g not in dict(chosen)),
                key=lambda g: (-len(within[g] & uncovered),
                               sum(best[p][g] for p in within[g] & uncovered), g))
        new = tuple(sorted(within[g] & uncovered, key=_pair_order))
        chosen.append((g, new))
        uncovered -= set(new)
    losses = pair_losses(best, [g for g, _ in chosen])
    fastest: dict[Geometry, list[Pair]] = {g: [] for g, _ in chosen}
    for pl in losses:
        if pl.cover_geometry is not None:
            fastest[pl.cover_geometry].append((pl.layer, pl.dtype))
    picks = tuple(CoverPick(g, new, tuple(sorted(within[g], key=_pair_order)),
                            tuple(fastest[g])) for g, new in chosen)
    left = tuple(pl for pl in losses if (pl.layer, pl.dtype) in uncovered)
    cover = [g for g, _ in chosen]
    return CoverResult(timings.target, float(factor), size, len(geoms), picks, losses, left,
                       tuple(current), pair_losses(best, tuple(current)) if current else (),
                       walked_losses(timings.rows, cover),
                       walked_losses(timings.rows, tuple(current)) if current else ())


def _pair_order(p: Pair) -> tuple[str, str]:
    return (p[1], p[0])


def _names(pairs: Sequence[Pair], budget: int) -> str:
    """As many pair names as fit in ``budget`` characters, then ``, +N more``."""
    out: list[str] = []
    for i, p in enumerate(pairs):
        rest = len(pairs) - i - 1
        tail = f", +{rest} more" if rest else ""
        if len(", ".join([*out, pair_name(p)])) + len(tail) > budget:
            return (", ".join(out) + f", +{len(pairs) - i} more") if out \
                else f"+{len(pairs)} more"
        out.append(pair_name(p))
    return ", ".join(out)


def reason(pick: CoverPick, result: CoverResult) -> str:
    """The cover entry's one-line reason (at most the loader's 200 characters): what it
    serves fastest of the cover and how much it covers, as measured."""
    n = len(result.pairs)
    head = (f"{result.target} measured: within {result.factor:g}x on {len(pick.covers)} "
            f"of {n} pairs, fastest of the cover on {len(pick.fastest)}")
    if not pick.fastest:
        return head
    return f"{head}: {_names(pick.fastest, REASON_CHARS - len(head) - 2)}"


def cover_block(result: CoverResult) -> str:
    """The ``cover:`` section of ``geometries.yaml`` for the picks, in the loader's format:
    each entry its geometry, reason and the measured target (the timings say nothing
    about the other targets). It replaces the file's ``cover:`` section: the loader
    refuses a geometry listed twice."""
    cov, full, _ = result.totals()
    n, k = len(result.pairs), len(result.picks)
    lines = [
        f"# Recomputed by `wgradcache cover` from {result.target} timings: "
        f"{k} geometr{'y' if k == 1 else 'ies'}",
        f"# keep {n - len(result.uncovered)} of {n} (layer, dtype) pairs within "
        f"{result.factor:g}x of their best over {result.geometries_measured} measured",
        f"# geometries; the layer set runs {cov / full:.3f}x the time of all of them. "
        "Paste in",
        "# place of the cover: section (a geometry may be listed once).",
        "cover:",
    ]
    for p in result.picks:
        lines += [f"  - geometry: [{', '.join(map(str, p.geometry))}]",
                  f"    reason: {json.dumps(reason(p, result))}",
                  f"    targets: [{result.target}]"]
    return "\n".join(lines) + "\n"


def _loss_line(p: PairLoss) -> str:
    best = f"{geometry_tag(p.best_geometry)} {p.best_ms:.4f} ms"
    if p.cover_geometry is None:
        return f"{pair_name((p.layer, p.dtype))}: no cover geometry measured (best {best})"
    return (f"{pair_name((p.layer, p.dtype))} {p.ratio:.3f}x "
            f"({geometry_tag(p.cover_geometry)} {p.cover_ms:.4f} ms vs {best})")


def _ratio_text(pairs: Sequence[PairLoss]) -> str:
    cov, full, left = totals(pairs)
    return (f"{cov / full:.3f}x ({cov:.4f} ms vs {full:.4f} ms"
            + (f"; {left} pairs served by no measured kernel left out" if left else "") + ")")


def summary_lines(result: CoverResult, source: str) -> list[str]:
    """The report for people: the cover with the reason per entry, the loss against the
    full ladder (total and per dtype, the worst pair), and what ``size`` left uncovered."""
    n = len(result.pairs)
    k = len(result.picks)
    keep = "geometry keeps" if k == 1 else "geometries keep"
    out = [f"cover of {result.target} from {source}: {k} {keep} "
           f"{n - len(result.uncovered)} of {n} (layer, dtype) pairs within "
           f"{result.factor:g}x of their best over {result.geometries_measured} measured "
           f"geometries (--size {result.size})"]
    current = set(result.current)
    for i, p in enumerate(result.picks, 1):
        mark = " (in the current cover)" if p.geometry in current else ""
        out.append(f"{i:2d}. {p.tag}{mark}: covers {len(p.new)} new "
                   f"({', '.join(map(pair_name, p.new))}); within {result.factor:g}x on "
                   f"{len(p.covers)}; fastest of the cover on {len(p.fastest)}"
                   + (f" ({', '.join(map(pair_name, p.fastest))})" if p.fastest else ""))
    cov, full, left = result.totals()
    per = ", ".join(f"{d} {c / f:.3f}x" for d in result.dtypes()
                    for c, f, _ in [result.totals(d)] if f)
    out.append(f"against the full ladder: {cov / full:.3f}x the total time "
               f"({cov:.4f} ms vs {full:.4f} ms over {n - left} pairs"
               + (f"; {left} without a cover time left out" if left else "")
               + f"); {per}")
    out.append(f"worst: {_loss_line(result.worst())}")
    if result.current:
        ccov, cfull, cleft = totals(result.current_pairs)
        out.append(f"the current cover ({len(result.current)} {result.target} entries): "
                   f"{result.current_within()} of {n} pairs within {result.factor:g}x, "
                   f"{ccov / cfull:.3f}x the total time ({ccov:.4f} ms vs {cfull:.4f} ms over "
                   f"{n - cleft} pairs" + (f"; {cleft} without a cover time left out"
                                           if cleft else "") + ")")
    walked = [("this cover", result.walked)]
    if result.current:
        walked.append(("the current cover", result.current_walked))
    out.append("served by a cache walked with it (every variant at the cover's geometries, "
               "sync.default.{none,atomic} at the others): "
               + "; ".join(f"{name} {_ratio_text(ws)}" for name, ws in walked))
    if result.uncovered:
        out.append(f"left uncovered at --size {result.size} ({len(result.uncovered)} pairs):")
        out += [f"  {_loss_line(p)}" for p in result.uncovered]
    return out


def cover_from_file(path: str, size: int = DEFAULT_SIZE, factor: float = DEFAULT_FACTOR,
                    geometries_file: str | None = None,
                    dtypes: Sequence[str] = ()) -> CoverResult:
    """The cover of the timings file at ``path`` (its ``dtypes`` rows only, when given),
    its geometries checked against the cover rule of ``geometries_file`` (the shipped one
    when None), whose current cover for the target is measured beside it.
    ``TimingsError`` (one line) for a bad file or option."""
    check_request(size, factor, dtypes)
    jobs = default_jobdata(geometries_file)
    return cover_of(load_timings(path, jobs), jobs, size, factor, dtypes)


def check_request(size: int, factor: float, dtypes: Sequence[str]) -> None:
    """``TimingsError`` (one line) for a size, factor or dtype a cover cannot take."""
    ok, why = check_options(size, factor)
    if not ok:
        raise TimingsError(why)
    for d in dtypes:
        if d not in DTYPE_KEYS:
            raise TimingsError(f"--dtype {d!r}: valid: {', '.join(DTYPE_KEYS)}")


def cover_of(tim: Timings, jobs, size: int = DEFAULT_SIZE, factor: float = DEFAULT_FACTOR,
             dtypes: Sequence[str] = ()) -> CoverResult:
    """The cover of checked timings (its ``dtypes`` rows only, when given), with the current
    cover of ``jobs`` (a ``JobData``) for the target beside it."""
    if dtypes:
        rows = tuple(r for r in tim.rows if r.dtype in dtypes)
        if not rows:
            raise TimingsError(f"{tim.path}: no timings of {', '.join(dtypes)}")
        tim = replace(tim, rows=rows)
    return compute_cover(tim, size, factor, tuple(jobs.cover_for(tim.target)))


def write_block(result: CoverResult, out: str) -> None:
    """Write ``cover_block(result)`` to ``out``; ``TimingsError`` (one line) when the path
    is refused (a symlink, a directory) or the write fails."""
    where = out if out.isprintable() else repr(out)[1:-1]
    try:
        write_text(out, cover_block(result))
    except Refused as e:
        raise TimingsError(f"--out {where}: cannot write: {refusal(e)}") from None
