"""Union shard caches into one (DESIGN §8).

Two caches conflict when one identity names different content (another blob sha256): that
means two builds disagreed about what a kernel is, and picking one silently would serve a
binary nobody verified against this identity. Conflicts are found before anything is
written; a merge with any conflict writes nothing. Merging the same source twice is a
no-op (idempotent): equal entries are skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from wgradcache.cache.entry import CorruptEntry, Entry
from wgradcache.cache.store import TargetCache

__all__ = ["MergeReport", "merge"]


@dataclass
class MergeReport:
    copied_entries: int = 0
    copied_blobs: int = 0
    skipped: int = 0
    conflicts: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_json(self) -> dict:
        return {"ok": self.ok, "copied_entries": self.copied_entries,
                "copied_blobs": self.copied_blobs, "skipped": self.skipped,
                "conflicts": self.conflicts}


def _targets(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "entries").is_dir()) \
        if root.is_dir() else []


def merge(sources: list[str | Path], dest: str | Path) -> MergeReport:
    rep = MergeReport()
    dest = Path(dest)
    plan = _plan(list(map(Path, sources)), dest, rep)
    if rep.conflicts:
        return rep
    _copy_entries(plan, dest, rep)
    _copy_stage2(list(map(Path, sources)), dest)
    for target in sorted({t for t, _ in plan}):
        TargetCache(dest, target).append_stats({"merge": [str(x) for x in sources],
                                                "when": time.time(),
                                                "entries": rep.copied_entries})
    return rep


_Plan = dict[tuple[str, str], tuple[TargetCache, Entry]]  # (target, identity) -> source


def _plan(sources: list[Path], dest: Path, rep: MergeReport) -> _Plan:
    """What to copy, keyed for one dict lookup per source entry; conflicts go to ``rep``."""
    plan: _Plan = {}
    for src in sources:
        if not src.is_dir():
            raise ValueError(f"merge source {src} is not a cache directory")
        for target in _targets(src):
            s, d = TargetCache(src, target), TargetCache(dest, target)
            for ik, entry in s.iter_entries():
                where = {"source": str(src), "target": target, "identity_key": ik}
                try:
                    if isinstance(entry, CorruptEntry):
                        raise entry
                    have = d.read_entry(ik)
                except CorruptEntry as e:
                    rep.conflicts.append({**where, "reason": str(e)})
                    continue
                pending = plan.get((target, ik))
                other = have or (pending[1] if pending else None)
                if other is None:
                    plan[(target, ik)] = (s, entry)
                elif other.blob_sha256 != entry.blob_sha256:
                    rep.conflicts.append({
                        **where, "label": entry.label,
                        "reason": f"same identity, different content: blob sha256 "
                                  f"{entry.blob_sha256[:12]} vs {other.blob_sha256[:12]}"})
                else:
                    rep.skipped += 1
    return plan


def _copy_entries(plan: _Plan, dest: Path, rep: MergeReport) -> None:
    for (target, _ik), (s, entry) in plan.items():
        d = TargetCache(dest, target)
        with d.lock():
            if not d.has_blob(entry.blob):
                d.copy_blob_from(s, entry.blob)
                rep.copied_blobs += 1
            d.write_entry(entry)
            d.stamp_used(entry.blob, s.last_used(entry.blob) or None)
            rep.copied_entries += 1


def _copy_stage2(sources: list[Path], dest: Path) -> None:
    for src in sources:
        for target in _targets(src):
            s, d = TargetCache(src, target), TargetCache(dest, target)
            for name, s2 in s.stage2_entries().items():
                if isinstance(s2, CorruptEntry) or d.stage2_entries().get(name) == s2:
                    continue
                with d.lock():
                    if not d.has_blob(s2.blob):
                        d.copy_blob_from(s, s2.blob)
                    d.write_stage2(s2)
