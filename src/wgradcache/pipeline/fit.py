"""The cost model's constants fitted to one device class's timings (``wgradcache fit``, and
after every ``tune`` and ``tune --import``).

select's formula weighs the parts of a launch (``select.COST_TERMS``: the launch itself,
the loop's issue clocks, its LDS clocks, the epilogue, stage 2's workspace reads; the fit
adds the bytes the loads move from L2) by rates
set by hand on one device and one version of the kernels; a kernel change or another
device moves them (issue 33: 85-91 % of picks within 1.2x of the best on the H200 that
set them, 39-43 % on the H100 two days later). Here each part gets the constant, in ms
per unit, that best explains the class's measured times: linear least squares over the
terms of every current row (a row of the blob its entry names now), each row weighted by
1 / its time, so the fit minimises the *relative* error: a 20 us layer counts as much as
a 2 ms one, as a ranking needs; no constant below zero (a part of a launch costs time).
A term no row has (no two-stage kernel measured) is not fitted, and select ranks a launch
that has it by the formula instead.

The fit is stored with the timings (``cache/timings.Fit``): the constants, the residual
(RMS relative error over the rows fitted on), what it was fitted on and a digest of those
rows. Too few rows for the terms (fewer rows than terms, or fewer than ``MIN_ROWS``):
no fit, and the stored one is removed (it described other rows).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from wgradcache.cache.entry import Entry
from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import FACTOR_RANGE, Fit, TimingRow, row_is_current
from wgradcache.model.backends import backend_of
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.select import COST_TERMS, CodeFacts, cost_terms
from wgradcache.wgrad.split_k import plan_split_k

__all__ = ["FitSample", "FitResult", "fit_samples", "kernel_factors", "samples_of", "refit",
           "refit_line", "FitRequest", "fit_class", "MIN_ROWS"]

MIN_ROWS = 8
"""A fit of five constants to fewer rows says little beyond those rows."""


@dataclass(frozen=True)
class FitSample:
    """One measured launch: its terms (``select.cost_terms``), its time and its kernel's
    identity key ("": no kernel factor for it)."""

    terms: dict[str, float]
    ms: float
    key: str = ""


@dataclass(frozen=True)
class FitResult:
    constants: dict[str, float]
    residual: float  # RMS of (fitted - measured) / measured
    rows: int
    factors: dict[str, float] = field(default_factory=dict)  # Fit.factors


def kernel_factors(samples: list[FitSample], fitted: np.ndarray) -> dict[str, float]:
    """Per kernel key, the geometric mean of measured / fitted over its samples (those the
    fit gives a time > 0), within ``FACTOR_RANGE``. Why: the terms count a kernel's work,
    not how well its code runs; on the H100's rows (12-07) a kernel's factor from the other
    problems' rows took the one-out ranking from 57 % to 71 % within 1.2x of the best."""
    logs: dict[str, list[float]] = {}
    for smp, f in zip(samples, fitted, strict=True):
        if smp.key and f > 0:
            logs.setdefault(smp.key, []).append(math.log(smp.ms / f))
    lo, hi = FACTOR_RANGE  # 4 decimals: finer is the fit's own rounding, which broke ties
    return {k: round(min(hi, max(lo, math.exp(sum(v) / len(v)))), 4)
            for k, v in sorted(logs.items())}


def _nonnegative_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin |a·c − y| over c >= 0, exactly, for the few columns a cost model has: the
    unconstrained least squares on every subset of the columns (2^6 for six terms), the
    best one whose constants are all >= 0 (the constrained optimum is the unconstrained
    one on its support). Why not the unconstrained fit: a negative cost per unit of a term
    priced launches outside the rows at no time or less (the H100's 12-07 rows fitted lds
    and stage2 below zero), and the held-out ranking lost up to 12 points within 1.2x."""
    n = a.shape[1]
    best, best_r = np.zeros(n), float(y @ y)
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = a[:, list(cols)]
            c, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if (c < 0).any():
                continue
            r = y - sub @ c
            if (res := float(r @ r)) < best_r:
                best_r, best = res, np.zeros(n)
                best[list(cols)] = c
    return best


def fit_samples(samples: list[FitSample]) -> FitResult | str:
    """Least squares of ms over the terms, weighted by 1/ms, every constant >= 0
    (``_nonnegative_lstsq``); the reason when there are too few samples for the terms that
    occur."""
    used = [t for t in COST_TERMS if any(s.terms.get(t) for s in samples)]
    if len(samples) < max(MIN_ROWS, len(used) + 1):
        return (f"{len(samples)} current row(s), too few to fit {len(used)} constants "
                f"(at least {max(MIN_ROWS, len(used) + 1)})")
    a = np.array([[s.terms.get(t, 0.0) for t in used] for s in samples], dtype=np.float64)
    y = np.array([s.ms for s in samples], dtype=np.float64)
    w = 1.0 / y
    scale = np.abs(a).max(axis=0)  # columns differ by 10^6: scale them for the solver
    scale[scale == 0] = 1.0
    coef = _nonnegative_lstsq(a * w[:, None] / scale, y * w) / scale
    fitted = a @ coef
    rel = (fitted - y) / y
    return FitResult({t: float(c) for t, c in zip(used, coef, strict=True)},
                     float(np.sqrt(np.mean(rel * rel))), len(samples),
                     kernel_factors(samples, fitted))


def samples_of(cache: TargetCache, rows: tuple[TimingRow, ...]
             ) -> tuple[list[FitSample], list[TimingRow]]:
    """The samples of the rows whose kernel the cache holds with the blob they timed."""
    entries = {ik: e for ik, e in cache.iter_entries() if isinstance(e, Entry)}
    blob_of = {ik: e.blob for ik, e in entries.items()}
    out, used = [], []
    specs: dict[str, tuple[KernelSpec, CodeFacts | None, int | None]] = {}
    backend = backend_of(cache.target)
    for r in rows:
        if not row_is_current(r, blob_of):
            continue
        if r.identity_key not in specs:
            e = entries[r.identity_key]
            specs[r.identity_key] = (KernelSpec.from_dict(e.identity), CodeFacts.from_isa(e.isa),
                                     backend.resident_ctas(e.code_object, cache.target))
        spec, facts, resident = specs[r.identity_key]
        problem = ConvProblem.parse(r.problem)
        try:
            plan = plan_split_k(spec, problem, split_k=r.degree)
        except ValueError:  # a degree the kernel cannot run (import checks; a copy may not)
            continue
        out.append(FitSample(cost_terms(spec, problem, plan.slice_k, plan.grid, facts,
                                        resident), r.median_ms, r.identity_key))
        used.append(r)
    return out, used


def _digest(rows: list[TimingRow]) -> str:
    h = hashlib.sha256()
    for r in sorted(rows, key=lambda r: (r.identity_key, r.blob, r.problem, r.dtype,
                                         r.degree)):
        h.update(f"{r.identity_key}{r.blob}{r.problem}{r.dtype}{r.degree}"
                 f"{r.median_ms!r}\0".encode())
    return h.hexdigest()


def refit(cache: TargetCache, slug: str, now: float | None = None) -> Fit | str:
    """Fit the class's current rows and store the fit with them (under the writer lock);
    the reason (and no stored fit) when there are too few."""
    with cache.lock():
        tf = cache.read_timings(slug)
        if tf is None:
            return f"no timings of {slug}"
        samples, used = samples_of(cache, tf.rows)
        got = fit_samples(samples)
        fit = None if isinstance(got, str) else Fit(
            got.constants, got.residual, got.rows, len({r.identity_key for r in used}),
            len({r.problem for r in used}), _digest(used),
            time.time() if now is None else now, got.factors)
        if fit != tf.fit:
            cache.write_timings(replace(tf, fit=fit))
    return got if isinstance(got, str) else fit  # type: ignore[return-value]


def refit_line(cache: TargetCache, slug: str) -> str:
    """``refit`` in one line, for the commands that refit after writing rows."""
    got = refit(cache, slug)
    if isinstance(got, str):
        return f"not fitted: {got}"
    return (f"fitted on {got.rows} rows ({got.kernels} kernels, {got.problems} problems), "
            f"RMS relative residual {got.residual:.3f}")


@dataclass(frozen=True)
class FitRequest:
    target: str
    cache_dir: str = "cache"
    device_class: str | None = None  # None: the cache's only class


def fit_class(req: FitRequest) -> tuple[str, Fit | str]:
    """``wgradcache fit``: (the class, its new fit or why none). DeviceClassError when the
    class is not the cache's or several are and none was named."""
    from wgradcache.pipeline.select import DeviceClassError, pick_class

    cache = TargetCache(req.cache_dir, req.target)
    slug = pick_class(cache, req.device_class)
    if slug is None:
        raise DeviceClassError(f"the {req.target} cache has timings of 0 device classes: "
                               "nothing to fit (`wgradcache tune` measures, `tune --import` "
                               "takes timings measured elsewhere)")
    return slug, refit(cache, slug)
