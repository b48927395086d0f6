"""Reading the cache for people: list entries, find one by key or label
(``pipeline/explain.py`` lays an entry's content-key inputs next to what this machine
would use now: that side runs the generator, so it lives in the pipeline).

``scan_targets`` is the one listing of a cache root every command uses: a folder whose name
is not a target of the catalog (``evil``) is reported, one line each, and never read.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from wgradcache.cache.entry import CorruptEntry, Entry, record_json
from wgradcache.cache.store import CacheRefused, TargetCache
from wgradcache.cache.timings import TimingRow, VendorRow
from wgradcache.model.spec import from_label
from wgradcache.model.targets import target_names

__all__ = ["EntryNotFound", "list_entries", "find_entry", "cache_targets",
           "scan_targets", "foreign_folders", "Measured", "measured_times"]


class EntryNotFound(LookupError):
    pass


@dataclass(frozen=True)
class FoundEntry:
    target: str
    identity_key: str
    record: Entry

    @property
    def entry(self) -> dict:
        """The entry as a JSON object (what ``show --json`` prints)."""
        return record_json(self.record)


def scan_targets(root: str | Path) -> tuple[list[str], list[str]]:
    """(the target folders of the cache at ``root``, one line per folder that is not one).

    A target folder is a directory named after a catalog target holding ``entries`` (in
    any form: a symlinked ``entries`` is listed, and refused when read). Any other folder,
    or a symlink at the root, is reported and never read; plain files and hidden names are
    not the cache's. CacheRefused when ``root`` exists and is not a directory."""
    from wgradcache.model.targets import TARGETS

    root = Path(root)
    try:
        if not stat.S_ISDIR(os.stat(root).st_mode):
            raise CacheRefused(root, "not a directory: not a cache")
        with os.scandir(root) as it:
            found = sorted(it, key=lambda e: e.name)
    except FileNotFoundError:
        return [], []
    except OSError as e:
        if isinstance(e, CacheRefused):
            raise
        raise CacheRefused(root, f"cannot be listed ({e.strerror})") from None
    targets, foreign = [], []
    for e in found:
        if e.name.startswith(".") or not (e.is_symlink() or e.is_dir(follow_symlinks=False)):
            continue
        if e.is_symlink():
            foreign.append(f"{root / e.name}: a symbolic link, not followed: skipped")
        elif e.name not in TARGETS:
            foreign.append(f"{root / e.name}: not a target of the catalog: skipped")
        elif os.path.lexists(root / e.name / "entries"):
            targets.append(e.name)
    return targets, foreign


def cache_targets(root: str | Path, target: str | None = None) -> list[str]:
    """``[target]``, or the target folders of the cache (``scan_targets``)."""
    if target:
        return [target]
    return scan_targets(root)[0]


def foreign_folders(root: str | Path) -> list[str]:
    """One line per folder of the cache root that is not a target folder: what ``ls``,
    ``gc`` and ``verify`` report as skipped."""
    return scan_targets(root)[1]


def list_entries(root: str | Path, target: str | None = None,
                 variant: str | None = None) -> list[dict]:
    rows = []
    for t in cache_targets(root, target):
        for ik, entry in TargetCache(root, t).iter_entries():
            if isinstance(entry, CorruptEntry):
                rows.append({"target": t, "identity_key": ik, "label": "?", "variant": "?",
                             "blob_size": 0, "error": str(entry)})
                continue
            if variant and entry.variant != variant:
                continue
            rows.append({"target": t, "identity_key": ik, "label": entry.label,
                         "variant": entry.variant, "blob_size": entry.blob_size,
                         "blob": entry.blob})
    return sorted(rows, key=lambda r: (r["target"], r["label"] or ""))


def find_entry(root: str | Path, key_or_label: str) -> FoundEntry:
    """By identity key (a unique prefix of 8+ hex digits is enough) or by label (it starts
    with a catalog target's name and a dash: ``gfx1250-...``, ``sm_90-...``)."""
    if any(key_or_label.startswith(f"{t}-") for t in target_names()):
        spec = from_label(key_or_label)
        ik = spec.identity_key()
        entry = TargetCache(root, spec.target).read_entry(ik)
        if entry is None:
            raise EntryNotFound(f"no entry for {key_or_label} in {root}/{spec.target} "
                                f"(identity {ik[:12]}); build it with "
                                f"`wgradcache build --target {spec.target}`")
        return FoundEntry(spec.target, ik, entry)
    if len(key_or_label) < 8:
        raise EntryNotFound(f"key {key_or_label!r} is too short: give 8 or more hex digits")
    hits = [(t, ik) for t in cache_targets(root)
            for ik in TargetCache(root, t).entry_keys() if ik.startswith(key_or_label)]
    if not hits:
        raise EntryNotFound(f"no entry with key {key_or_label!r} in {root}")
    if len(hits) > 1:
        raise EntryNotFound(f"key {key_or_label!r} is ambiguous: {len(hits)} entries match")
    t, ik = hits[0]
    entry = TargetCache(root, t).read_entry(ik)
    assert entry is not None
    return FoundEntry(t, ik, entry)


@dataclass(frozen=True)
class Measured:
    """A kernel's measured times on one device class: its rows of the entry's current blob
    and how many rows of older blobs (stale: never used) the file still holds."""

    device_class: str
    device: str
    rows: tuple[TimingRow, ...]
    stale: int
    vendor: tuple[VendorRow, ...] = ()  # the vendor library's rows of the same problems
    factor: float | None = None  # the class's fit's factor of the kernel (Fit.factors)

    def vendor_text(self, row: TimingRow) -> str:
        """The vendor libraries' times of ``row``'s problem and dtype: "cudnn 0.1234"."""
        return ", ".join(f"{v.library} {v.median_ms:.4f}" for v in self.vendor
                         if (v.problem, v.dtype) == (row.problem, row.dtype))


def measured_times(root: str | Path, found: FoundEntry) -> tuple[list[Measured], list[str]]:
    """Per device class with rows of ``found``'s kernel: those rows; and one line per
    timings file that is not whole (reported, not read)."""
    cache = TargetCache(root, found.target)
    out, bad = [], []
    for slug in cache.timing_classes():
        try:
            tf = cache.read_timings(slug)
        except CorruptEntry as e:
            bad.append(str(e))
            continue
        if tf is None:
            continue
        mine = [r for r in tf.rows if r.identity_key == found.identity_key]
        current = tuple(r for r in mine if r.blob == found.record.blob)
        if mine:
            factor = tf.fit.factors.get(found.identity_key) if tf.fit else None
            out.append(Measured(slug, tf.device.describe(), current,
                                len(mine) - len(current), tf.vendor, factor))
    return out, bad
