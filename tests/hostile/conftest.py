"""Helpers for the hostile tests: a canary folder beside a cache, a snapshot of a tree that
follows nothing and reads no huge file, so "nothing changed" can be asserted byte for byte,
and a deadline that fails a test instead of letting a blocked read hang the suite."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
from pathlib import Path

import pytest


@contextlib.contextmanager
def deadline(seconds: int = 120, what: str = "still running"):
    """Fail, rather than hang the suite, when the block runs past ``seconds`` (a command
    that blocks on a FIFO, say): TimeoutError("<what> after N s ...")."""
    def alarm(signum, frame):
        raise TimeoutError(f"{what} after {seconds} s: a read blocked")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


HASHED_UP_TO = 64 << 20  # a sparse 8 GB blob is recorded by its size, never read


def tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root``, nothing followed: a file by its sha256 and mode (by its size
    past ``HASHED_UP_TO``), a link by its target, anything else by its mode."""
    out: dict[str, tuple] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath, name)
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode) and st.st_size > HASHED_UP_TO:
                out[rel] = ("big", st.st_size, st.st_mode)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode)
            else:
                out[rel] = ("other", st.st_mode)
    return out


class Canary:
    """``<tmp>/canary``: files an attack would read, overwrite or delete through a symlink
    (a secret, a copy of a real entry, stamps), to prove untouched with ``unchanged``."""

    def __init__(self, tmp: Path):
        self.dir = tmp / "canary"
        (self.dir / "sub").mkdir(parents=True)
        (self.dir / "secret.txt").write_bytes(b"the deploy key\n")
        (self.dir / "sub" / "y.hsaco").write_bytes(b"\x7fELF not yours\n")
        self.before: dict[str, tuple] | None = None

    def seal(self) -> None:
        """Snapshot what the test planted; ``unchanged`` compares against it."""
        self.before = tree(self.dir)

    def unchanged(self) -> bool:
        return tree(self.dir) == self.before


@pytest.fixture
def canary(tmp_path) -> Canary:
    return Canary(tmp_path)
