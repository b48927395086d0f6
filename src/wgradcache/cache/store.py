"""The content-addressed on-disk cache of one target (DESIGN §7).

    <root>/<target>/blobs/<content key>.hsaco   code objects, shared by identities
                                                (``.cubin`` for the NVIDIA targets)
    <root>/<target>/blobs/<content key>.json    its sidecar (``BlobMeta``: what a relink needs)
    <root>/<target>/entries/<identity key>.json one per kernel; written last (commit marker)
    <root>/<target>/stage2/<dw>-wsr<R>.json     stage-2 reduce kernels of two-stage entries
    <root>/<target>/failed/<identity key>.json  jobs that failed, with the reason
    <root>/<target>/used/<content key>          publish stamps for gc's LRU (content: a time)
    <root>/<target>/timings/<class slug>.json   measured times of one device class
                                                (``cache/timings.py``: rows and the fit)
    <root>/<target>/rejects.jsonl               specs the validator refused: one line each
    <root>/<target>/stats.jsonl                 one line per run
    <root>/<target>/.lock                       the writer lock, created by the first write

This module owns that layout: every path above is built here, and every record is read and
written through ``cache/entry.py``'s typed records, never as raw JSON elsewhere. That is
why it is one module: each path it builds is proven to stay under the root by
the same folder checks (``checked_dir``) and key checks (``_file``) that every reader and
writer here goes through; a split into readers and writers would export those proofs, and
a second module building cache paths is what this one exists to prevent. The record schema
(``entry.py``) and the capped read (``files/capped.py``) are already elsewhere.

A cache directory is input (CI artifacts, caches copied between machines), so this module
is also its one reader, and trusts nothing in it:

* a path is built only from a checked key (64 hex digits), a catalog target and a fixed
  folder name, and no folder below the root (``<target>``, ``entries``, ``blobs``...) may
  be a symlink or anything but a directory (``CacheRefused``): so every path stays under
  the root. The root itself may be a symlink: that is where the user put the cache;
* a file is read only if ``lstat`` says it is a regular file, through
  ``O_NOFOLLOW | O_NONBLOCK`` and an ``fstat`` of the descriptor (a symlink swapped in
  meanwhile, a FIFO or a device is never opened or never read: nothing blocks), and at
  most ``MAX_RECORD`` (1 MiB) for records and stamps, ``MAX_LOG`` (16 MiB) for the two
  logs and ``MAX_BLOB`` (64 MiB) for a code object; anything else is ``CorruptEntry``
  (``<path>: corrupt: <reason>``), reported by the command, never a traceback;
* a blob is trusted only after ``check_blob``: its size and sha256 equal what the entry
  records.

Every writer and remover (build's publish and stage-2 writer, gc, merge, refresh) works
through folders held by descriptor (``_Folders``): the target folder and each subfolder
are opened once, ``O_DIRECTORY | O_NOFOLLOW``, and every later create, rename, stat and
unlink is relative to that descriptor (``files/written.py``'s ``Folder``). Each use first
proves that the path still names the folder held; a folder renamed away and replaced by a
symlink mid-run stops the run with ``CacheMoved`` (one line naming it), and nothing is
written or removed outside the cache (a swap between the proof and the call still lands in
the folder held). Every file is written to a temporary name in the same directory
(``O_EXCL | O_NOFOLLOW``) and moved into place with ``os.replace``, so a reader sees the
old file or the new one, never half of one; it gets the mode the umask gives. A write
that fails (ENOSPC, EROFS, EACCES, ENOTDIR) raises the ``OSError`` with the path it was
writing and leaves nothing half-published: a blob whose sidecar could not be written is
removed again. An entry names its blob's size and sha256 and is written after the blob:
an entry on disk means its blob was whole when it was published. Writers take one lock
per target directory (a ``flock`` on ``.lock``), created only when something is written,
so a read-only cache serves
every read; readers never lock.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wgradcache.cache.entry import (
    BlobMeta,
    CorruptEntry,
    Entry,
    FailureRecord,
    RejectRecord,
    Stage2Entry,
    check_key,
    is_key,
    read_record,
    record_bytes,
    record_line,
)
from wgradcache.cache.timings import (
    MAX_TIMINGS_FILE,
    TimingsFile,
    is_slug,
    over_cap,
    read_timings,
    timings_bytes,
)
from wgradcache.files.capped import Refused, kind_of
from wgradcache.files.capped import read_capped as _read_file
from wgradcache.files.written import TEMP_NAME, Folder

__all__ = ["blob_suffix", "TargetCache", "CorruptEntry", "CacheRefused", "CacheMoved", "BlobRef",
           "content_key",
           "atomic_write", "read_capped", "sha256_bytes", "blank_symbol", "stage2_name",
           "stage2_of", "MAX_RECORD", "MAX_LOG", "MAX_BLOB"]

MAX_RECORD = 1 << 20
"""Entries, sidecars, stage-2 and failure records, stamps: a full-cache entry is ~6 kB, a
sidecar ~5 kB."""
MAX_LOG = 16 << 20
"""``rejects.jsonl`` (one line per refused identity) and ``stats.jsonl`` (one per run)."""
MAX_BLOB = 64 << 20
"""A code object: the largest of a full gfx1250 cache is well under 1 MiB."""

_SYMBOL_BLANK = "@K@"
_STAGE2_NAME = re.compile(r"[a-z0-9]{1,16}-wsr[0-9]{1,6}")


class CacheRefused(OSError):
    """A cache layout this tool will not touch: a folder below the root that is a symlink
    or not a directory, a root that is not a directory, a ``.lock`` that is not a regular
    file, a target folder the catalog does not know. One line; the CLI exits 2 (the cache
    directory is input). An ``OSError`` so that a publish counts it as a failed write."""

    def __init__(self, path: str | os.PathLike, reason: str):
        super().__init__(errno.EPERM, reason, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class CacheMoved(OSError):
    """A folder of the cache (``<target>``, ``entries``, ``blobs``...) that this run holds
    open is no longer what its path names: renamed away, a symlink or another folder put in
    its place. The run stops (one line naming the folder, exit 1); nothing was written or
    removed through the new path, since every write and unlink is relative to the folder
    held. An ``OSError`` of ``STOPPING``'s errno, so that a build stops publishing."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(errno.EPERM, "was replaced while this run used it (a symlink or "
                         "another folder is there now): stopped, nothing written or removed "
                         "through it", str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


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


# -- reading ------------------------------------------------------------------------------
def _size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


_REFUSALS = {  # files.capped's refusal codes in the cache's words
    "os_error": lambda detail, cap: f"unreadable ({detail})",
    "kind": lambda detail, cap: f"{detail}, not a regular file (not followed)",
    "size": lambda detail, cap: f"{detail} bytes, over the {_size_text(cap)} cap",
    "replaced": lambda detail, cap: "replaced while being read",
    "grew": lambda detail, cap: f"grew past the {_size_text(cap)} cap while read",
}


def read_capped(path: Path, cap: int) -> bytes | None:
    """The bytes of the regular file ``path``, None when it is absent; CorruptEntry when it
    is anything else (a symlink, a FIFO, a device, a directory: never followed or opened
    for reading), larger than ``cap`` bytes, or unreadable. ``files.capped`` with
    ``follow=False``: the descriptor is opened with O_NOFOLLOW | O_NONBLOCK and must be
    the file ``lstat`` saw, so nothing swapped in between is read and no open blocks."""
    try:
        return _read_file(path, cap, follow=False)
    except Refused as e:
        raise CorruptEntry(f"{path}: corrupt: {_REFUSALS[e.code](e.detail, cap)}") from None


# -- writing ------------------------------------------------------------------------------
def _with_path(e: OSError, path: Path) -> OSError:
    """The error naming ``path`` when it names none (a ``write`` that hit ENOSPC)."""
    if e.filename is None:
        return type(e)(e.errno, e.strerror or str(e), str(path))
    return e


def _at(e: OSError, path: Path) -> OSError:
    """The error of an operation relative to a folder descriptor, naming ``path`` (its own
    filename is the bare name)."""
    if isinstance(e, (CacheRefused, CacheMoved)):
        return e
    return type(e)(e.errno, e.strerror or str(e), str(path))


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, ``os.replace`` (``Folder.write``): never a
    half-written file. The file gets the umask's mode; a failure raises the OSError naming
    ``path`` and leaves no temp file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = Folder.open(path.parent)
    except OSError as e:
        raise _with_path(e, path) from None
    try:
        folder.write(path.name, data)
    finally:
        folder.close()


class _Folders:
    """The target folder and its subfolders, each opened once by descriptor (``Folder``,
    never through a symlink) the first time a writer or gc uses it. Every later use first
    proves that the path still names the folder held (``st_dev``/``st_ino`` of the name in
    its parent's descriptor), else ``CacheMoved``; the write or unlink itself is relative
    to the descriptor, so even a swap between that proof and the call lands in the folder
    held, inside the cache. The root is opened following links: it is where the user put
    the cache."""

    def __init__(self, cache: TargetCache):
        self._cache = cache
        self._root: Folder | None = None
        self._top: Folder | None = None
        self._subs: dict[str, Folder] = {}

    def held(self, sub: str | None) -> bool:
        return self._top is not None and (sub is None or sub in self._subs)

    def get(self, sub: str | None, create: bool) -> Folder | None:
        """``<target>`` (``sub`` None) or ``<target>/<sub>``, proven still in place; None
        when absent and not ``create``."""
        top = self._target(create)
        if top is None or sub is None:
            return top
        held = self._subs.get(sub)
        if held is None:
            held = self._open(top, sub, self._cache.dir / sub, create)
            if held is not None:
                self._subs[sub] = held
        elif not top.holds(sub, held):
            raise CacheMoved(self._cache.dir / sub)
        return held

    def _target(self, create: bool) -> Folder | None:
        c = self._cache
        if self._top is not None:
            assert self._root is not None
            if not self._root.holds(c.target, self._top):
                raise CacheMoved(c.dir)
            return self._top
        if self._root is None:
            try:
                try:
                    self._root = Folder.open(c.root)
                except FileNotFoundError:
                    if not create:
                        return None
                    os.makedirs(c.root, exist_ok=True)
                    self._root = Folder.open(c.root)
            except NotADirectoryError:
                raise CacheRefused(c.root, "not a directory: not a cache") from None
            except OSError as e:
                raise _with_path(e, c.root) from None
        self._top = self._open(self._root, c.target, c.dir, create)
        return self._top

    @staticmethod
    def _open(parent: Folder, name: str, path: Path, create: bool) -> Folder | None:
        try:
            st = parent.lstat(name)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise CacheRefused(path, f"{kind_of(st.st_mode)}, not a directory: not "
                                         "followed out of the cache (remove it)")
            if st is None and not create:
                return None
            return parent.sub(name, create=create)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped since the lstat
                raise CacheMoved(path) from None
            raise _at(e, path) from None


def _line(record: dict) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _read_lines(path: Path) -> list[dict]:
    """The JSON objects of a log, one per line; a line that is not one (a torn last line
    from a killed writer, a line edited by hand) is skipped."""
    data = read_capped(path, MAX_LOG)
    if data is None:
        return []
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


class _WriterLock:
    """The target's writer lock: a reentrant ``flock`` on ``<target>/.lock`` (the lock the
    filelock package takes, so older versions of this tool and this one exclude each
    other), opened relative to the target folder's descriptor, created by the first write
    (so a read-only cache is never asked for it) and refused when ``.lock`` is a directory,
    a symlink or anything but a regular file. Failing to create or take it raises the
    OSError naming the lock's path."""

    def __init__(self, cache: TargetCache):
        self._cache = cache
        self._fd: int | None = None
        self._depth = 0

    @property
    def is_locked(self) -> bool:
        return self._depth > 0

    def __enter__(self) -> _WriterLock:
        if self._depth == 0:
            self._fd = self._open()
        self._depth += 1
        return self

    def _open(self) -> int:
        path = self._cache.dir / ".lock"
        top = self._cache._folder(None, create=True)
        assert top is not None
        try:
            st = top.lstat(".lock")
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise CacheRefused(path, f"{kind_of(st.st_mode)}, not a regular file: not "
                                         "a lock this tool will open (remove it)")
            fd = top.open_file(".lock", os.O_RDWR | os.O_CREAT | os.O_NONBLOCK)
        except OSError as e:
            raise _at(e, path) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CacheRefused(path, "not a regular file: not a lock this tool will "
                                         "open (remove it)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException as e:
            os.close(fd)
            if isinstance(e, OSError):
                raise _at(e, path) from None
            raise
        return fd

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def blob_suffix(target: str) -> str:
    """The blob file suffix of a target's code objects, its backend's (``.hsaco``, ``.cubin``;
    ``.hsaco`` for a name the catalog lacks): six characters, which the key slicing below
    relies on."""
    from wgradcache.model.backends import backend_of
    from wgradcache.model.targets import TARGETS

    return backend_of(target).blob_suffix if target in TARGETS else ".hsaco"


class TargetCache:
    """One target's directory of the cache; see the module docstring for what it trusts."""

    _SUBDIRS = ("blobs", "entries", "failed", "used", "stage2", "timings")

    def __init__(self, root: str | os.PathLike, target: str):
        from wgradcache.model.targets import check_target

        self.root = Path(root)
        ok, why = check_target(target) if isinstance(target, str) else (False, "not a name")
        if not ok:
            raise CacheRefused(self.root / str(target), f"not a target folder: {why}")
        self.target = target
        self.blob_suffix = blob_suffix(target)
        self.dir = self.root / target
        self.blobs = self.dir / "blobs"
        self.entries = self.dir / "entries"
        self.failed = self.dir / "failed"
        self.used = self.dir / "used"
        self.stage2 = self.dir / "stage2"
        self.timings = self.dir / "timings"
        self.rejects_path = self.dir / "rejects.jsonl"
        self.stats_path = self.dir / "stats.jsonl"
        self._lock = _WriterLock(self)
        self._folders = _Folders(self)
        self._dirs_ok: set[str] = set()
        # key -> ((size, mtime_ns, inode), sha256) of the blob file last hashed
        self._blob_ok: dict[str, tuple[tuple[int, int, int], str]] = {}

    # -- folders ----------------------------------------------------------------------
    def checked_dir(self, sub: str | None) -> Path | None:
        """``<target>`` (``sub`` None) or ``<target>/<sub>``, None when it does not exist;
        CacheRefused when it or a folder above it (up to the root) is a symlink or not a
        directory. Checked once per folder and object: a build asks thousands of times."""
        name = sub or ""
        path = self.dir / sub if sub else self.dir
        if name in self._dirs_ok:
            return path
        if sub and self.checked_dir(None) is None:
            return None
        if not sub:
            try:
                is_dir = stat.S_ISDIR(os.stat(self.root).st_mode)
            except FileNotFoundError:
                return None
            except OSError as e:
                raise CacheRefused(self.root, f"cannot be read ({e.strerror})") from None
            if not is_dir:
                raise CacheRefused(self.root, "not a directory: not a cache")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CacheRefused(path, f"cannot be read ({e.strerror})") from None
        if not stat.S_ISDIR(st.st_mode):
            raise CacheRefused(path, f"{kind_of(st.st_mode)}, not a directory: not followed "
                                     "out of the cache (remove it)")
        self._dirs_ok.add(name)
        return path

    def check_layout(self) -> bool:
        """Whether the target folder exists, after proving it and every folder in it a
        directory (CacheRefused otherwise) and opening each (``_Folders``): what gc checks
        before it removes anything, so a symlinked ``used/`` is refused before an entry is
        touched, and a folder swapped later stops it (``CacheMoved``)."""
        if self.checked_dir(None) is None:
            return False
        for sub in self._SUBDIRS:
            self.checked_dir(sub)
        if self._folder(None, create=False) is not None:
            for sub in self._SUBDIRS:
                self._folder(sub, create=False)
        return True

    def _folder(self, sub: str | None, create: bool) -> Folder | None:
        """The folder held open for writes and removals (``_Folders.get``)."""
        return self._folders.get(sub, create)

    def _names(self, sub: str | None) -> list[os.DirEntry]:
        """The folder's listing: through its descriptor once one is held (gc), else by
        path after ``checked_dir``."""
        if self._folders.held(sub):
            folder = self._folder(sub, create=False)
            assert folder is not None
            try:
                return folder.scandir()
            except OSError as e:
                raise CacheRefused(folder.path, f"cannot be listed ({e.strerror})") from None
        d = self.checked_dir(sub)
        if d is None:
            return []
        try:
            with os.scandir(d) as it:
                return list(it)
        except OSError as e:
            raise CacheRefused(d, f"cannot be listed ({e.strerror})") from None

    def _file(self, sub: str, key: str, ext: str) -> Path:
        """``<target>/<sub>/<key><ext>`` for a checked key (CorruptEntry otherwise)."""
        ok, why = check_key(key)
        if not ok:
            raise CorruptEntry(f"{self.dir / sub}: corrupt: {why}")
        return self.dir / sub / f"{key}{ext}"

    def _write(self, sub: str | None, name: str, data: bytes) -> None:
        """``<sub>/<name>`` by ``Folder.write`` in the folder held open."""
        folder = self._folder(sub, create=True)
        assert folder is not None
        folder.write(name, data)

    def _unlink(self, sub: str | None, name: str) -> None:
        """Remove ``<sub>/<name>`` relative to the folder held open (never through a
        symlinked or swapped folder; a symlink itself is removed, not followed)."""
        folder = self._folder(sub, create=False)
        if folder is None:
            return
        try:
            folder.unlink(name)
        except OSError as e:
            raise _at(e, Path(folder.join(name))) from None

    def temp_files(self) -> list[tuple[str | None, str, float]]:
        """(folder, name, mtime) of each temporary file of the store's naming
        (``files.written.TEMP_NAME``: ``.<name>.<8 characters>.tmp``) in the target folder
        and its subfolders, regular files only (``lstat``): what a process killed between
        a temp file's create and its rename leaves. Nothing else is ever listed, so gc
        removes nothing it did not name."""
        out = []
        for sub in (None, *self._SUBDIRS):
            for e in self._names(sub):
                if TEMP_NAME.fullmatch(e.name) and e.is_file(follow_symlinks=False):
                    out.append((sub, e.name, e.stat(follow_symlinks=False).st_mtime))
        return sorted(out, key=lambda t: (t[0] or "", t[1]))

    def temp_path(self, sub: str | None, name: str) -> Path:
        return self.dir / sub / name if sub else self.dir / name

    def remove_temp(self, sub: str | None, name: str) -> None:
        """Remove a temporary file ``temp_files`` listed (call under the writer lock)."""
        if sub not in (None, *self._SUBDIRS) or not TEMP_NAME.fullmatch(name):
            raise CorruptEntry(f"{self.dir}: corrupt: {name[:60]!r} is not a temporary file "
                               "of this store")
        self._unlink(sub, name)

    # -- locking --------------------------------------------------------------------
    def lock(self) -> _WriterLock:
        """The target's writer lock; one reentrant object per TargetCache (a second
        ``flock`` on the same file in this process would wait for the first forever)."""
        return self._lock

    # -- blobs and their sidecars ---------------------------------------------------
    def blob_path(self, key: str) -> Path:
        return self._file("blobs", key, self.blob_suffix)

    def sidecar_path(self, key: str) -> Path:
        return self._file("blobs", key, ".json")

    def has_blob(self, key: str) -> bool:
        """A regular file is there (not a proof of its bytes: ``check_blob`` is)."""
        path = self.blob_path(key)
        if self.checked_dir("blobs") is None:
            return False
        try:
            return stat.S_ISREG(os.lstat(path).st_mode)
        except OSError:
            return False

    def check_blob(self, key: str, size: int, sha256: str) -> tuple[bool, str]:
        """(ok, reason): blob ``key`` is a regular file of ``size`` bytes hashing to
        ``sha256``. The proof ``build`` (up to date), ``gc`` and ``select`` trust a blob
        by: a truncation, a flipped byte or an emptied file all fail it. The size is
        compared first (an ``lstat``), so a wrong-sized or 8 GB blob is never read; a
        blob's hash is computed once per object and file version (entries share blobs).
        The reason starts ``blob <key>`` or, for a file that is not one, with its path."""
        name = f"blob {str(key)[:16]}"
        try:
            path = self.blob_path(key)
            st = os.lstat(path) if self.checked_dir("blobs") is not None else None
        except FileNotFoundError:
            st = None
        except (OSError, CorruptEntry) as e:
            return False, str(e)
        if st is None:
            return False, f"{name} is missing"
        if not stat.S_ISREG(st.st_mode):
            return False, f"{path}: corrupt: {kind_of(st.st_mode)}, not a regular file"
        if st.st_size != size:
            return False, f"{name} is {st.st_size} bytes, its entry records {size}"
        version = (st.st_size, st.st_mtime_ns, st.st_ino)
        got = self._blob_ok.get(key)
        if got is None or got[0] != version:
            try:
                data = read_capped(path, MAX_BLOB)
            except CorruptEntry as e:
                return False, str(e)
            if data is None:
                return False, f"{name} is missing"
            got = self._blob_ok[key] = (version, sha256_bytes(data))
        if got[1] != sha256:
            return False, f"{name} does not hash to the sha256 its entry records"
        return True, ""

    def unusable(self, entry: Entry | Stage2Entry | CorruptEntry) -> str:
        """Why a record as ``iter_entries`` / ``stage2_entries`` yield it cannot be served
        or kept, as one line that names its file: its ``CorruptEntry``, or its blob failing
        ``check_blob``; "" when it can. What gc removes and select skips."""
        if isinstance(entry, CorruptEntry):
            return str(entry)
        ok, why = self.check_blob(entry.blob, entry.blob_size, entry.blob_sha256)
        if ok:
            return ""
        path = (self.entry_path(entry.identity_key) if isinstance(entry, Entry)
                else self.stage2_path(entry.name))
        # "blob <key> is 0 bytes, ..." or "<blob path>: corrupt: a FIFO, ..."
        return f"{path}: corrupt: {why}" if why.startswith("blob ") else f"{path}: {why}"

    def companion_unusable(self, entry: Entry) -> str:
        """Why a two-stage entry cannot be served for want of its stage-2 reduce kernel
        (its record missing or corrupt, or its blob failing ``check_blob``), as one line
        naming the entry's file; "" when it can or needs none. Publish order writes the
        companion first, so this is a hand-deleted or damaged companion: serving the entry
        would launch stage 1 with nothing to reduce its workspace."""
        name = stage2_of(entry.identity)
        if name is None:
            return ""
        path = self.entry_path(entry.identity_key)
        try:
            s2 = self.read_stage2(name)
        except CorruptEntry as e:
            return f"{path}: stage-2 kernel {name}: {e}"
        if s2 is None:
            return f"{path}: stage-2 kernel {name} is missing"
        why = self.unusable(s2)
        return f"{path}: stage-2 kernel {name}: {why}" if why else ""

    def write_blob(self, key: str, data: bytes, meta: BlobMeta | None = None) -> BlobRef:
        """The blob (unless the same bytes are there), then its sidecar when given (call
        under the writer lock). A blob written here whose sidecar cannot be written is
        removed again, so a full disk leaves no blob without its sidecar."""
        ref = BlobRef(key, len(data), sha256_bytes(data))
        path = self.blob_path(key)
        fresh = not self.check_blob(key, ref.size, ref.sha256)[0]
        if fresh:
            self._blob_ok.pop(key, None)
            self._write("blobs", path.name, data)
        if meta is not None:
            try:
                self._write("blobs", self.sidecar_path(key).name, record_bytes(meta))
            except OSError:
                if fresh:
                    self.remove_blob(key)
                raise
        return ref

    def blob_ref(self, key: str) -> BlobRef:
        data = self.read_blob(key)
        return BlobRef(key, len(data), sha256_bytes(data))

    def read_blob(self, key: str) -> bytes:
        """The blob's bytes (at most ``MAX_BLOB``); FileNotFoundError when absent,
        CorruptEntry when it is not a regular file or is too large."""
        data = read_capped(self.blob_path(key), MAX_BLOB) \
            if self.checked_dir("blobs") is not None else None
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "no such blob", str(self.blob_path(key)))
        return data

    def read_sidecar(self, key: str, facts=None) -> BlobMeta | None:
        """The metadata of an existing blob, or None (no blob, or no whole sidecar: the blob
        is then compiled again rather than relinked). ``facts``: its kernel's
        ``wgrad.abi.RecordFacts``, which an older sidecar needs to be relinked
        (``entry.read_record``)."""
        if not self.has_blob(key):
            return None
        try:
            return self._read(BlobMeta, self.sidecar_path(key), facts=facts)
        except CorruptEntry:
            return None

    def relinkable(self) -> frozenset[str]:
        """The content keys whose blob and sidecar both exist as regular files: what a
        build may relink to instead of compiling. One directory listing, no file read."""
        names = {e.name for e in self._names("blobs") if e.is_file(follow_symlinks=False)}
        return frozenset(n[:-6] for n in names
                         if n.endswith(self.blob_suffix) and f"{n[:-6]}.json" in names
                         and is_key(n[:-6]))

    def forget_sidecar(self, key: str) -> None:
        """Remove a sidecar a relink could not read, so that ``relinkable`` stops listing
        its blob and the next build compiles it (call under the writer lock)."""
        self._unlink("blobs", self.sidecar_path(key).name)

    def remove_blob(self, key: str) -> None:
        """The blob, its sidecar and its stamp (call under the writer lock)."""
        self._blob_ok.pop(key, None)
        self._unlink("blobs", self.blob_path(key).name)
        self._unlink("blobs", self.sidecar_path(key).name)
        self._unlink("used", key)

    def blob_keys(self) -> list[str]:
        """The content keys of the blobs: regular files named ``<key>.hsaco`` (``.cubin``
        on NVIDIA targets; a symlink
        or a FIFO in ``blobs/`` is not a blob and is never opened)."""
        return sorted(n[:-6] for n in (e.name for e in self._names("blobs")
                                       if e.is_file(follow_symlinks=False))
                      if n.endswith(self.blob_suffix) and is_key(n[:-6]))

    def blob_sizes(self) -> dict[str, int]:
        """Content key -> the blob's size in bytes (``lstat``: nothing followed or read)."""
        out = {}
        for e in self._names("blobs"):
            n = e.name
            if n.endswith(self.blob_suffix) and is_key(n[:-6]) and \
                    e.is_file(follow_symlinks=False):
                out[n[:-6]] = e.stat(follow_symlinks=False).st_size
        return dict(sorted(out.items()))

    def blob_mtime(self, key: str) -> float:
        """The blob's mtime (``lstat``; relative to ``blobs/`` once it is held: gc's
        grace), 0.0 when it cannot be read."""
        path = self.blob_path(key)
        try:
            if self._folders.held("blobs"):
                folder = self._folder("blobs", create=False)
                st = folder.lstat(path.name) if folder is not None else None
                return st.st_mtime if st is not None else 0.0
            return os.lstat(path).st_mtime
        except (CacheMoved, CacheRefused):
            raise
        except OSError:
            return 0.0

    def stamp_used(self, key: str, when: float | None = None) -> None:
        """The stamp gc's LRU orders by: written when a build or a merge publishes the blob
        (explicit, not atime)."""
        self._write("used", self._file("used", key, "").name,
                    f"{when if when is not None else time.time():.6f}".encode())

    def last_used(self, key: str) -> float:
        try:
            data = read_capped(self._file("used", key, ""), 64) \
                if self.checked_dir("used") is not None else None
            v = float(data.decode("ascii")) if data else 0.0
        except (CorruptEntry, ValueError, UnicodeDecodeError):
            return 0.0
        return v if v == v and abs(v) != float("inf") else 0.0

    # -- entries --------------------------------------------------------------------
    def entry_path(self, identity_key: str) -> Path:
        return self._file("entries", identity_key, ".json")

    def read_entry(self, identity_key: str) -> Entry | None:
        """The entry, or None when absent; CorruptEntry when it is not whole, or is not
        the entry its file name and folder say (another identity, another target)."""
        path = self.entry_path(identity_key)
        entry = self._read(Entry, path, "entries")
        if entry is None:
            return None
        if entry.identity_key != identity_key:
            raise CorruptEntry(f"{path}: corrupt: identity_key {entry.identity_key[:16]} is "
                               "not its file name")
        if entry.target != self.target or entry.identity["target"] != self.target:
            raise CorruptEntry(f"{path}: corrupt: target {entry.target[:40]!r} in the "
                               f"{self.target} folder")
        return entry

    def write_entry(self, entry: Entry) -> None:
        self._write("entries", self.entry_path(entry.identity_key).name, record_bytes(entry))

    def remove_entry(self, identity_key: str) -> None:
        self._unlink("entries", self.entry_path(identity_key).name)

    def entry_keys(self) -> list[str]:
        """The identity keys of the entries: files named ``<key>.json`` (a name that is
        not a key is not an entry: nothing builds a path from it)."""
        return sorted(n[:-5] for n in (e.name for e in self._names("entries"))
                      if n.endswith(".json") and is_key(n[:-5]))

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
        if not isinstance(name, str) or not _STAGE2_NAME.fullmatch(name):
            raise CorruptEntry(f"{self.stage2}: corrupt: {str(name)[:40]!r} is not a "
                               "stage-2 name (<dtype>-wsr<R>)")
        return self.stage2 / f"{name}.json"

    def read_stage2(self, name: str) -> Stage2Entry | None:
        """The companion ``name`` (``stage2_name``), None when absent; CorruptEntry."""
        path = self.stage2_path(name)
        entry = self._read(Stage2Entry, path, "stage2")
        if entry is not None and entry.name != name:
            raise CorruptEntry(f"{path}: corrupt: name {entry.name[:40]!r} is not its file "
                               "name")
        return entry

    def stage2_entries(self) -> dict[str, Stage2Entry | CorruptEntry]:
        """name -> the companion entry of a stage-2 reduce kernel (two-stage split-K)."""
        out: dict[str, Stage2Entry | CorruptEntry] = {}
        names = sorted(e.name[:-5] for e in self._names("stage2") if e.name.endswith(".json"))
        for name in names:
            if not _STAGE2_NAME.fullmatch(name):
                continue
            try:
                entry = self.read_stage2(name)
            except CorruptEntry as e:
                out[name] = e
                continue
            if entry is not None:
                out[name] = entry
        return out

    def write_stage2(self, entry: Stage2Entry) -> None:
        self._write("stage2", self.stage2_path(entry.name).name, record_bytes(entry))

    def remove_stage2(self, name: str) -> None:
        self._unlink("stage2", self.stage2_path(name).name)

    # -- timings (one file per device class) ------------------------------------------
    def timings_path(self, slug: str) -> Path:
        """``timings/<slug>.json`` for a slug ``DeviceClass.slug`` makes (CorruptEntry for
        anything else: a name from input never becomes a path)."""
        if not is_slug(slug):
            raise CorruptEntry(f"{self.timings}: corrupt: {str(slug)[:60]!r} is not a device "
                               "class (<name>-<12 hex digits>)")
        return self.timings / f"{slug}.json"

    def timing_classes(self) -> list[str]:
        """The slugs of the device classes with a timings file (a name that is no slug is
        not one: nothing builds a path from it)."""
        return sorted(n[:-5] for n in (e.name for e in self._names("timings"))
                      if n.endswith(".json") and is_slug(n[:-5]))

    def read_timings(self, slug: str) -> TimingsFile | None:
        """The class's timings, None when it has none; CorruptEntry when the file is not
        whole, or holds another class than its name says."""
        path = self.timings_path(slug)
        if self.checked_dir("timings") is None:
            return None
        data = read_capped(path, MAX_TIMINGS_FILE)
        if data is None:
            return None
        got = read_timings(data, str(path))
        if got.device.slug() != slug:
            raise CorruptEntry(f"{path}: corrupt: its device class is "
                               f"{got.device.slug()}, not its file name")
        return got

    def write_timings(self, tf: TimingsFile) -> None:
        """The class's file, whole (call under the writer lock: read, merge, write)."""
        why = over_cap(tf)
        if why:
            raise CorruptEntry(f"{self.timings_path(tf.device.slug())}: {why}: not written")
        data = timings_bytes(tf)
        if len(data) > MAX_TIMINGS_FILE:
            raise CorruptEntry(f"{self.timings_path(tf.device.slug())}: {len(data)} bytes, "
                               f"over the {_size_text(MAX_TIMINGS_FILE)} cap: not written")
        self._write("timings", self.timings_path(tf.device.slug()).name, data)

    def remove_timings(self, slug: str) -> None:
        self._unlink("timings", self.timings_path(slug).name)

    # -- failures, rejects, stats ----------------------------------------------------
    def read_failure(self, identity_key: str) -> FailureRecord | None:
        """The job's failure record; None when absent or not whole (then it is retried)."""
        try:
            rec = self._read(FailureRecord, self._file("failed", identity_key, ".json"),
                             "failed")
        except CorruptEntry:
            return None
        return rec if rec is None or rec.identity_key == identity_key else None

    def write_failure(self, record: FailureRecord) -> None:
        self._write("failed", self._file("failed", record.identity_key, ".json").name,
                    record_bytes(record))

    def clear_failure(self, identity_key: str) -> None:
        self._unlink("failed", self._file("failed", identity_key, ".json").name)

    def record_rejects(self, rejected: dict[str, RejectRecord], accepted: set[str]) -> None:
        """One line per rejected identity: ``rejected`` (identity key -> its record) replaces
        what the file said of those identities, ``accepted`` ones leave it (the rules
        changed). The file is rewritten only when that changes it, and the writer lock is
        taken only then, so a no-op build writes nothing and runs on a read-only cache."""
        def merged() -> tuple[list[RejectRecord], dict, dict]:
            lines = self.rejects()
            old = {r.identity_key: r for r in lines}
            new = {k: r for k, r in old.items() if k not in accepted}
            new.update(rejected)
            return lines, old, new

        lines, old, new = merged()
        if new == old and len(lines) == len(old):  # (an older version appended duplicates)
            return
        with self.lock():
            lines, old, new = merged()  # again: another writer may have changed it
            self._write(None, self.rejects_path.name,
                        b"".join(record_line(r) for r in new.values()))

    def rejects(self) -> list[RejectRecord]:
        """The lines of ``rejects.jsonl`` that are whole records; a torn last line from a
        killed writer, or a line edited into something else, is skipped."""
        if not self.checked_dir(None):
            return []
        data = read_capped(self.rejects_path, MAX_LOG)
        out = []
        for n, line in enumerate((data or b"").splitlines(), 1):
            try:
                out.append(read_record(RejectRecord, line, f"{self.rejects_path}:{n}"))
            except CorruptEntry:
                continue
        return out

    def append_stats(self, record: dict) -> bool:
        """One line at the end of ``stats.jsonl``, in a single O_APPEND write (whole lines
        without the lock). A log, so best effort: False, and nothing raised, when it cannot
        be written (a read-only cache answering an up-to-date build)."""
        name = self.stats_path.name
        try:
            top = self._folder(None, create=True)
            assert top is not None
            st = top.lstat(name)
            if st is not None and not stat.S_ISREG(st.st_mode):
                return False
            fd = top.open_file(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            os.write(fd, _line(record))
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def stats(self) -> list[dict]:
        return _read_lines(self.stats_path) if self.checked_dir(None) else []

    def _read(self, cls, path: Path, sub: str | None = None, facts=None):
        """The record of type ``cls`` at ``path``, None when absent; CorruptEntry."""
        if self.checked_dir(sub) is None:
            return None
        data = read_capped(path, MAX_RECORD)
        if data is None:
            return None
        return read_record(cls, data, str(path), self.target, facts)
