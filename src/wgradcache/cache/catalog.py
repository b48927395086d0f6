"""Reading the cache for people: list entries, find one by key or label, explain its key.

``explain`` answers "why was this rebuilt": it lays every input of the content key next to
what this process would use now, so a changed toolchain, option, generator or IR shows up
as the one row that differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wgradcache.cache.entry import CorruptEntry, Entry, record_json
from wgradcache.cache.store import TargetCache
from wgradcache.model.spec import from_label

__all__ = ["EntryNotFound", "list_entries", "find_entry", "explain", "cache_targets"]


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


def cache_targets(root: str | Path, target: str | None = None) -> list[str]:
    root = Path(root)
    if target:
        return [target]
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "entries").is_dir())


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
    """By identity key (a unique prefix of 8+ hex digits is enough) or by label."""
    if key_or_label.startswith("gfx"):
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


def explain(root: str | Path, key_or_label: str) -> dict:
    """Every input of the entry's content key, stored vs now."""
    from wgradcache.cache.store import blank_symbol, content_key, sha256_bytes
    from wgradcache.compile.toolchain import keyed_fields
    from wgradcache.model.spec import KernelSpec
    from wgradcache.pipeline.build import codegen_context
    from wgradcache.wgrad.emit import emit_ir, generator_digest

    found = find_entry(root, key_or_label)
    e = found.record
    spec = KernelSpec.from_dict(e.identity)
    options, toolchain, tdigest = codegen_context()
    k = emit_ir(spec)
    ir_now = sha256_bytes(blank_symbol(k.ir_text, k.symbol).encode())
    ckey_now = content_key(k.ir_text, k.symbol, spec.target, options, toolchain)
    rows = [
        ("ir_sha256 (symbol blanked)", e.ir_sha256, ir_now),
        ("target", e.target, spec.target),
        ("codegen options", e.codegen_options, options),
        ("toolchain (where the linker lives is not in the key)",
         keyed_fields(e.toolchain), keyed_fields(toolchain)),
        ("generator digest (not in the key; decides up-to-date)",
         e.generator_digest, generator_digest()),
    ]
    return {
        "identity_key": found.identity_key, "label": e.label,
        "content_key": e.blob, "content_key_now": ckey_now,
        "up_to_date": e.blob == ckey_now,
        "inputs": [{"input": name, "stored": a, "now": b, "same": a == b}
                   for name, a, b in rows],
    }
