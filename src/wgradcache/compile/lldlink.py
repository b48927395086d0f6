"""Which linker turns LLVM's relocatable object into a code object: LLD in this process when
it can be, else an ``ld.lld`` process per job.

Why in-process: ``ld.lld-22`` spends ~25 ms of CPU per code object, nearly all of it process
start-up (``ld.lld-22 --version`` alone costs ~20 ms), ~10 % of a job's codegen; LLD called
as a library links the same object in ~0.7 ms (measured on 10 walk jobs x 5, this machine).
LLVM ships LLD as static archives (Debian ``liblld-22-dev``), so, as Triton does for its
launcher, a ~40-line C++ file (``lld_link.cpp``) is compiled on first use with the system's
C++ compiler against those archives and the shared libLLVM that codegen already loaded,
into ``$XDG_CACHE_HOME/wgradcache/lld/<key>/`` (key: the source and the digests of the
archives and libLLVM; one compiler run per machine, under a file lock; ~2 s).

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
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from wgradcache.compile.toolchain import (
    MIN_LLVM_MAJOR,
    ToolchainError,
    find_linker,
    sha256_file,
    tool_version,
    user_cache_dir,
    version_major,
)

__all__ = ["LINKER_ENV", "InProcessLLD", "Linker", "LinkError", "in_process_lld",
           "link_in_process", "linker_choice", "select_linker"]

LINKER_ENV = "WGRADCACHE_LINKER"
LINKER_CHOICES = ("auto", "inprocess", "subprocess")
SHIM_SOURCE = Path(__file__).with_name("lld_link.cpp")
_ARCHIVES = ("liblldELF.a", "liblldCommon.a")
_CANNOT_RUN_AGAIN = 0x100


class LinkError(RuntimeError):
    """LLD rejected an object; the message is LLD's."""


@dataclass(frozen=True)
class Linker:
    """The linker this process uses: ``kind`` "inprocess" (``path``: the compiled shim) or
    "subprocess" (``path``: ``ld.lld``); ``version``: LLD's ``--version`` line (what the
    toolchain identity records); ``note``: why not in-process, when it is not."""

    kind: str
    path: Path
    version: str
    note: str = ""


class InProcessLLD:
    """LLD's ELF driver loaded from the shim; one link at a time per process (LLD keeps global
    state per link), objects passed through a private directory in ``/dev/shm``."""

    def __init__(self, path: Path):
        from wgradcache.compile.libllvm import system_llvm

        system_llvm()  # the shim binds to the libLLVM codegen loaded (same soname)
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        fn = self.lib.wgradcache_lld_main
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                       ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        self.lib.wgradcache_lld_free.argtypes = [ctypes.c_void_p]
        self._lock = threading.Lock()
        self._dir: Path | None = None
        self.broken = ""  # LLD's message once it says it cannot run again in this process
        rc, out, err = self.run(["--version"])
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        if rc != 0 or not lines:
            raise OSError(f"in-process LLD did not report its version: {err.strip()}")
        self.version = lines[0]

    def _take(self, ptr: ctypes.c_void_p) -> str:
        if not ptr.value:
            return ""
        try:
            return ctypes.string_at(ptr.value).decode(errors="replace")
        finally:
            self.lib.wgradcache_lld_free(ptr)

    def run(self, args: list[str]) -> tuple[int, str, str]:
        """``ld.lld args...`` in this process: (exit code, stdout, stderr)."""
        argv = [b"ld.lld", *(a.encode() for a in args)]
        arr = (ctypes.c_char_p * len(argv))(*argv)
        out, err = ctypes.c_void_p(), ctypes.c_void_p()
        with self._lock:
            if self.broken:
                raise ToolchainError(f"in-process LLD cannot link again in this process "
                                     f"({self.broken}); set {LINKER_ENV}=subprocess")
            rc = self.lib.wgradcache_lld_main(len(argv), arr, ctypes.byref(out),
                                              ctypes.byref(err))
            text_out, text_err = self._take(out), self._take(err)
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


def _compiler() -> str | None:
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    return next((p for c in ("c++", "g++", "clang++") if (p := shutil.which(c))), None)


def shim_inputs(libllvm: Path) -> tuple[bool, str, dict[str, Path]]:
    """What compiling the shim needs beside ``libllvm``: ``(ok, reason, paths)``."""
    libdir = libllvm.parent
    paths = {"include": libdir.parent / "include", "libllvm": libllvm,
             **{a: libdir / a for a in _ARCHIVES}}
    if not (paths["include"] / "lld" / "Common" / "Driver.h").is_file():
        return False, f"no LLD headers in {paths['include']} (install liblld-22-dev)", paths
    missing = [a for a in _ARCHIVES if not paths[a].is_file()]
    if missing:
        return False, f"no {', '.join(missing)} in {libdir} (install liblld-22-dev)", paths
    cxx = _compiler()
    if cxx is None:
        return False, "no C++ compiler (c++, g++, clang++ or $CXX) to build the LLD shim", paths
    paths["cxx"] = Path(cxx)
    return True, "", paths


def _shim_key(paths: dict[str, Path]) -> str:
    h = hashlib.sha256(SHIM_SOURCE.read_bytes())
    for name in ("libllvm", *_ARCHIVES):
        h.update(f"{name}:{sha256_file(paths[name])}".encode())
    return h.hexdigest()[:24]


def build_shim(paths: dict[str, Path]) -> Path:
    """The shim for these inputs, compiled once per machine (a lock keeps concurrent builds
    from racing; the file appears by rename, whole or not at all)."""
    from filelock import FileLock

    out_dir = user_cache_dir() / "lld" / _shim_key(paths)
    target = out_dir / "lld_link.so"
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir / ".lock"), timeout=600):
        if target.is_file():
            return target
        tmp = out_dir / f"lld_link.{os.getpid()}.tmp"
        libdir = paths["libllvm"].parent
        argv = [str(paths["cxx"]), "-O2", "-shared", "-fPIC", "-std=c++17",
                f"-I{paths['include']}", str(SHIM_SOURCE), "-o", str(tmp),
                *(str(paths[a]) for a in _ARCHIVES), str(paths["libllvm"]),
                f"-Wl,-rpath,{libdir}"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise OSError(f"compiling the LLD shim failed: {last}")
        os.replace(tmp, target)
    return target


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
    from wgradcache.compile.libllvm import system_llvm

    lib = system_llvm()
    if lib is None:
        return None, f"no libLLVM >= {MIN_LLVM_MAJOR} to link LLD against"
    ok, why, paths = shim_inputs(lib.path)
    if not ok:
        return None, why
    try:
        lld = InProcessLLD(build_shim(paths))
    except OSError as e:
        return None, str(e)
    if version_major(lld.version) < MIN_LLVM_MAJOR:
        return None, f"in-process LLD is too old: {lld.version}"
    return lld, ""


def in_process_lld() -> InProcessLLD:
    lld, why = _in_process()
    if lld is None:
        raise ToolchainError(f"no in-process LLD: {why}")
    return lld


def link_in_process(obj: bytes) -> bytes:
    """``ld.lld -shared`` of ``obj`` by the in-process LLD. Once LLD has said it cannot run
    again in this process (it recovered from a crash), an ``ld.lld`` process of the same
    version takes over, so a build worker goes on producing the same bytes; with none, a
    ToolchainError says what to do."""
    lld = in_process_lld()
    if not lld.broken:
        return lld.link(obj)
    path = find_linker()
    if tool_version(path) != lld.version:
        raise ToolchainError(f"in-process LLD cannot link again in this process "
                             f"({lld.broken}) and {path} is another LLD; set "
                             f"{LINKER_ENV}=subprocess")
    proc = subprocess.run([str(path), "-shared", "/dev/stdin", "-o", "/dev/stdout"],
                          input=obj, capture_output=True, timeout=600)
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
