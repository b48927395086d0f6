"""The content-addressed cache: the only owner of its layout (paths), its record schema
(entries, stage-2 companions, sidecars, failures), gc, merge and the catalog."""

from wgradcache.cache.entry import BlobMeta, CorruptEntry, Entry, FailureRecord, Stage2Entry
from wgradcache.cache.store import (
    BlobRef,
    TargetCache,
    atomic_write,
    content_key,
    sha256_bytes,
)

__all__ = ["BlobMeta", "BlobRef", "CorruptEntry", "Entry", "FailureRecord", "Stage2Entry",
           "TargetCache", "atomic_write", "content_key", "sha256_bytes"]
