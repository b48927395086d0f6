"""Which linker turns LLVM's relocatable object into a code object: LLD in this process when
it can be, else an ``ld.lld`` process per job.

Why in-process: ``ld.lld-22`` spends ~25 ms of CPU per code object, nearly all of it process
start-up (``ld.lld-22 --version`` alone costs ~20 ms), ~10 % of a job's codegen; LLD called
as a library links the same object in ~0.7 ms (measured on 10 walk jobs x 5, this machine).
LLD has no C API: its driver is a function of the native helper (``native``).

The code objects are byte-identical to ``ld.lld-22``'s (tested) and the identity records
LLD's own ``--version`` line, the same line ``ld.lld-22 --version`` prints: a cache built
either way is the same cache. When the archives, headers or compiler are missing, the
subprocess linker is used and :func:`select_linker` says why (``wgradcache toolchain``).
``WGRADCACHE_LINKER=auto|inprocess|subprocess`` forces a choice (``inprocess`` fails if it
cannot be had).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from wgradcache.compile.discovery import (
    MIN_LLVM_MAJOR,
    ToolchainError,
    find_linker,
    tool_version,
    version_major,
)
from wgradcache.compile.native import NativeHelper, native_library

__all__ = ["LINKER_ENV", "InProcessLLD", "Linker", "LinkError", "in_process_lld",
           "link_in_process", "linker_choice", "select_linker", "subprocess_argv"]

LINKER_ENV = "WGRADCACHE_LINKER"
LINKER_CHOICES = ("auto", "inprocess", "subprocess")
_CANNOT_RUN_AGAIN = 0x100


class LinkError(RuntimeError):
    """LLD rejected an object; the message is LLD's."""


@dataclass(frozen=True)
class Linker:
    """The linker this process uses: ``kind`` "inprocess" (``path``: the native helper) or
    "subprocess" (``path``: ``ld.lld``); ``version``: LLD's ``--version`` line (what the
    toolchain identity records); ``note``: why not in-process, when it is not."""

    kind: str
    path: Path
    version: str
    note: str = ""


class InProcessLLD:
    """LLD's ELF driver in the native ``helper``; one link at a time per process (LLD
    keeps global state per link), objects passed through a private directory in
    ``/dev/shm``."""

    def __init__(self, helper: NativeHelper):
        self.helper = helper
        self.path = helper.path
        self._lock = threading.Lock()
        self._dir: Path | None = None
        self.broken = ""  # LLD's message once it says it cannot run again in this process
        rc, out, err = self.run(["--version"])
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        if rc != 0 or not lines:
            raise OSError(f"in-process LLD did not report its version: {err.strip()}")
        self.version = lines[0]

    def run(self, args: list[str]) -> tuple[int, str, str]:
        """``ld.lld args...`` in this process: (exit code, stdout, stderr)."""
        argv = [b"ld.lld", *(a.encode() for a in args)]
        arr = (ctypes.c_char_p * len(argv))(*argv)
        out, err = ctypes.c_void_p(), ctypes.c_void_p()
        with self._lock:
            if self.broken:
                raise ToolchainError(f"in-process LLD cannot link again in this process "
                                     f"({self.broken}); set {LINKER_ENV}=subprocess")
            rc = self.helper.lib.wgradcache_lld_main(len(argv), arr, ctypes.byref(out),
                                                     ctypes.byref(err))
            text_out = self.helper.take_string(out.value)
            text_err = self.helper.take_string(err.value)
            if rc & _CANNOT_RUN_AGAIN:
                self.broken = text_err.strip() or f"exit status {rc & 0xff}"
        return rc & 0xff, text_out, text_err

    def _workdir(self) -> Path:
        if self._dir is None:
            shm = Path("/dev/shm")
            base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
            self._dir = Path(tempfile.mkdtemp(prefix="wgradcache-lld-", dir=base))
            atexit.register(shutil.rmtree, self._dir, True)
        return self._dir

    def link(self, obj: bytes) -> bytes:
        """``ld.lld -shared`` of one relocatable object: the code object's bytes."""
        d = self._workdir()
        src, dst = d / f"{threading.get_ident()}.o", d / f"{threading.get_ident()}.hsaco"
        src.write_bytes(obj)
        try:
            rc, _, err = self.run(["-shared", "--threads=1", str(src), "-o", str(dst)])
            if rc != 0:
                raise LinkError(err.replace(str(src), "<object>").strip()
                                or f"exit status {rc}")
            return dst.read_bytes()
        finally:
            src.unlink(missing_ok=True)
            dst.unlink(missing_ok=True)


def linker_choice() -> str:
    """``$WGRADCACHE_LINKER``, checked."""
    want = os.environ.get(LINKER_ENV, "auto") or "auto"
    if want not in LINKER_CHOICES:
        raise ToolchainError(f"{LINKER_ENV}={want!r}: expected one of "
                             f"{', '.join(LINKER_CHOICES)}")
    return want


@functools.cache
def _in_process() -> tuple[InProcessLLD | None, str]:
    """(the in-process LLD, "") or (None, why not)."""
    lib, why = native_library()
    if lib is None:
        return None, why
    try:
        lld = InProcessLLD(lib)
    except OSError as e:
        return None, str(e)
    if version_major(lld.version) < MIN_LLVM_MAJOR:
        return None, f"in-process LLD is too old: {lld.version}"
    return lld, ""


def in_process_lld() -> InProcessLLD:
    """This process's in-process LLD; ToolchainError with the reason when there is none."""
    lld, why = _in_process()
    if lld is None:
        raise ToolchainError(f"no in-process LLD: {why}")
    return lld


def subprocess_argv(path: Path) -> list[str]:
    """``ld.lld -shared`` reading the object on stdin, writing the code object to stdout."""
    return [str(path), "-shared", "/dev/stdin", "-o", "/dev/stdout"]


@functools.cache
def _ld_lld() -> tuple[Path, str]:
    """The ``ld.lld`` a broken in-process LLD hands over to, and its version line: asked
    once per process, not once per link (``--version`` is a ~20 ms process)."""
    path = find_linker()
    return path, tool_version(path)


def link_in_process(obj: bytes) -> bytes:
    """``ld.lld -shared`` of ``obj`` by the in-process LLD. Once LLD has said it cannot run
    again in this process (it recovered from a crash), an ``ld.lld`` process of the same
    version takes over, so a build worker goes on producing the same bytes; with none, a
    ToolchainError says what to do."""
    lld = in_process_lld()
    if not lld.broken:
        return lld.link(obj)
    path, version = _ld_lld()
    if version != lld.version:
        raise ToolchainError(f"in-process LLD cannot link again in this process "
                             f"({lld.broken}) and {path} is another LLD; set "
                             f"{LINKER_ENV}=subprocess")
    proc = subprocess.run(subprocess_argv(path), input=obj, capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise LinkError(proc.stderr.decode(errors="replace").strip()
                        or f"exit status {proc.returncode}")
    return proc.stdout


def select_linker() -> Linker:
    """The linker of this process (``$WGRADCACHE_LINKER``; "auto": in-process if possible)."""
    return _select_linker(linker_choice())


@functools.cache
def _select_linker(want: str) -> Linker:
    note = f"{LINKER_ENV}=subprocess"
    if want != "subprocess":
        lld, why = _in_process()
        if lld is not None:
            return Linker("inprocess", lld.path, lld.version)
        if want == "inprocess":
            raise ToolchainError(f"{LINKER_ENV}=inprocess but {why}")
        note = why
    path = find_linker()
    return Linker("subprocess", path, tool_version(path), note)
