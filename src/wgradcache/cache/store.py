"""The content-addressed on-disk cache of one target (DESIGN §7).

    <root>/<target>/blobs/<content key>.hsaco   code objects, shared by identities
    <root>/<target>/blobs/<content key>.json    its sidecar (``BlobMeta``: what a relink needs)
    <root>/<target>/entries/<identity key>.json one per kernel; written last (commit marker)
    <root>/<target>/stage2/<dw>-wsr<R>.json     stage-2 reduce kernels of two-stage entries
    <root>/<target>/failed/<identity key>.json  jobs that failed, with the reason
    <root>/<target>/used/<content key>          publish stamps for gc's LRU (content: a time)
    <root>/<target>/rejects.jsonl               specs the validator refused: one line each
    <root>/<target>/stats.jsonl                 one line per run

This module owns that layout: every path above is built here, and every record is read and
written through ``cache/entry.py``'s typed records, never as raw JSON elsewhere.

Every file is written to a temporary name in the same directory and moved into place with
``os.replace``, so a reader sees the old file or the new one, never half of one. An entry
names its blob's size and sha256 and is written after the blob: an entry on disk means its
blob was whole when it was published. Writers take one lock per target directory
(filelock); readers never lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from wgradcache.cache.entry import (
    BlobMeta,
    CorruptEntry,
    Entry,
    FailureRecord,
    Stage2Entry,
    read_record,
    record_bytes,
)

__all__ = ["TargetCache", "CorruptEntry", "BlobRef", "content_key", "atomic_write",
           "sha256_bytes", "blank_symbol", "stage2_name", "stage2_of"]

_SYMBOL_BLANK = "@K@"


@dataclass(frozen=True)
class BlobRef:
    key: str
    size: int
    sha256: str


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blank_symbol(ir_text: str, symbol: str) -> str:
    """The IR with its kernel symbol replaced, so two identities whose kernels differ only in
    name share one blob (and a renamed kernel does not look like new code)."""
    return ir_text.replace(symbol, _SYMBOL_BLANK)


def stage2_name(dw_dtype: str, replicas: int) -> str:
    """The companion name of the stage-2 reduce kernel for (dW dtype, R): ``fp16-wsr8``."""
    return f"{dw_dtype}-wsr{replicas}"


def stage2_of(identity: dict) -> str | None:
    """The stage-2 companion an entry's identity (canonical spec) needs, or None."""
    if identity.get("reduction") != "two_stage":
        return None
    return stage2_name(identity["dw_dtype"], identity["ws_replicas"])


def content_key(ir_text: str, symbol: str, target: str, options: dict, toolchain: dict) -> str:
    """sha256(IR with the symbol blanked, target, codegen options, toolchain identity).

    The identity enters as its digest (``identity_digest``: every field but where the linker
    lives), so a cache is shared by an ``ld.lld`` process and the in-process LLD of the same
    version, and by machines with the linker or the native helper in other places."""
    from wgradcache.compile.toolchain import identity_digest

    h = hashlib.sha256()
    for part in (blank_symbol(ir_text, symbol), target,
                 json.dumps(options, sort_keys=True, separators=(",", ":")),
                 identity_digest(toolchain)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, ``os.replace``: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _line(record: dict) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _append_line(path: Path, record: dict) -> None:
    """One JSON line, written with a single O_APPEND write (whole lines under the lock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = _line(record)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _read_lines(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line from a killed writer
    return out


class TargetCache:
    """One target's directory of the cache."""

    def __init__(self, root: str | os.PathLike, target: str):
        self.root = Path(root)
        self.target = target
        self.dir = self.root / target
        self.blobs = self.dir / "blobs"
        self.entries = self.dir / "entries"
        self.failed = self.dir / "failed"
        self.used = self.dir / "used"
        self.rejects_path = self.dir / "rejects.jsonl"
        self.stats_path = self.dir / "stats.jsonl"
        self._lock: FileLock | None = None

    # -- locking --------------------------------------------------------------------
    def lock(self) -> FileLock:
        """The target's writer lock; one reentrant object per TargetCache (a second
        FileLock on the same file in this process would wait for the first forever)."""
        if self._lock is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._lock = FileLock(str(self.dir / ".lock"))
        return self._lock

    # -- blobs and their sidecars ---------------------------------------------------
    def blob_path(self, key: str) -> Path:
        return self.blobs / f"{key}.hsaco"

    def sidecar_path(self, key: str) -> Path:
        return self.blobs / f"{key}.json"

    def has_blob(self, key: str) -> bool:
        return self.blob_path(key).is_file()

    def write_blob(self, key: str, data: bytes, meta: BlobMeta | None = None) -> BlobRef:
        """The blob (unless the same bytes are there), then its sidecar when given (call
        under the writer lock)."""
        ref = BlobRef(key, len(data), sha256_bytes(data))
        path = self.blob_path(key)
        if not (path.is_file() and path.stat().st_size == ref.size
                and sha256_bytes(path.read_bytes()) == ref.sha256):
            atomic_write(path, data)
        if meta is not None:
            atomic_write(self.sidecar_path(key), record_bytes(meta))
        return ref

    def blob_ref(self, key: str) -> BlobRef:
        data = self.blob_path(key).read_bytes()
        return BlobRef(key, len(data), sha256_bytes(data))

    def read_blob(self, key: str) -> bytes:
        return self.blob_path(key).read_bytes()

    def read_sidecar(self, key: str) -> BlobMeta | None:
        """The metadata of an existing blob, or None (no blob, or no whole sidecar: the blob
        is then compiled again rather than relinked)."""
        if not self.has_blob(key):
            return None
        try:
            return self._read(BlobMeta, self.sidecar_path(key))
        except CorruptEntry:
            return None

    def relinkable(self) -> frozenset[str]:
        """The content keys whose blob and sidecar both exist: what a build may relink to
        instead of compiling. One directory listing, no file read."""
        if not self.blobs.is_dir():
            return frozenset()
        names = {p.name for p in self.blobs.iterdir()}
        return frozenset(n[:-6] for n in names
                         if n.endswith(".hsaco") and f"{n[:-6]}.json" in names)

    def forget_sidecar(self, key: str) -> None:
        """Remove a sidecar a relink could not read, so that ``relinkable`` stops listing
        its blob and the next build compiles it (call under the writer lock)."""
        self.sidecar_path(key).unlink(missing_ok=True)

    def copy_blob_from(self, src: TargetCache, key: str) -> None:
        """Blob ``key`` and its sidecar (when whole) from another cache of this target."""
        self.write_blob(key, src.read_blob(key), src.read_sidecar(key))

    def remove_blob(self, key: str) -> None:
        """The blob, its sidecar and its stamp (call under the writer lock)."""
        self.blob_path(key).unlink(missing_ok=True)
        self.sidecar_path(key).unlink(missing_ok=True)
        (self.used / key).unlink(missing_ok=True)

    def blob_keys(self) -> list[str]:
        if not self.blobs.is_dir():
            return []
        return sorted(p.name[:-6] for p in self.blobs.glob("*.hsaco"))

    def stamp_used(self, key: str, when: float | None = None) -> None:
        """The stamp gc's LRU orders by: written when a build or a merge publishes the blob
        (explicit, not atime)."""
        atomic_write(self.used / key, f"{when if when is not None else time.time():.6f}".encode())

    def last_used(self, key: str) -> float:
        try:
            return float((self.used / key).read_text())
        except (FileNotFoundError, ValueError):
            return 0.0

    # -- entries --------------------------------------------------------------------
    def entry_path(self, identity_key: str) -> Path:
        return self.entries / f"{identity_key}.json"

    def read_entry(self, identity_key: str) -> Entry | None:
        """The entry, or None when absent; CorruptEntry when it is not whole."""
        return self._read(Entry, self.entry_path(identity_key))

    def write_entry(self, entry: Entry) -> None:
        atomic_write(self.entry_path(entry.identity_key), record_bytes(entry))

    def remove_entry(self, identity_key: str) -> None:
        self.entry_path(identity_key).unlink(missing_ok=True)

    def entry_keys(self) -> list[str]:
        if not self.entries.is_dir():
            return []
        return sorted(p.stem for p in self.entries.glob("*.json"))

    def iter_entries(self) -> Iterator[tuple[str, Entry | CorruptEntry]]:
        for key in self.entry_keys():
            try:
                entry = self.read_entry(key)
            except CorruptEntry as e:
                yield key, e
                continue
            if entry is not None:
                yield key, entry

    # -- stage-2 companions ----------------------------------------------------------
    def stage2_path(self, name: str) -> Path:
        return self.dir / "stage2" / f"{name}.json"

    def read_stage2(self, name: str) -> Stage2Entry | None:
        """The companion ``name`` (``stage2_name``), None when absent; CorruptEntry."""
        return self._read(Stage2Entry, self.stage2_path(name))

    def stage2_entries(self) -> dict[str, Stage2Entry | CorruptEntry]:
        """name -> the companion entry of a stage-2 reduce kernel (two-stage split-K)."""
        d = self.dir / "stage2"
        out: dict[str, Stage2Entry | CorruptEntry] = {}
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                entry = self.read_stage2(p.stem)
            except CorruptEntry as e:
                out[p.stem] = e
                continue
            if entry is not None:
                out[p.stem] = entry
        return out

    def write_stage2(self, entry: Stage2Entry) -> None:
        atomic_write(self.stage2_path(entry.name), record_bytes(entry))

    def remove_stage2(self, name: str) -> None:
        self.stage2_path(name).unlink(missing_ok=True)

    # -- failures, rejects, stats ----------------------------------------------------
    def read_failure(self, identity_key: str) -> FailureRecord | None:
        """The job's failure record; None when absent or not whole (then it is retried)."""
        try:
            return self._read(FailureRecord, self.failed / f"{identity_key}.json")
        except CorruptEntry:
            return None

    def write_failure(self, record: FailureRecord) -> None:
        atomic_write(self.failed / f"{record.identity_key}.json", record_bytes(record))

    def clear_failure(self, identity_key: str) -> None:
        (self.failed / f"{identity_key}.json").unlink(missing_ok=True)

    def record_rejects(self, rejected: dict[str, dict], accepted: set[str]) -> None:
        """One line per rejected identity: ``rejected`` (identity key -> its record) replaces
        what the file said of those identities, ``accepted`` ones leave it (the rules
        changed). The file is rewritten only when that changes it, so a no-op build writes
        nothing (call under the writer lock)."""
        lines = self.rejects()
        old = {r.get("identity_key"): r for r in lines}
        new = {k: r for k, r in old.items() if k not in accepted}
        new.update(rejected)
        if new == old and len(lines) == len(old):  # (an older version appended duplicates)
            return
        atomic_write(self.rejects_path, b"".join(_line(r) for r in new.values()))

    def rejects(self) -> list[dict]:
        return _read_lines(self.rejects_path)

    def append_stats(self, record: dict) -> None:
        _append_line(self.stats_path, record)

    def stats(self) -> list[dict]:
        return _read_lines(self.stats_path)

    @staticmethod
    def _read(cls, path: Path):
        """The record of type ``cls`` at ``path``, None when absent; CorruptEntry."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        return read_record(cls, text, str(path))
