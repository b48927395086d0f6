"""The content-addressed on-disk cache of one target (DESIGN §7).

    <root>/<target>/blobs/<content key>.hsaco   code objects, shared by identities
    <root>/<target>/entries/<identity key>.json one per kernel; written last (commit marker)
    <root>/<target>/failed/<identity key>.json  jobs that failed, with the reason
    <root>/<target>/used/<content key>          last-used stamps for gc (content: a time)
    <root>/<target>/rejects.jsonl               specs the validator refused, with the reason
    <root>/<target>/stats.jsonl                 one line per run

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

__all__ = ["TargetCache", "CorruptEntry", "BlobRef", "content_key", "atomic_write",
           "sha256_bytes", "blank_symbol"]

_SYMBOL_BLANK = "@K@"


class CorruptEntry(ValueError):
    """An entry file that is not a whole JSON object (truncated, hand-edited)."""


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


def _json_bytes(doc: dict) -> bytes:
    """An entry-like document as compact JSON with sorted keys. Not indented on purpose:
    ``indent`` makes ``json`` fall back to its pure-Python encoder (0.55 ms per full-cache
    entry against 0.17 ms), and compact entries are 26 % smaller (6.3 vs 8.6 kB) and parse
    ~15 % faster, which a no-op rebuild does for every entry. ``wgradcache show`` is for
    reading."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


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


def _append_line(path: Path, record: dict) -> None:
    """One JSON line, written with a single O_APPEND write (whole lines under the lock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
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

    # -- blobs ----------------------------------------------------------------------
    def blob_path(self, key: str) -> Path:
        return self.blobs / f"{key}.hsaco"

    def has_blob(self, key: str) -> bool:
        return self.blob_path(key).is_file()

    def write_blob(self, key: str, data: bytes) -> BlobRef:
        ref = BlobRef(key, len(data), sha256_bytes(data))
        path = self.blob_path(key)
        if not (path.is_file() and path.stat().st_size == ref.size
                and sha256_bytes(path.read_bytes()) == ref.sha256):
            atomic_write(path, data)
        return ref

    def blob_ref(self, key: str) -> BlobRef:
        data = self.blob_path(key).read_bytes()
        return BlobRef(key, len(data), sha256_bytes(data))

    def read_blob(self, key: str) -> bytes:
        return self.blob_path(key).read_bytes()

    def blob_keys(self) -> list[str]:
        if not self.blobs.is_dir():
            return []
        return sorted(p.name[:-6] for p in self.blobs.glob("*.hsaco"))

    def stamp_used(self, key: str, when: float | None = None) -> None:
        """Last-used stamp for gc (explicit, not atime)."""
        atomic_write(self.used / key, f"{when if when is not None else time.time():.6f}".encode())

    def last_used(self, key: str) -> float:
        try:
            return float((self.used / key).read_text())
        except (FileNotFoundError, ValueError):
            return 0.0

    # -- entries --------------------------------------------------------------------
    def entry_path(self, identity_key: str) -> Path:
        return self.entries / f"{identity_key}.json"

    def read_entry(self, identity_key: str) -> dict | None:
        """The entry, or None when absent; CorruptEntry when it is not whole JSON."""
        return self._read_json(self.entry_path(identity_key))

    def write_entry(self, identity_key: str, entry: dict) -> None:
        atomic_write(self.entry_path(identity_key),
                     _json_bytes(entry))

    def remove_entry(self, identity_key: str) -> None:
        self.entry_path(identity_key).unlink(missing_ok=True)

    def entry_keys(self) -> list[str]:
        if not self.entries.is_dir():
            return []
        return sorted(p.stem for p in self.entries.glob("*.json"))

    def iter_entries(self) -> Iterator[tuple[str, dict | CorruptEntry]]:
        for key in self.entry_keys():
            try:
                entry = self.read_entry(key)
            except CorruptEntry as e:
                yield key, e
                continue
            if entry is not None:
                yield key, entry

    # -- stage-2 companions ----------------------------------------------------------
    def stage2_entries(self) -> dict[str, dict | CorruptEntry]:
        """name -> the companion entry of a stage-2 reduce kernel (two-stage split-K)."""
        d = self.dir / "stage2"
        out: dict[str, dict | CorruptEntry] = {}
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                out[p.stem] = self._read_json(p) or {}
            except CorruptEntry as e:
                out[p.stem] = e
        return out

    def write_stage2(self, name: str, entry: dict) -> None:
        atomic_write(self.dir / "stage2" / f"{name}.json",
                     _json_bytes(entry))

    # -- failures, rejects, stats ----------------------------------------------------
    def read_failure(self, identity_key: str) -> dict | None:
        try:
            return self._read_json(self.failed / f"{identity_key}.json")
        except CorruptEntry:
            return None

    def write_failure(self, identity_key: str, record: dict) -> None:
        atomic_write(self.failed / f"{identity_key}.json",
                     _json_bytes(record))

    def clear_failure(self, identity_key: str) -> None:
        (self.failed / f"{identity_key}.json").unlink(missing_ok=True)

    def append_reject(self, record: dict) -> None:
        _append_line(self.rejects_path, record)

    def rejects(self) -> list[dict]:
        return _read_lines(self.rejects_path)

    def append_stats(self, record: dict) -> None:
        _append_line(self.stats_path, record)

    def stats(self) -> list[dict]:
        return _read_lines(self.stats_path)

    @staticmethod
    def _read_json(path: Path) -> dict | None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise CorruptEntry(f"{path}: not whole JSON ({e.msg} at char {e.pos})") from None
        if not isinstance(doc, dict):
            raise CorruptEntry(f"{path}: not a JSON object")
        return doc
