"""Garbage collection of one target's cache: stale entries, orphan blobs, LRU past a bound.

Runs under the target's writer lock, so a concurrent build never publishes half a job into
a directory being collected. A build writes a blob and its entries in one lock hold; a
blob younger than ``grace`` seconds (``ORPHAN_GRACE``) is still never treated as an
orphan, in case a writer from an older tool version wrote the blob first and the entry in
a second hold. A temporary file of the store's naming (``.<name>.<8 characters>.tmp``,
what a SIGKILL between a write's create and its rename leaves) older than the same grace
is removed too; nothing else in the folders is. Timing rows of kernels no entry holds now
(removed, or rebuilt into another blob) are dropped from their device class's file.

"Least recently used" is the explicit stamp ``used/<content key>``, written when a build
or a merge publishes the blob: the order is oldest-published first, not last-served.
Nothing stamps a blob when it is served: ``select`` and ``verify`` are read-only queries,
often run on a cache restored read-only or shared by several readers, and a query that
takes the writer lock would queue behind a build. Not atime either (often disabled, and
touched by backups). A blob an entry still
needs is only removed together with every entry that needs it, and a stage-2 reduce kernel
only after every two-stage blob that needs it (it counts as used when they were).

An entry whose blob fails ``check_blob`` (missing, truncated, a flipped byte, emptied: not
the size and sha256 it records) is corrupt and removed like an entry that is not whole;
its blob is then an orphan (after the grace). A blob whose last entry this run removed as
stale is no young orphan: it goes in the same run, grace or not. Before anything is
removed every folder of the target is checked (``TargetCache.check_layout``): when
``entries/``, ``blobs/`` or ``used/`` is a symlink, gc refuses in one line and removes
nothing, so it never deletes outside the cache; each folder is then held by descriptor
and every removal is relative to it, so a folder swapped for a symlink while gc runs stops
it (``CacheMoved``, one line, exit 1) with nothing outside the cache removed.
``dry_run`` takes no lock and writes nothing: it runs on a read-only cache (and reports
the blobs stale entries would free).
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

from wgradcache.cache.entry import Entry, Stage2Entry
from wgradcache.cache.store import CorruptEntry, TargetCache, stage2_of
from wgradcache.cache.timings import row_is_current

__all__ = ["GcReport", "GcOptions", "gc", "parse_size", "MAX_SIZE", "ORPHAN_GRACE", "grace_text"]

ORPHAN_GRACE = 600.0
"""Seconds gc spares a blob no entry names, and a temporary file of the store's naming: a
writer may still name the blob or rename the file. ``verify``'s hint for what it finds
says the same."""


def grace_text() -> str:
    """``ORPHAN_GRACE`` in words: "10 minutes"."""
    return f"{ORPHAN_GRACE / 60:g} minutes"

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_SIZE = re.compile(r"([0-9]{1,20}(?:\.[0-9]{1,20})?) ?([a-z]{0,3})")
MAX_SIZE = 1 << 60
"""The largest ``--max-size`` (1 EiB): past it a bound means nothing, and a float that
large no longer counts bytes exactly."""


def parse_size(text: str) -> int:
    """'500M', '2G', '1.5T', '123456' -> bytes; ValueError naming the text otherwise.
    ASCII digits only, no exponent, no sign: 'inf', 'nan', '-1', '1e999' and full-width
    digits are not sizes."""
    m = _SIZE.fullmatch(text.strip().lower()) if text.isascii() else None
    if m is None:
        raise ValueError(f"size {text[:40]!r} is not a number with an optional unit "
                         "(K, M, G, T)")
    num, unit = m.groups()
    if unit not in _UNITS:
        raise ValueError(f"size {text[:40]!r}: unknown unit {unit!r} (use K, M, G or T)")
    value = float(num) * _UNITS[unit]
    if value > MAX_SIZE:
        raise ValueError(f"size {text[:40]!r} is larger than 1 EiB")
    return int(value)


@dataclass
class GcReport:
    target: str
    stale_entries: list[str] = field(default_factory=list)
    corrupt_entries: list[str] = field(default_factory=list)
    orphan_blobs: list[str] = field(default_factory=list)
    evicted_blobs: list[str] = field(default_factory=list)
    evicted_entries: list[str] = field(default_factory=list)
    temp_files: list[str] = field(default_factory=list)  # stale temps, as <folder>/<name>
    timing_rows: int = 0  # rows dropped: their kernel removed, or its blob another now
    bytes_before: int = 0
    bytes_after: int = 0
    notes: list[str] = field(default_factory=list)  # one line per corrupt entry: why

    def to_json(self) -> dict:
        return {"target": self.target, "stale_entries": len(self.stale_entries),
                "corrupt_entries": len(self.corrupt_entries),
                "orphan_blobs": len(self.orphan_blobs),
                "evicted_blobs": len(self.evicted_blobs),
                "evicted_entries": len(self.evicted_entries),
                "temp_files": len(self.temp_files), "timing_rows": self.timing_rows,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after}


@dataclass
class _Needs:
    """Who needs each blob: ``by_blob`` (blob -> identity keys, ``stage2:<name>`` for a
    companion) and ``users_of`` (a stage-2 blob -> the two-stage blobs that need it)."""

    by_blob: dict[str, list[str]] = field(default_factory=dict)
    users_of: dict[str, set[str]] = field(default_factory=dict)
    freed: set[str] = field(default_factory=set)  # blobs this run's stale removals left unused


@dataclass(frozen=True)
class GcOptions:
    """What one collection removes: stale entries (and the blobs they leave), orphan blobs,
    the least recently published past ``max_size`` bytes; ``grace`` seconds spare a young
    orphan or temp file a live writer may still name; ``dry_run`` reports, removes
    nothing."""

    stale: bool = True
    orphans: bool = True
    max_size: int | None = None
    grace: float = ORPHAN_GRACE
    dry_run: bool = False


def gc(cache: TargetCache, live_identities: set[str] | None,
       opts: GcOptions = GcOptions()) -> GcReport:
    """Collect; ``live_identities`` is what the current walk yields (None: skip stale)."""
    rep = GcReport(cache.target)
    if not cache.check_layout():
        return rep
    with nullcontext() if opts.dry_run else cache.lock():
        sizes = cache.blob_sizes()
        rep.bytes_before = sum(sizes.values())
        needs = _entries(cache, live_identities if opts.stale else None, opts.dry_run, rep)
        if opts.orphans or opts.stale:
            _orphans(cache, sizes, needs, opts, rep)
        if opts.max_size is not None:
            _evict(cache, sizes, needs, opts, rep)
        _temps(cache, opts, rep)
        _timings(cache, opts.dry_run, rep)
        rep.bytes_after = sum(sizes.values())
    return rep


def _entries(cache: TargetCache, live: set[str] | None, dry_run: bool,
             rep: GcReport) -> _Needs:
    """Drop corrupt and stale entries (``live`` None: none is stale); who needs what."""
    needs = _Needs()
    stage2_users: dict[str, set[str]] = {}  # stage-2 name -> blobs of two-stage entries
    stale_blobs: set[str] = set()
    for ik, entry in cache.iter_entries():
        corrupt = _corrupt(cache, entry, rep)
        if corrupt or (live is not None and ik not in live):
            (rep.corrupt_entries if corrupt else rep.stale_entries).append(ik)
            if not corrupt:
                stale_blobs.add(entry.blob)
            if not dry_run:
                cache.remove_entry(ik)
            continue
        assert isinstance(entry, Entry)
        needs.by_blob.setdefault(entry.blob, []).append(ik)
        companion = stage2_of(entry.identity)
        if companion:
            stage2_users.setdefault(companion, set()).add(entry.blob)
    for name, s2 in cache.stage2_entries().items():
        if _corrupt(cache, s2, rep):
            rep.corrupt_entries.append(f"stage2:{name}")
            if not dry_run:
                cache.remove_stage2(name)
            continue
        assert isinstance(s2, Stage2Entry)
        needs.by_blob.setdefault(s2.blob, []).append(f"stage2:{name}")
        needs.users_of.setdefault(s2.blob, set()).update(stage2_users.get(name, ()))
    needs.freed = stale_blobs - needs.by_blob.keys()
    return needs


def _corrupt(cache: TargetCache, entry: Entry | Stage2Entry | CorruptEntry,
             rep: GcReport) -> bool:
    """Not whole, or its blob is not the bytes it records (the reason goes to ``rep``)."""
    why = cache.unusable(entry)
    if why:
        rep.notes.append(why)
    return bool(why)


def _orphans(cache: TargetCache, sizes: dict[str, int], needs: _Needs, opts: GcOptions,
             rep: GcReport) -> None:
    """Blobs no entry names. The grace spares a young blob a writer may still name, but
    not one whose last entry this run removed as stale (under the lock: nothing can
    name it in between), so ``--stale --orphans`` frees a stale entry's blob at once."""
    now = time.time()
    for key in list(sizes):
        if key in needs.by_blob:
            continue
        if key not in needs.freed and now - cache.blob_mtime(key) < opts.grace:
            continue
        rep.orphan_blobs.append(key)
        if not opts.dry_run:
            cache.remove_blob(key)
        del sizes[key]


def _temps(cache: TargetCache, opts: GcOptions, rep: GcReport) -> None:
    """Temporary files of the store's naming older than the grace (a killed writer's; a
    younger one may be a live writer's, about to be renamed)."""
    now = time.time()
    for sub, name, mtime in cache.temp_files():
        if now - mtime < opts.grace:
            continue
        rep.temp_files.append(f"{sub}/{name}" if sub else name)
        if not opts.dry_run:
            cache.remove_temp(sub, name)


def _timings(cache: TargetCache, dry_run: bool, rep: GcReport) -> None:
    """Drop the timing rows no kernel of the cache can use: of an identity with no entry
    left, or of a blob its entry no longer names (stale for ever: a blob key is its
    content). A timings file that is not whole is removed like a corrupt entry (its
    reason noted). Runs after the entries are collected, so this run's removals count."""
    from dataclasses import replace

    blob_of = {ik: e.blob for ik, e in cache.iter_entries() if isinstance(e, Entry)}
    for slug in cache.timing_classes():
        try:
            tf = cache.read_timings(slug)
        except CorruptEntry as e:
            rep.notes.append(str(e))
            rep.corrupt_entries.append(f"timings:{slug}")
            if not dry_run:
                cache.remove_timings(slug)
            continue
        if tf is None:
            continue
        keep = tuple(r for r in tf.rows if row_is_current(r, blob_of))
        if len(keep) == len(tf.rows):
            continue
        rep.timing_rows += len(tf.rows) - len(keep)
        if not dry_run:
            cache.write_timings(replace(tf, rows=keep))


def _evict(cache: TargetCache, sizes: dict[str, int], needs: _Needs, opts: GcOptions,
           rep: GcReport) -> None:
    """Oldest-published first, until the blobs fit ``max_size``; a stage-2 kernel counts
    as published when the last of its users was, and goes after them."""
    total, max_size, dry_run = sum(sizes.values()), opts.max_size, opts.dry_run
    assert max_size is not None

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
