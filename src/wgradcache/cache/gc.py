"""Garbage collection of one target's cache: stale entries, orphan blobs, LRU past a bound.

Runs under the target's writer lock, so a concurrent build never publishes half a job into
a directory being collected. A build writes a blob and its entries in one lock hold; a blob
younger than ``grace`` seconds is still never treated as an orphan, in case a writer from
an older tool version wrote the blob first and the entry in a second hold.

"Least recently used" is the explicit stamp ``used/<content key>``, written when a build
or a merge publishes the blob: the order is oldest-published first, not last-served.
Nothing stamps a blob when it is served: ``select`` and ``verify`` are read-only queries,
often run on a cache restored read-only or shared by several readers, and a query that
takes the writer lock would queue behind a build. Not atime either (often disabled, and
touched by backups). A blob an entry still
needs is only removed together with every entry that needs it, and a stage-2 reduce kernel
only after every two-stage blob that needs it (it counts as used when they were).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from wgradcache.cache.store import CorruptEntry, TargetCache, stage2_of

__all__ = ["GcReport", "gc", "parse_size"]

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """'500M', '2G', '123456' -> bytes; ValueError naming the text otherwise."""
    t = text.strip().lower()
    num = t.rstrip("abgikm")
    unit = t[len(num):]
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"size {text!r} is not a number with an optional unit "
                         "(K, M, G)") from None
    if unit not in _UNITS or value < 0:
        raise ValueError(f"size {text!r}: unknown unit {unit!r} (use K, M or G)")
    return int(value * _UNITS[unit])


@dataclass
class GcReport:
    target: str
    stale_entries: list[str] = field(default_factory=list)
    corrupt_entries: list[str] = field(default_factory=list)
    orphan_blobs: list[str] = field(default_factory=list)
    evicted_blobs: list[str] = field(default_factory=list)
    evicted_entries: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0

    def to_json(self) -> dict:
        return {"target": self.target, "stale_entries": len(self.stale_entries),
                "corrupt_entries": len(self.corrupt_entries),
                "orphan_blobs": len(self.orphan_blobs),
                "evicted_blobs": len(self.evicted_blobs),
                "evicted_entries": len(self.evicted_entries),
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after}


def _blob_bytes(cache: TargetCache) -> dict[str, int]:
    return {k: cache.blob_path(k).stat().st_size for k in cache.blob_keys()}


@dataclass
class _Needs:
    """Who needs each blob: ``by_blob`` (blob -> identity keys, ``stage2:<name>`` for a
    companion) and ``users_of`` (a stage-2 blob -> the two-stage blobs that need it)."""

    by_blob: dict[str, list[str]] = field(default_factory=dict)
    users_of: dict[str, set[str]] = field(default_factory=dict)


def gc(cache: TargetCache, live_identities: set[str] | None, *, stale: bool = True,
       orphans: bool = True, max_size: int | None = None, grace: float = 600.0,
       dry_run: bool = False) -> GcReport:
    """Collect; ``live_identities`` is what the current walk yields (None: skip stale)."""
    rep = GcReport(cache.target)
    if not cache.dir.is_dir():
        return rep
    with cache.lock():
        sizes = _blob_bytes(cache)
        rep.bytes_before = sum(sizes.values())
        needs = _entries(cache, live_identities if stale else None, dry_run, rep)
        if orphans or stale:
            _orphans(cache, sizes, needs, grace, dry_run, rep)
        if max_size is not None:
            _evict(cache, sizes, needs, max_size, dry_run, rep)
        rep.bytes_after = sum(sizes.values())
    return rep


def _entries(cache: TargetCache, live: set[str] | None, dry_run: bool,
             rep: GcReport) -> _Needs:
    """Drop corrupt and stale entries (``live`` None: none is stale); who needs what."""
    needs = _Needs()
    stage2_users: dict[str, set[str]] = {}  # stage-2 name -> blobs of two-stage entries
    for ik, entry in cache.iter_entries():
        if isinstance(entry, CorruptEntry) or (live is not None and ik not in live):
            (rep.corrupt_entries if isinstance(entry, CorruptEntry)
             else rep.stale_entries).append(ik)
            if not dry_run:
                cache.remove_entry(ik)
            continue
        needs.by_blob.setdefault(entry.blob, []).append(ik)
        companion = stage2_of(entry.identity)
        if companion:
            stage2_users.setdefault(companion, set()).add(entry.blob)
    for name, s2 in cache.stage2_entries().items():
        if not isinstance(s2, CorruptEntry):
            needs.by_blob.setdefault(s2.blob, []).append(f"stage2:{name}")
            needs.users_of.setdefault(s2.blob, set()).update(stage2_users.get(name, ()))
    return needs


def _orphans(cache: TargetCache, sizes: dict[str, int], needs: _Needs, grace: float,
             dry_run: bool, rep: GcReport) -> None:
    now = time.time()
    for key in list(sizes):
        if key in needs.by_blob or now - cache.blob_path(key).stat().st_mtime < grace:
            continue
        rep.orphan_blobs.append(key)
        if not dry_run:
            cache.remove_blob(key)
        del sizes[key]


def _evict(cache: TargetCache, sizes: dict[str, int], needs: _Needs, max_size: int,
           dry_run: bool, rep: GcReport) -> None:
    """Oldest-published first, until the blobs fit ``max_size``; a stage-2 kernel counts
    as published when the last of its users was, and goes after them."""
    total = sum(sizes.values())

    def order(key: str) -> tuple[float, bool, str]:
        users = needs.users_of.get(key, ())
        return max([cache.last_used(key)] + [cache.last_used(u) for u in users]), \
            key in needs.users_of, key

    for key in sorted(sizes, key=order):
        if total <= max_size:
            break
        rep.evicted_blobs.append(key)
        for ik in needs.by_blob.get(key, []):
            rep.evicted_entries.append(ik)
            if not dry_run:  # entries first: never an entry without its blob
                if ik.startswith("stage2:"):
                    cache.remove_stage2(ik[len("stage2:"):])
                else:
                    cache.remove_entry(ik)
        if not dry_run:
            cache.remove_blob(key)
        total -= sizes.pop(key)
