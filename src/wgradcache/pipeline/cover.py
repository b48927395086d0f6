"""``wgradcache cover --from-cache``: the geometry cover recomputed from the timings the
cache keeps (``tune``, ``tune --import``) instead of a benchmark's file.

A device class's current rows (of the blob each entry names now; a stale row is no
kernel's time) become the cover's ``jobs.timings.Timing`` rows: the entry's spec gives the
label, geometry and variant, the row its time. The cache's rows name problems, not layers,
so a pair is (problem, dtype): each distinct problem once, as ``tune`` times it. Every
measured kernel is a row, ladder geometries too; a row at a geometry the geometries file's
cover rule refuses (it could not be written as a cover entry) is left out of the cover and
counted (``CachedCover.left_out``), never silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgradcache.cache.entry import Entry
from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import row_is_current
from wgradcache.jobs.cover import (
    DEFAULT_FACTOR,
    DEFAULT_SIZE,
    CoverResult,
    check_request,
    cover_of,
)
from wgradcache.jobs.geometries import default_jobdata
from wgradcache.jobs.timings import Timing, Timings, TimingsError
from wgradcache.model.spec import KernelSpec

__all__ = ["CoverFromCache", "CachedCover", "cover_from_cache"]


@dataclass(frozen=True)
class CoverFromCache:
    target: str
    cache_dir: str = "cache"
    device_class: str | None = None  # None: the cache's only class
    size: int = DEFAULT_SIZE
    factor: float = DEFAULT_FACTOR
    geometries_file: str | None = None
    dtypes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CachedCover:
    """The cover and where its timings came from: the class, how many current rows it
    had, how many of them were at a geometry the cover rule refuses (left out)."""

    result: CoverResult
    device_class: str
    rows: int
    left_out: int

    def source(self) -> str:
        return f"the {self.result.target} cache's timings of {self.device_class}"

    def note(self) -> str:
        """The rows left out, in one line ("" when none were)."""
        if not self.left_out:
            return ""
        return (f"left out {self.left_out} of {self.rows} current rows: their geometry is no "
                "cover geometry of the geometries file (its cover rule refuses it)")


def cover_from_cache(req: CoverFromCache) -> CachedCover:
    """The cover of the class's current rows (module docstring). ``TimingsError`` (one line)
    for a bad option or no current row; ``DeviceClassError`` for a class the cache lacks
    (or several and none named); a corrupt timings file raises its ``CorruptEntry``."""
    from wgradcache.pipeline.select import pick_class

    check_request(req.size, req.factor, req.dtypes)
    jobs = default_jobdata(req.geometries_file)
    cache = TargetCache(req.cache_dir, req.target)
    slug = pick_class(cache, req.device_class)
    tf = cache.read_timings(slug) if slug is not None else None
    if tf is None:
        raise TimingsError(f"the {req.target} cache has no timings (`wgradcache tune` "
                           "measures, `tune --import` takes timings measured elsewhere)")
    entries = {ik: e for ik, e in cache.iter_entries() if isinstance(e, Entry)}
    blob_of = {ik: e.blob for ik, e in entries.items()}
    specs: dict[str, KernelSpec] = {}
    rows, current, left_out = [], 0, 0
    for r in tf.rows:
        if not row_is_current(r, blob_of):
            continue
        current += 1
        if r.identity_key not in specs:
            specs[r.identity_key] = KernelSpec.from_dict(entries[r.identity_key].identity)
        spec = specs[r.identity_key]
        if jobs.cover_misfit(spec.target, spec.geometry):
            left_out += 1
            continue
        rows.append(Timing(r.problem, r.dtype, spec.label(), spec.geometry, spec.variant,
                           r.median_ms, r.problem))
    if not rows:
        raise TimingsError(f"the {req.target} cache's timings of {slug}: no current row at a "
                           f"cover geometry ({current} current of {len(tf.rows)})")
    tim = Timings(f"the {req.target} cache's timings of {slug}", req.target, tuple(rows))
    return CachedCover(cover_of(tim, jobs, req.size, req.factor, req.dtypes), slug, current,
                       left_out)
