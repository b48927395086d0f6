"""The content-addressed cache: blobs, entries, rejects, stats, locking."""

from wgradcache.cache.store import (
           BlobRef,
           CorruptEntry,
           TargetCache,
           atomic_write,
           content_key,
           sha256_bytes,
)

__all__ = ["BlobRef", "CorruptEntry", "TargetCache", "atomic_write", "content_key",
           "sha256_bytes"]
