"""``wgradcache gc`` as a pipeline stage: the live set comes from the walk (jobs/), the
removal from the cache (``cache/gc``), which never imports the walk."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GcRequest", "collect"]


@dataclass(frozen=True)
class GcRequest:
    """``wgradcache gc``'s options. With none of stale/orphans/max_size: stale + orphans."""

    cache_dir: str
    targets: tuple[str, ...] = ()  # () : every target folder in the cache
    stale: bool = False
    orphans: bool = False
    max_size: int | None = None  # bytes
    dry_run: bool = False
    geometries_file: str | None = None


def collect(req: GcRequest) -> list:
    """One ``GcReport`` per target."""
    from wgradcache.cache.catalog import cache_targets
    from wgradcache.cache.gc import GcOptions, gc
    from wgradcache.cache.store import TargetCache
    from wgradcache.jobs import default_jobdata, walk
    from wgradcache.model.spec import DTYPE_KEYS

    stale, orphans = req.stale, req.orphans
    if not (stale or orphans or req.max_size is not None):
        stale = orphans = True
    opts = GcOptions(stale=stale, orphans=orphans, max_size=req.max_size, dry_run=req.dry_run)
    data = default_jobdata(req.geometries_file) if stale else None
    reports = []
    for t in req.targets or cache_targets(req.cache_dir):
        live = {s.identity_key() for s in walk(t, DTYPE_KEYS, None, data)} if stale else None
        reports.append(gc(TargetCache(req.cache_dir, t), live, opts))
    return reports
