"""The toolchain: which LLVM runs codegen, which linker links, and the identity that keys
the cache.

Above the rest of the compile layer but ``preflight``: it asks ``discovery`` (tools,
versions, digests), ``libllvm`` (the system library, and which codegen runs), ``lldlink``
and ``native`` (the linker) and imports none of them back, so nothing below depends on it.

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
import importlib.resources
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from wgradcache.compile import libllvm, lldlink, native
from wgradcache.compile.discovery import (
    CODEGEN_ENV,
    ToolchainError,
    find_disassembler,
    find_llc,
    find_tool,
    sha256_file,
    tool_version,
)
from wgradcache.compile.libllvm import CODEGEN_BACKENDS, codegen_backend
from wgradcache.model.targets import CODE_OBJECT_VERSION, code_object_version_flag

__all__ = [
    # re-exported from discovery and libllvm: what users of the toolchain set and catch
    "CODEGEN_ENV",
    "ToolchainError",
    "CODEGEN_BACKENDS",
    "codegen_backend",
    "ToolchainIdentity",
    "identity_digest",
    "keyed_fields",
    "toolchain_identity",
    "toolchain_report",
    "with_code_object_version",
]

def _codegen_library(backend: str) -> tuple[str, Path]:
    """(LLVM version, the file whose bytes decide codegen) of a backend; llc's is its
    version line and the libLLVM it runs on (Debian's llc is a thin front of it)."""
    if backend == "llc":
        llc = find_llc()
        lib = libllvm.system_llvm()
        return tool_version(llc), lib.path if lib else llc
    if backend == "libllvm":
        lib = libllvm.system_llvm()
        return lib.version, lib.path
    from llvmlite.binding import llvm_version_info
    from llvmlite.utils import get_library_name

    # where llvmlite.binding.ffi loads its library from
    lib_path = Path(str(importlib.resources.files("llvmlite.binding") / get_library_name()))
    return ".".join(str(v) for v in llvm_version_info), lib_path


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


def toolchain_identity(target: str | None = None) -> ToolchainIdentity:
    """The identity of this process's toolchain for ``target`` (None: the AMD targets').

    An NVIDIA target (``sm_90``) has no LLD and no code object version: its "linker" is
    ptxas (PTX -> cubin), whose path and ``--version`` line fill those fields, and
    ``code_object_version`` is 0. The AMD identity is unchanged by that, so AMD content
    keys are too."""
    from wgradcache.model.backends import backend_of

    if target is not None and backend_of(target).own_toolchain:
        return backend_of(target).toolchain_identity()
    return _toolchain_identity(codegen_backend(), lldlink.linker_choice())


@functools.cache
def nvptx_identity(backend: str) -> ToolchainIdentity:
    from wgradcache.compile.discovery import find_ptxas, ptxas_version

    version, library = _codegen_library(backend)
    ptxas = find_ptxas()
    return ToolchainIdentity(codegen=backend, llvm_version=version,
                             codegen_digest=sha256_file(library), linker_path=str(ptxas),
                             linker_version=f"ptxas: {ptxas_version(ptxas)}",
                             code_object_version=0)


@functools.cache
def _toolchain_identity(backend: str, linker_choice: str) -> ToolchainIdentity:
    version, library = _codegen_library(backend)
    linker = lldlink.select_linker()
    return ToolchainIdentity(
        codegen=backend,
        llvm_version=version,
        codegen_digest=sha256_file(library),
        linker_path=str(linker.path),
        linker_version=linker.version,
        code_object_version=CODE_OBJECT_VERSION,
    )


def toolchain_report(targets: tuple[str, ...] = ()) -> dict:
    """What this machine would build with, for ``wgradcache toolchain``: the identity (what
    keys the cache), where each tool is, the digest that content keys include, and per
    target (``targets``, default every target with a generator) whether a build would work
    and what is missing (``preflight.check_target``, the check every build makes).

    A machine with no linker still gets its report: the identity's fields then say why."""
    from wgradcache.compile.preflight import check_target
    from wgradcache.model.targets import TARGETS

    try:
        ident = toolchain_identity()
        doc: dict = {**ident.to_dict(), "toolchain_digest": ident.digest()}
    except ToolchainError as e:
        doc = {"toolchain_digest": f"none: {e}"}
    helper, helper_why = native.native_library()
    lib = libllvm.system_llvm()
    llc = find_tool("llc")
    try:
        linker = lldlink.select_linker()
        doc.update(linker=linker.kind, linker_note=linker.note)
    except ToolchainError as e:
        doc.update(linker=f"none: {e}", linker_note="")
    doc.update({
        "codegen_env": os.environ.get(CODEGEN_ENV, ""),
        "linker_env": os.environ.get(lldlink.LINKER_ENV, ""),
        "libllvm": str(lib.path) if lib else None,
        "llc": str(llc) if llc else None,
        "native_helper": str(helper.path) if helper else f"none: {helper_why}",
        "disassembler": ((f"libllvm ({'native' if helper else 'ctypes'} loop)") if lib else
                         str(find_disassembler() or "") or "none (second codegen)"),
        "nvptx": bool(lib and lib.nvptx),
        "ptxas": _cuda_line("ptxas"),
        "nvdisasm": _cuda_line("nvdisasm"),
    })
    names = targets or tuple(n for n, t in TARGETS.items() if t.has_kernels)
    doc["targets"] = {}
    for name in names:
        checks = check_target(name)
        doc["targets"][name] = {"buildable": all(c.ok for c in checks),
                                "tools": [c.to_json() for c in checks]}
    return doc


def _cuda_line(tool: str) -> str:
    """Where ptxas or nvdisasm is and its version (sm_90 builds), or why there is none."""
    from wgradcache.compile.discovery import find_nvdisasm, find_ptxas, ptxas_version

    try:
        p = find_ptxas() if tool == "ptxas" else find_nvdisasm()
    except ToolchainError as e:
        return f"none: {e}"
    return f"{p} ({ptxas_version(p)})"


_COV_FLAG = re.compile(r'!"amdhsa_code_object_version",\s*i32\s+(\d+)')
_MD_ID = re.compile(r"^!(\d+)\s*=", re.MULTILINE)


def with_code_object_version(ir_text: str, version: int = CODE_OBJECT_VERSION) -> str:
    """``ir_text`` with the module flag that pins the code object version.

    Callers (the lowering, tests) need not know about the flag. IR that already pins the
    same version is returned unchanged; IR that pins another one is an error, since the
    caller asked for something contradictory. Named metadata defined twice is merged by the
    parser, so a second ``!llvm.module.flags`` line is enough even if the IR has flags.
    """
    want = code_object_version_flag(version)
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
