"""Every write of the package: whole or not at all, into a folder held by descriptor, never
through a symbolic link.

A path names a folder and a file in it. The folder is opened once (``Folder``:
``O_DIRECTORY``, and ``O_NOFOLLOW`` where the caller says the folder may not be a link:
the cache's own folders), and every later create, rename, stat and unlink is relative to
that descriptor (``dir_fd=``), as ``shutil.rmtree``'s descriptor walk does. So a folder
renamed away and replaced by a symlink between two writes cannot redirect the second one:
it still lands in the folder that was opened (the cache compares that folder with what
its path names now, and stops when they differ). A write goes to a temporary file created
``O_CREAT | O_EXCL | O_NOFOLLOW`` (``temp_name``) beside its name, is fsynced and renamed
over it with ``os.replace``: a reader sees the old file or the new one, a rename replaces
a link or a second hard link without writing through it, and a failed write leaves no
temporary file. The mode is what the umask gives (``open``'s 0o666 less the umask).

For a path a user named (``--out``, ``--junit``, ``--stream``, ``--report-dir``) the
folder is theirs (``..`` or a symlinked folder in it is theirs to use), and what is
refused is a write landing somewhere the path does not say: a symlink at the path (it
would write its target, which may be anywhere), a directory, a FIFO or a device there
(``Refused``: "kind", what is there; "os_error", the strerror).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import weakref
from typing import TextIO

from wgradcache.files.capped import Refused, kind_of

__all__ = ["Folder", "TEMP_NAME", "temp_name", "write_text", "write_bytes", "open_out",
           "open_stream", "refusal"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
TEMP_NAME = re.compile(r"\.(?P<name>[A-Za-z0-9_.-]{1,120})\.[a-z0-9_]{8}\.tmp")
"""A temporary file of ``temp_name`` (and of ``mkstemp``'s names the cache used before):
what a process killed between create and rename leaves."""


def temp_name(name: str) -> str:
    """``.<name>.<8 random characters>.tmp``: where a write of ``name`` goes first."""
    return f".{name}.{secrets.token_hex(4)}.tmp"


class Folder:
    """A directory held open by descriptor; every name given to a method is one path
    component in it. ``path`` is for messages only: nothing re-resolves it."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path
        st = os.fstat(fd)
        self.ident = (st.st_dev, st.st_ino)
        self._close = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, path: str | os.PathLike, *, follow: bool = True) -> Folder:
        """The directory ``path`` (OSError otherwise; ``follow=False``: ELOOP for a
        symlink)."""
        flags = _DIR if follow else _DIR | os.O_NOFOLLOW
        return cls(os.open(path, flags), os.fspath(path))

    def close(self) -> None:
        self._close()

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    def sub(self, name: str, *, create: bool = False) -> Folder | None:
        """The folder ``name`` in this one, never through a symlink (OSError: ELOOP or
        ENOTDIR); None when absent and not ``create``."""
        try:
            fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=self.fd)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.mkdir(name, dir_fd=self.fd)
            except FileExistsError:
                pass  # a concurrent writer made it
            fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=self.fd)
        return Folder(fd, self.join(name))

    def lstat(self, name: str) -> os.stat_result | None:
        """``name``'s own stat (a link is not followed), None when absent."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def holds(self, name: str, other: Folder) -> bool:
        """Whether ``name`` here is still the directory ``other`` holds open."""
        try:
            st = self.lstat(name)
        except OSError:
            return False
        return st is not None and stat.S_ISDIR(st.st_mode) and \
            (st.st_dev, st.st_ino) == other.ident

    def scandir(self) -> list[os.DirEntry]:
        with os.scandir(self.fd) as it:
            return list(it)

    def open_file(self, name: str, flags: int, mode: int = 0o666) -> int:
        """``os.open(name, flags | O_NOFOLLOW | O_CLOEXEC)`` in this folder."""
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        """Remove ``name`` (a link itself, never its target); absent is no error."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def _temp(self, name: str) -> tuple[int, str]:
        while True:
            tmp = temp_name(name)
            try:
                return os.open(tmp, _NEW, 0o666, dir_fd=self.fd), tmp
            except FileExistsError:
                continue

    def write(self, name: str, data: bytes) -> None:
        """``data`` as ``name``: temp file, fsync, ``os.replace``. OSError on failure (its
        filename the path when the error names none), and no temporary file left."""
        try:
            fd, tmp = self._temp(name)
        except OSError as e:
            raise _naming(e, self.join(name)) from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException as e:
            self.unlink(tmp)
            if isinstance(e, OSError):
                raise _naming(e, self.join(name)) from None
            raise

    def writable(self, name: str) -> None:
        """``Refused`` ("kind") when something other than a regular file is at ``name``:
        what ``put`` and ``stream`` refuse, for a caller that checks before its work."""
        try:
            st = self.lstat(name)
        except OSError as e:
            raise Refused("os_error", e.strerror or str(e)) from None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise Refused("kind", kind_of(st.st_mode))

    def put(self, name: str, data: bytes) -> None:
        """``write`` for a file a user named: ``Refused`` when something other than a
        regular file is at ``name`` (a symlink is never written through) or the write
        fails."""
        self.writable(name)
        try:
            self.write(name, data)
        except OSError as e:
            raise Refused("os_error", e.strerror or str(e)) from None

    def stream(self, name: str) -> TextIO:
        """``name`` made empty and opened for appending text: a fresh file renamed into
        place at once (as ``put`` would, and refusing what ``put`` refuses), so each line
        written is there the moment it is flushed."""
        self.writable(name)
        try:
            fd, tmp = self._temp(name)
            try:
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            except OSError:
                os.close(fd)
                self.unlink(tmp)
                raise
        except OSError as e:
            raise Refused("os_error", e.strerror or str(e)) from None
        return os.fdopen(fd, "w", encoding="utf-8")


def _naming(e: OSError, path: str) -> OSError:
    """The error naming ``path`` (a temp file's or no name is not the user's)."""
    return type(e)(e.errno, e.strerror or str(e), path)


def open_out(path: str | os.PathLike) -> Folder:
    """The output folder a user named, created with its parents; ``Refused``."""
    try:
        os.makedirs(path, exist_ok=True)
        return Folder.open(path)
    except (OSError, ValueError) as e:
        raise Refused("os_error", getattr(e, "strerror", None) or str(e)) from None


def _split(path: str | os.PathLike) -> tuple[Folder, str]:
    path = os.fspath(path)
    name = os.path.basename(path)
    if name in ("", ".", ".."):
        raise Refused("kind", "a directory")
    try:
        return Folder.open(os.path.dirname(path) or "."), name
    except (OSError, ValueError) as e:
        raise Refused("os_error", getattr(e, "strerror", None) or str(e)) from None


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """``data`` to ``path``, whose folder must exist; ``Refused`` otherwise."""
    folder, name = _split(path)
    try:
        folder.put(name, data)
    finally:
        folder.close()


def write_text(path: str | os.PathLike, text: str) -> None:
    """``text`` (UTF-8) to ``path``; ``Refused`` otherwise."""
    write_bytes(path, text.encode("utf-8"))


def open_stream(path: str | os.PathLike) -> TextIO:
    """``Folder.stream`` of ``path``; ``Refused`` otherwise."""
    folder, name = _split(path)
    try:
        return folder.stream(name)
    finally:
        folder.close()


def refusal(e: Refused) -> str:
    """A write's refusal in words: "a symbolic link, not a regular file", or the
    strerror."""
    return f"{e.detail}, not a regular file" if e.code == "kind" else str(e.detail)
