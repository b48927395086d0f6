"""The native helper (``native.cpp``): compiled on first use, loaded once per process.

Two things are too slow from Python and have no C API: LLD (``ld.lld-22`` spends ~25 ms of
CPU per code object, nearly all process start-up; as a library it links one in ~0.7 ms) and a
loop over LLVM's C disassembler (one ctypes call per instruction cost more than the
decoding). LLVM ships LLD as static archives (Debian ``liblld-22-dev``), so, as Triton does
for its launcher, a small C++ file is compiled with the system's C++ compiler against those
archives and the shared libLLVM that codegen already loaded, into
``$XDG_CACHE_HOME/wgradcache/native/<key>/native.so``; key: the source and the digests of
the archives and libLLVM. One compiler run per machine (~3 s), under a file lock; the file
appears by rename, whole or not at all. Each load stamps its directory (``used``); building
a new helper removes the others nothing has loaded for ``PRUNE_AFTER_DAYS`` (one is left
behind by every change of the source or of LLVM, ~4 MB each).

Without the archives, headers or a compiler, :func:`native_library` says why and its users
fall back: ``lldlink`` to an ``ld.lld`` process, ``disasm`` to a ctypes loop (same bytes,
same text).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from wgradcache.compile import libllvm
from wgradcache.compile.discovery import MIN_LLVM_MAJOR, sha256_file, user_cache_dir

__all__ = ["PRUNE_AFTER_DAYS", "SOURCE", "NativeHelper", "build_native", "load_native",
           "native_inputs", "native_library", "prune_native"]

SOURCE = Path(__file__).with_name("native.cpp")
_ARCHIVES = ("liblldELF.a", "liblldCommon.a")
_USED = "used"  # touched on every load: when a helper was last used
PRUNE_AFTER_DAYS = 30
_vp, _cp, _int = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
_SIGNATURES = {
    "wgradcache_lld_main": (_int, [_int, ctypes.POINTER(_cp), ctypes.POINTER(_vp),
                                   ctypes.POINTER(_vp)]),
    "wgradcache_disassemble": (_vp, [_vp, _vp, ctypes.c_uint64, ctypes.c_uint64]),
    "wgradcache_free": (None, [_vp]),
}


def _compiler() -> str | None:
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    return next((p for c in ("c++", "g++", "clang++") if (p := shutil.which(c))), None)


def native_inputs(libllvm: Path) -> tuple[bool, str, dict[str, Path]]:
    """What compiling the helper needs beside ``libllvm``: ``(ok, reason, paths)``."""
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
        return False, ("no C++ compiler (c++, g++, clang++ or $CXX) to build the native "
                       "helper"), paths
    paths["cxx"] = Path(cxx)
    return True, "", paths


def _key(paths: dict[str, Path]) -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    for name in ("libllvm", *_ARCHIVES):
        h.update(f"{name}:{sha256_file(paths[name])}".encode())
    return h.hexdigest()[:24]


def build_native(paths: dict[str, Path]) -> Path:
    """The helper for these inputs, compiled unless this machine already has it."""
    from filelock import FileLock

    out_dir = user_cache_dir() / "native" / _key(paths)
    target = out_dir / "native.so"
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir / ".lock"), timeout=600):
        if target.is_file():
            return target
        tmp = out_dir / f"native.{os.getpid()}.tmp"
        argv = [str(paths["cxx"]), "-O2", "-shared", "-fPIC", "-std=c++17",
                f"-I{paths['include']}", str(SOURCE), "-o", str(tmp),
                *(str(paths[a]) for a in _ARCHIVES), str(paths["libllvm"]),
                f"-Wl,-rpath,{paths['libllvm'].parent}"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            said = proc.stderr.strip().splitlines()
            last = said[-1] if said else f"{argv[0]} exited with status {proc.returncode}"
            raise OSError(f"compiling the native helper failed: {last}")
        os.replace(tmp, target)
        (out_dir / _USED).touch()
    prune_native(out_dir)
    return target


def prune_native(keep: Path, max_age_days: float = PRUNE_AFTER_DAYS) -> list[Path]:
    """Remove the helpers beside ``keep`` that nothing has loaded for ``max_age_days`` (the
    newest of their ``used`` stamp, ``native.so`` and directory); one whose lock is held (being
    built) stays. A
    process that still maps a removed helper keeps it until it exits. Returns what went."""
    from filelock import FileLock, Timeout

    cutoff = time.time() - max_age_days * 86400
    removed = []
    for d in keep.parent.iterdir():
        if d == keep or not d.is_dir():
            continue
        stamps = [p.stat().st_mtime for p in (d, d / _USED, d / "native.so") if p.exists()]
        if max(stamps) >= cutoff:  # the directory's own: one being made has no stamp yet
            continue
        try:
            with FileLock(str(d / ".lock"), timeout=0):
                shutil.rmtree(d)
        except (Timeout, OSError):
            continue
        removed.append(d)
    return removed


@dataclass(frozen=True)
class NativeHelper:
    """The loaded helper and the file it came from (what ``wgradcache toolchain`` shows and
    ``lldlink`` records as the in-process linker's path)."""

    lib: ctypes.CDLL
    path: Path

    def take_string(self, ptr: int | None) -> str:
        """A malloc'ed C string from the helper as text, freed."""
        if not ptr:
            return ""
        try:
            return ctypes.string_at(ptr).decode(errors="replace")
        finally:
            self.lib.wgradcache_free(ptr)


def load_native(path: Path) -> NativeHelper:
    """The helper at ``path`` with its signatures (after this process's libLLVM: the helper
    binds to the one codegen loaded, by soname)."""
    libllvm.system_llvm()
    lib = ctypes.CDLL(str(path))
    with contextlib.suppress(OSError):  # a read-only cache directory: no stamp, no harm
        (path.parent / _USED).touch()
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return NativeHelper(lib, path)


@functools.cache
def native_library() -> tuple[NativeHelper | None, str]:
    """(the helper, "") or (None, why not), once per process."""
    lib = libllvm.system_llvm()
    if lib is None:
        return None, f"no libLLVM >= {MIN_LLVM_MAJOR} to build the native helper against"
    ok, why, paths = native_inputs(lib.path)
    if not ok:
        return None, why
    try:
        return load_native(build_native(paths)), ""
    except (OSError, AttributeError) as e:
        return None, str(e)

