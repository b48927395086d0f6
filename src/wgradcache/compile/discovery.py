"""The bottom of the compile layer: its constants and where this machine's LLVM 22 tools are.

Everything here is plain lookup (paths, ``--version`` lines, file digests) and imports
nothing of ours, so every other compile module can build on it: ``libllvm`` finds its
library through :func:`llvm_library_candidates`, ``native`` keys its helper with
:func:`sha256_file`, ``lldlink`` falls back to :func:`find_linker`, and ``toolchain`` (the
top) turns what was found into the identity that keys the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = [
    "CODEGEN_ENV",
    "MIN_LLVM_MAJOR",
    "ToolchainError",
    "find_disassembler",
    "find_linker",
    "find_llc",
    "find_ptxas",
    "ptxas_version",
    "PTXAS_ENV",
    "NVDISASM_ENV",
    "NVIDIA_INSTALL",
    "cuda_tool_dirs",
    "find_cuobjdump",
    "find_nvdisasm",
    "find_tool",
    "llvm_library_candidates",
    "sha256_file",
    "tool_version",
    "user_cache_dir",
    "version_major",
]

MIN_LLVM_MAJOR = 22
"""Oldest LLVM whose tools know gfx1250 (linker relocations, disassembler opcodes)."""

CODEGEN_ENV = "WGRADCACHE_CODEGEN"
"""Which LLVM runs codegen (``toolchain.codegen_backend`` reads it)."""

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
    """The major version in a ``--version`` line; 0 when there is none."""
    m = re.search(r"(?:LLD|version)\s+(\d+)\.", version_line)
    return int(m.group(1)) if m else 0


def find_tool(name: str) -> Path | None:
    """``$ROCM_PATH/llvm/bin/<name>``, else ``<name>-22`` on PATH, else ``<name>`` >= 22.

    ROCm's copy comes first: when a user has ROCm, its LLVM matches the loader they run.
    """
    rocm = os.environ.get("ROCM_PATH")
    if rocm:
        cand = Path(rocm) / "llvm" / "bin" / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(f"{name}-{MIN_LLVM_MAJOR}")
    if found:
        return Path(found)
    found = shutil.which(name)
    if found and version_major(tool_version(found)) >= MIN_LLVM_MAJOR:
        return Path(found)
    return None


def find_linker() -> Path:
    """The LLVM 22 ``ld.lld`` that turns LLVM's relocatable object into a code object."""
    found = find_tool("ld.lld")
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
    return find_tool("llvm-objdump")


def find_llc() -> Path:
    """An LLVM 22 ``llc``: the subprocess codegen (``WGRADCACHE_CODEGEN=llc``)."""
    found = find_tool("llc")
    if found is None:
        raise ToolchainError(f"{CODEGEN_ENV}=llc but no llc >= {MIN_LLVM_MAJOR} found in "
                             f"$ROCM_PATH/llvm/bin or on PATH: install `llvm-{MIN_LLVM_MAJOR}`")
    return found


PTXAS_ENV = "WGRADCACHE_PTXAS"
NVDISASM_ENV = "WGRADCACHE_NVDISASM"
NVIDIA_INSTALL = "pip install 'wgradcache[nvidia]'"
"""The one install that brings ptxas, nvdisasm and cuda-bindings (pyproject's extra)."""
_CUDA_HINT = f"install it with `{NVIDIA_INSTALL}` or a CUDA toolkit"
_CUDA_WHERE = "$CUDA_HOME/bin, PATH, /usr/local/cuda*/bin, the {wheel} wheel"


def cuda_tool_dirs() -> list[Path]:
    """Where a CUDA tool is looked for, in order: ``$CUDA_HOME/bin`` (or ``$CUDA_PATH``),
    PATH, ``/usr/local/cuda*/bin`` (newest first), then the bin folders of NVIDIA's pip
    wheels (``site-packages/nvidia/cu13/bin`` for 13.x, ``nvidia/cuda_nvcc/bin`` before).

    One list, so the preflight, ``wgradcache toolchain`` and the compile look in the same
    places (and a test points all of them at one empty folder)."""
    dirs: list[Path] = []
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        dirs.append(Path(home) / "bin")
    dirs += [Path(d) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    dirs += sorted(Path("/usr/local").glob("cuda*/bin"), reverse=True)
    try:
        import nvidia  # the namespace package of NVIDIA's wheels

        for root in getattr(nvidia, "__path__", []):
            dirs += sorted(Path(root).glob("*/bin"), reverse=True)
    except ImportError:
        pass
    return dirs


def _in_cuda_dirs(name: str) -> Path | None:
    """The first executable ``name`` in :func:`cuda_tool_dirs`, or None."""
    for d in cuda_tool_dirs():
        c = d / name
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


def _cuda_tool(name: str, env: str, wheel: str) -> Path:
    """``$<env>`` when set (it must be an executable file), else ``_in_cuda_dirs``;
    ToolchainError with the install command."""
    given = os.environ.get(env)
    if given:
        p = Path(given)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise ToolchainError(f"{env}={given}: not an executable file")
    found = _in_cuda_dirs(name)
    if found is None:
        raise ToolchainError(f"no {name} found ({_CUDA_WHERE.format(wheel=wheel)}): "
                             f"{_CUDA_HINT}, or set ${env}")
    return found


def find_ptxas() -> Path:
    """ptxas, which turns the NVPTX backend's PTX into an sm_90 cubin (the NVIDIA targets'
    "linker"): $WGRADCACHE_PTXAS, else the CUDA tool folders; ToolchainError with the hint."""
    return _cuda_tool("ptxas", PTXAS_ENV, "nvidia-cuda-nvcc")


def find_nvdisasm() -> Path:
    """nvdisasm: the sm_90 listing a build records and structure derives from a stored
    cubin (``cubin.sass_stats``): $WGRADCACHE_NVDISASM, else the CUDA tool folders;
    ToolchainError with the install hint when missing."""
    return _cuda_tool("nvdisasm", NVDISASM_ENV, "nvidia-cuda-nvdisasm")


def find_cuobjdump() -> Path | None:
    """cuobjdump (a CUDA toolkit's; not in the nvcc wheel), or None."""
    return _in_cuda_dirs("cuobjdump")


def ptxas_version(path: Path | str) -> str:
    """ptxas's version line, e.g. ``Cuda compilation tools, release 13.0, V13.0.88``."""
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("Cuda compilation tools"):
            return ln
    return lines[-1] if lines else ""


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
