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

from wgradcache.cache.store import CorruptEntry, TargetCache, atomic_write

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
    plan: list[tuple[TargetCache, TargetCache, str, dict]] = []
    dest = Path(dest)
    for src in map(Path, sources):
        if not src.is_dir():
            raise ValueError(f"merge source {src} is not a cache directory")
        for target in _targets(src):
            s, d = TargetCache(src, target), TargetCache(dest, target)
            for ik, entry in s.iter_entries():
                if isinstance(entry, CorruptEntry):
                    rep.conflicts.append({"source": str(src), "target": target,
                                          "identity_key": ik, "reason": str(entry)})
                    continue
                try:
                    have = d.read_entry(ik)
                except CorruptEntry as e:
                    rep.conflicts.append({"source": str(src), "target": target,
                                          "identity_key": ik, "reason": str(e)})
                    continue
                pending = next((p[3] for p in plan if p[1].dir == d.dir and p[2] == ik), None)
                other = have or pending
                if other is None:
                    plan.append((s, d, ik, entry))
                elif other.get("blob_sha256") != entry.get("blob_sha256"):
                    rep.conflicts.append({
                        "source": str(src), "target": target, "identity_key": ik,
                        "label": entry.get("label"),
                        "reason": f"same identity, different content: blob sha256 "
                                  f"{entry.get('blob_sha256', '')[:12]} vs "
                                  f"{other.get('blob_sha256', '')[:12]}"})
                else:
                    rep.skipped += 1
    if rep.conflicts:
        return rep
    for s, d, ik, entry in plan:
        with d.lock():
            key = entry["blob"]
            if not d.has_blob(key):
                d.write_blob(key, s.read_blob(key))
                side = s.blobs / f"{key}.json"
                if side.is_file():
                    atomic_write(d.blobs / f"{key}.json", side.read_bytes())
                rep.copied_blobs += 1
            d.write_entry(ik, entry)
            d.stamp_used(key, s.last_used(key) or None)
            rep.copied_entries += 1
    for src in map(Path, sources):
        for target in _targets(src):
            s, d = TargetCache(src, target), TargetCache(dest, target)
            for name, entry in s.stage2_entries().items():
                if not isinstance(entry, dict) or d.stage2_entries().get(name) == entry:
                    continue
                with d.lock():
                    if not d.has_blob(entry["blob"]):
                        d.write_blob(entry["blob"], s.read_blob(entry["blob"]))
                    d.write_stage2(name, entry)
    for target in {p[1].target for p in plan}:
        TargetCache(dest, target).append_stats({"merge": [str(x) for x in sources],
                                                "when": time.time(),
                                                "entries": rep.copied_entries})
    return rep
