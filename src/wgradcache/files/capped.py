"""One capped read of a regular file, for every reader of outside input.

Two policies, one loop. ``follow=False`` (the cache: a symlink inside it is never followed):
``lstat`` first, so a symlink, FIFO, device or directory is refused before any open and an
oversized file before any read; the open adds ``O_NOFOLLOW`` and the descriptor must be the
file ``lstat`` saw (a swap in between is refused). ``follow=True`` (a file a user named,
which may be a link to a regular file): the open follows, ``fstat`` of the descriptor
decides what was opened. Both open ``O_NONBLOCK`` (a FIFO's open does not wait for a
writer) and read at most ``cap`` + 1 bytes in 1 MiB chunks (``/dev/zero`` or a file that
grows ends there).

Refusals raise ``Refused`` with a code and its detail; each caller words its own line.
"""

from __future__ import annotations

import os
import stat

__all__ = ["Refused", "kind_of", "read_capped"]

_CHUNK = 1 << 20
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, as a refusal names it ("a FIFO")."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class Refused(Exception):
    """Why a file was not read. ``code``: "os_error" (``detail``: the strerror), "kind"
    (not a regular file; ``detail``: ``kind_of``), "size" (over the cap before reading;
    ``detail``: its size), "replaced" (not the file ``lstat`` saw), "grew" (past the cap
    while read)."""

    def __init__(self, code: str, detail: str | int = ""):
        super().__init__(code, detail)
        self.code, self.detail = code, detail


def _lstat_regular(path, cap: int) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise Refused("os_error", e.strerror or str(e)) from None
    if not stat.S_ISREG(st.st_mode):
        raise Refused("kind", kind_of(st.st_mode))
    if st.st_size > cap:
        raise Refused("size", st.st_size)
    return st


def _open(path, follow: bool, missing_ok: bool) -> int | None:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        return os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError) as e:
        if missing_ok:
            return None
        raise Refused("os_error", e.strerror or str(e)) from None
    except OSError as e:  # ELOOP: a symlink swapped in since the lstat
        raise Refused("os_error", e.strerror or str(e)) from None


def _read_all(fd: int, cap: int) -> bytes:
    chunks, left = [], cap + 1
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_capped(path: str | os.PathLike, cap: int, *, follow: bool,
                missing_ok: bool = True) -> bytes | None:
    """The bytes of the regular file at ``path`` (at most ``cap``); None when it is absent
    and ``missing_ok``; ``Refused`` otherwise (see the module docstring)."""
    seen = None if follow else _lstat_regular(path, cap)
    if seen is None and not follow:
        if missing_ok:
            return None
        raise Refused("os_error", os.strerror(2))
    fd = _open(path, follow, missing_ok)
    if fd is None:
        return None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode):
            raise Refused("kind" if follow else "replaced", kind_of(now.st_mode))
        if seen is not None and (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
            raise Refused("replaced")
        data = _read_all(fd, cap)
    except OSError as e:
        raise Refused("os_error", e.strerror or str(e)) from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise Refused("grew" if seen is not None else "size", len(data))
    return data
