"""One write of a text file a user named (``--out``): whole or not at all, never through a
symbolic link, never onto something that is not a regular file.

The path is the user's, so ``..`` in it is theirs to use; what the writer refuses is a
write that would land somewhere the path does not say: a symlink at the path (it would
write its target, which may be anywhere), a directory, a FIFO or a device there. The text
goes to a temporary file beside the path and is renamed over it, so a reader never sees
half a file and a failed write leaves the old one.
"""

from __future__ import annotations

import os
import stat
import tempfile

from wgradcache.files.capped import Refused, kind_of

__all__ = ["write_text"]


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``; ``Refused`` ("kind": what is there; "os_error":
    the strerror) otherwise."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except (OSError, ValueError) as e:
        raise Refused("os_error", getattr(e, "strerror", None) or str(e)) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise Refused("kind", kind_of(st.st_mode))
    parent = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".wgradcache-", suffix=".tmp")
    except (OSError, ValueError) as e:
        raise Refused("os_error", getattr(e, "strerror", None) or str(e)) from None
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 is for the temporary name only
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise Refused("os_error", e.strerror or str(e)) from None
