"""The toolchain: which LLVM runs codegen, which linker links, and the identity that keys
the cache.

Codegen is in-process: through the system's libLLVM >= 22 (``libllvm``, no assertions,
what ``llc-22`` runs on) when there is one, else through llvmlite's LLVM (an assertions
build, ~1.6x slower, same bytes); ``WGRADCACHE_CODEGEN=libllvm|llvmlite|llc`` forces one
(``llc``: a process per job, the benchmarks' reference).
Linking needs LLVM 22's LLD: in-process when it can be built (``lldlink``), else an
``ld.lld`` process. Everything that can change the bytes of a code object
goes into :class:`ToolchainIdentity`, so a cache built with another LLVM or another linker
is never mistaken for this one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "CODE_OBJECT_VERSION",
    "MIN_LLVM_MAJOR",
    "ToolchainError",
    "ToolchainIdentity",
    "CODEGEN_ENV",
    "codegen_backend",
    "find_linker",
    "find_disassembler",
    "find_llc",
    "identity_digest",
    "keyed_fields",
    "sha256_file",
    "user_cache_dir",
    "version_major",
    "llvm_library_candidates",
    "tool_version",
    "toolchain_identity",
    "toolchain_report",
    "with_code_object_version",
]

CODE_OBJECT_VERSION = 5
"""AMDHSA code object version we emit, chosen on purpose rather than taken from LLVM.

LLVM 22 defaults to v6 (``EI_ABIVERSION`` 4); ROCm loaders older than 6.x only read up to
v5, and v5 carries everything our kernels need (hidden kernel arguments, the kernel
descriptor layout). The module flag ``amdhsa_code_object_version`` = 500 selects it
(llvm22-amdgpu-facts.md §5, checked on gfx942 and gfx1250).
"""

MIN_LLVM_MAJOR = 22
"""Oldest LLVM whose tools know gfx1250 (linker relocations, disassembler opcodes)."""

CODEGEN_ENV = "WGRADCACHE_CODEGEN"
CODEGEN_BACKENDS = ("auto", "libllvm", "llvmlite", "llc")

_INSTALL_HINT = "install one with `apt-get install lld-22` (Debian/Ubuntu) or `make deps`"


class ToolchainError(RuntimeError):
    """A required tool is missing or unusable; the message says how to fix it in one line."""


def tool_version(path: Path | str) -> str:
    """The first line of ``<tool> --version`` (e.g. ``Debian LLD 22.1.8 (compatible ...)``)."""
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    # llvm-objdump prints a banner line first; the version is on the "LLVM version" line.
    for ln in lines:
        if "version" in ln.lower() or re.search(r"\bLLD \d", ln):
            return ln
    return lines[0] if lines else ""


def version_major(version_line: str) -> int:
    m = re.search(r"(?:LLD|version)\s+(\d+)\.", version_line)
    return int(m.group(1)) if m else 0


def _find_tool(rocm_name: str, versioned: str, plain: str) -> Path | None:
    """``$ROCM_PATH/llvm/bin/<rocm_name>``, else ``<versioned>`` on PATH, else ``<plain>`` >= 22.

    ROCm's copy comes first: when a user has ROCm, its LLVM matches the loader they run.
    """
    rocm = os.environ.get("ROCM_PATH")
    if rocm:
        cand = Path(rocm) / "llvm" / "bin" / rocm_name
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(versioned)
    if found:
        return Path(found)
    found = shutil.which(plain)
    if found and version_major(tool_version(found)) >= MIN_LLVM_MAJOR:
        return Path(found)
    return None


def find_linker() -> Path:
    """The LLVM 22 ``ld.lld`` that turns LLVM's relocatable object into a code object."""
    found = _find_tool("ld.lld", f"ld.lld-{MIN_LLVM_MAJOR}", "ld.lld")
    if found is None:
        raise ToolchainError(
            f"no LLVM >= {MIN_LLVM_MAJOR} linker (ld.lld) found in $ROCM_PATH/llvm/bin or on "
            f"PATH: {_INSTALL_HINT}"
        )
    return found


def find_disassembler() -> Path | None:
    """An LLVM 22 ``llvm-objdump``, or None: the ISA listing then comes from a second codegen.

    Optional on purpose: the Debian ``lld-22`` package alone does not ship it, and the code
    object never depends on it (see ``codegen.compile_ir``).
    """
    return _find_tool("llvm-objdump", f"llvm-objdump-{MIN_LLVM_MAJOR}", "llvm-objdump")


def find_llc() -> Path:
    """An LLVM 22 ``llc``: the subprocess codegen (``WGRADCACHE_CODEGEN=llc``)."""
    found = _find_tool("llc", f"llc-{MIN_LLVM_MAJOR}", "llc")
    if found is None:
        raise ToolchainError(f"{CODEGEN_ENV}=llc but no llc >= {MIN_LLVM_MAJOR} found in "
                             f"$ROCM_PATH/llvm/bin or on PATH: install `llvm-{MIN_LLVM_MAJOR}`")
    return found


def llvm_library_candidates() -> list[Path]:
    """Shared libLLVMs to try, in order (``libllvm`` loads the first that is >= 22).

    Beside the linker first (``<linker dir>/../lib``: Debian's ld.lld-22 links against the
    libLLVM of ``/usr/lib/llvm-22/lib``), then ``$ROCM_PATH/llvm/lib``, then
    ``/usr/lib/llvm-22/lib``: an older ROCm's LLVM next to its linker does not hide
    Debian's 22.
    """
    dirs = []
    try:
        dirs.append(find_linker().resolve().parent.parent / "lib")
    except ToolchainError:
        pass
    rocm = os.environ.get("ROCM_PATH")
    if rocm:
        dirs.append(Path(rocm) / "llvm" / "lib")
    dirs.append(Path(f"/usr/lib/llvm-{MIN_LLVM_MAJOR}/lib"))
    out: list[Path] = []
    for d in dict.fromkeys(dirs):
        out += sorted(p for pat in ("libLLVM.so*", "libLLVM-*.so*") for p in d.glob(pat)
                      if p.is_file() and p not in out)
    return out


def codegen_backend() -> str:
    """What runs codegen (``$WGRADCACHE_CODEGEN``): "libllvm" (in-process, the default when
    a libLLVM >= 22 loads), "llvmlite" (in-process, the fallback) or "llc" (an ``llc``
    process per job: what benchmarks/build.py compares our build with, same orchestration)."""
    want = os.environ.get(CODEGEN_ENV, "auto") or "auto"
    if want not in CODEGEN_BACKENDS:
        raise ToolchainError(f"{CODEGEN_ENV}={want!r}: expected one of "
                             f"{', '.join(CODEGEN_BACKENDS)}")
    if want in ("llvmlite", "llc"):
        return want
    from wgradcache.compile.libllvm import system_llvm

    if system_llvm() is not None:
        return "libllvm"
    if want == "libllvm":
        raise ToolchainError(f"{CODEGEN_ENV}=libllvm but no libLLVM >= {MIN_LLVM_MAJOR} "
                             f"loads: install `llvm-{MIN_LLVM_MAJOR}` (`make deps`)")
    return "llvmlite"


def _codegen_library(backend: str) -> tuple[str, Path]:
    """(LLVM version, the file whose bytes decide codegen) of a backend; llc's is its
    version line and the libLLVM it runs on (Debian's llc is a thin front of it)."""
    if backend == "llc":
        llc = find_llc()
        from wgradcache.compile.libllvm import system_llvm

        lib = system_llvm()
        return tool_version(llc), lib.path if lib else llc
    if backend == "libllvm":
        from wgradcache.compile.libllvm import system_llvm

        lib = system_llvm()
        return lib.version, lib.path
    from llvmlite.binding import ffi, llvm_version_info

    return ".".join(str(v) for v in llvm_version_info), Path(ffi.lib._name)


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/wgradcache`` (default ``~/.cache/wgradcache``): per-machine memos
    (file digests) and the compiled native helper (``native``), never the code object cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wgradcache"


def sha256_file(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) in the user's cache directory:
    the LLVM libraries are 100-180 MB and hashing one was a fifth of a no-op rebuild."""
    st = path.stat()
    stamp = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    memo = user_cache_dir() / "file-digests.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(stamp), str):
        return known[stamp]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:  # best effort: a read-only home only costs the hash next time
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**(known if isinstance(known, dict) else {}),
                                   stamp: digest}))
        os.replace(tmp, memo)
    except OSError:
        pass
    return digest


@dataclass(frozen=True)
class ToolchainIdentity:
    """What produced a code object, beyond the IR and the codegen options."""

    codegen: str  # "libllvm", "llvmlite" or "llc" (codegen_backend)
    llvm_version: str  # of the library that runs codegen
    codegen_digest: str  # its sha256: same version string, other build => other key
    linker_path: str
    linker_version: str
    code_object_version: int

    def to_dict(self) -> dict:
        return asdict(self)

    def digest(self) -> str:
        """sha256 of ``keyed_fields``: what content keys and up-to-date checks compare."""
        return identity_digest(self.to_dict())


def keyed_fields(identity: dict) -> dict:
    """The fields of a toolchain identity (``ToolchainIdentity.to_dict``) that key the
    cache: all but ``linker_path``.

    The bytes depend on what the linker is (its version line), not where it is: ``ld.lld-22``
    in ``/usr/bin`` or ``/usr/lib/llvm-22/bin``, or LLD in the native helper under a user's
    home, must share a cache. Debian's and other builds of the same LLD differ in their
    version line (and in ``.comment``, facts §7), so they do get different keys.
    """
    return {k: v for k, v in identity.items() if k != "linker_path"}


def identity_digest(identity: dict) -> str:
    """sha256 of the keyed fields of a toolchain identity (a dict, as workers receive it)."""
    return hashlib.sha256(json.dumps(keyed_fields(identity), sort_keys=True).encode()
                          ).hexdigest()


def toolchain_identity() -> ToolchainIdentity:
    """The identity of this process's toolchain."""
    from wgradcache.compile.lldlink import linker_choice

    return _toolchain_identity(codegen_backend(), linker_choice())


@functools.cache
def _toolchain_identity(backend: str, linker_choice: str) -> ToolchainIdentity:
    from wgradcache.compile.lldlink import select_linker

    version, library = _codegen_library(backend)
    linker = select_linker()
    return ToolchainIdentity(
        codegen=backend,
        llvm_version=version,
        codegen_digest=sha256_file(library),
        linker_path=str(linker.path),
        linker_version=linker.version,
        code_object_version=CODE_OBJECT_VERSION,
    )


def toolchain_report() -> dict:
    """What this machine would build with, for ``wgradcache toolchain``: the identity (what
    keys the cache), where each tool is, and the digest that content keys include."""
    ident = toolchain_identity()
    from wgradcache.compile.libllvm import system_llvm
    from wgradcache.compile.lldlink import LINKER_ENV, select_linker
    from wgradcache.compile.native import native_library

    helper, helper_why = native_library()
    linker = select_linker()

    lib = system_llvm()
    llc = _find_tool("llc", f"llc-{MIN_LLVM_MAJOR}", "llc")
    return {
        **ident.to_dict(),
        "toolchain_digest": ident.digest(),
        "codegen_env": os.environ.get(CODEGEN_ENV, ""),
        "linker": linker.kind,
        "linker_note": linker.note,
        "linker_env": os.environ.get(LINKER_ENV, ""),
        "libllvm": str(lib.path) if lib else None,
        "llc": str(llc) if llc else None,
        "native_helper": helper._name if helper else f"none: {helper_why}",
        "disassembler": ((f"libllvm ({'native' if helper else 'ctypes'} loop)") if lib else
                         str(find_disassembler() or "") or "none (second codegen)"),
    }


_COV_FLAG = re.compile(r'!"amdhsa_code_object_version",\s*i32\s+(\d+)')
_MD_ID = re.compile(r"^!(\d+)\s*=", re.MULTILINE)


def with_code_object_version(ir_text: str, version: int = CODE_OBJECT_VERSION) -> str:
    """``ir_text`` with the module flag that pins the code object version.

    Callers (the lowering, tests) need not know about the flag. IR that already pins the
    same version is returned unchanged; IR that pins another one is an error, since the
    caller asked for something contradictory. Named metadata defined twice is merged by the
    parser, so a second ``!llvm.module.flags`` line is enough even if the IR has flags.
    """
    want = version * 100
    found = _COV_FLAG.search(ir_text)
    if found:
        if int(found.group(1)) != want:
            raise ValueError(
                f"IR pins amdhsa_code_object_version {found.group(1)}, options ask for {want}"
            )
        return ir_text
    ids = [int(m) for m in _MD_ID.findall(ir_text)]
    n = max(ids) + 1 if ids else 0
    sep = "" if ir_text.endswith("\n") else "\n"
    return (
        f"{ir_text}{sep}!llvm.module.flags = !{{!{n}}}\n"
        f'!{n} = !{{i32 1, !"amdhsa_code_object_version", i32 {want}}}\n'
    )
