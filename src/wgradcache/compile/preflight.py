"""The toolchain preflight: every tool a target's build needs, resolved once, before the
first job.

Why: a machine that lacks a tool is not a job that failed. Found inside the jobs, a missing
nvdisasm was one failure record and one line per job (1596 for a full sm_90 build, each
after its ptxas run); found here, it is one line naming the tool, the target and the
install command, before anything is written or compiled, the way CMake, Bazel and ccache
find their toolchain before the first compile.

What a target needs (the catalog's vendor decides):

* the AMD targets: the codegen (``WGRADCACHE_CODEGEN``: the libLLVM that loads, llvmlite,
  or ``llc``) and the linker (LLD in-process through the native helper, else ``ld.lld``;
  ``WGRADCACHE_LINKER=inprocess`` makes the native helper itself required);
* the NVIDIA targets: a codegen with the NVPTX backend, ``ptxas`` (PTX -> cubin) and
  ``nvidia``'s ``nvdisasm`` (the SASS listing every entry records).

The disassembler of the AMD listings is not required: without libLLVM or llvm-objdump the
listing comes from a second codegen (``codegen.compile_ir``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from wgradcache.compile.discovery import (
    MIN_LLVM_MAJOR,
    NVIDIA_INSTALL,
    ToolchainError,
    find_llc,
    find_nvdisasm,
    find_ptxas,
)

__all__ = ["ToolCheck", "check_target", "require_tools"]

_LLVM_INSTALL = f"install `llvm-{MIN_LLVM_MAJOR}` (`make deps`)"
_RUN_TIMEOUT = 60


@dataclass(frozen=True)
class ToolCheck:
    """One tool a target's build needs: where it is (``found``) or why it cannot be used
    (``problem``, a sentence that ends with how to get it)."""

    target: str
    tool: str  # "codegen", "linker", "native helper", "ptxas", "nvdisasm"
    found: str = ""
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem

    def line(self) -> str:
        """The one line a command stops with."""
        return f"{self.target} cannot be built here: {self.tool}: {self.problem}"

    def to_json(self) -> dict:
        return {"tool": self.tool, "ok": self.ok, "found": self.found, "problem": self.problem}


def _runs(path: Path) -> str:
    """"" when ``<path> --version`` runs and exits 0, else why not (an unusable tool: a
    broken file, a wrong architecture, a missing library)."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=_RUN_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{path} does not run ({e.__class__.__name__}: {e})"
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()
        return (f"{path} --version exits {out.returncode}"
                + (f" ({tail[-1].strip()})" if tail else ""))
    return ""


def _codegen(target: str, nvptx: bool) -> ToolCheck:
    """The codegen ``libllvm.codegen_backend`` picks, and for an NVIDIA target whether it
    has the NVPTX backend."""
    from wgradcache.compile import libllvm

    try:
        backend = libllvm.codegen_backend()
        if backend == "llc":
            return ToolCheck(target, "codegen", f"llc ({find_llc()})")
        if backend == "llvmlite":
            import llvmlite.binding  # noqa: F401  (the fallback ships as a dependency)

            return ToolCheck(target, "codegen", "llvmlite")
    except ToolchainError as e:
        return ToolCheck(target, "codegen", problem=str(e))
    except ImportError as e:
        return ToolCheck(target, "codegen", problem=f"llvmlite does not import ({e}): "
                                                    "reinstall wgradcache")
    lib = libllvm.system_llvm()
    if nvptx and not lib.nvptx:
        return ToolCheck(target, "codegen", problem=(
            f"{lib.path} has no NVPTX backend: {_LLVM_INSTALL}, or set "
            "WGRADCACHE_CODEGEN=llvmlite"))
    return ToolCheck(target, "codegen", f"libllvm {lib.version} ({lib.path})")


def _linker(target: str) -> ToolCheck:
    """The AMD linker ``lldlink.select_linker`` picks; with ``WGRADCACHE_LINKER=inprocess``
    the native helper is the tool that must be there."""
    from wgradcache.compile import lldlink

    try:
        tool = "native helper" if lldlink.linker_choice() == "inprocess" else "linker"
        linker = lldlink.select_linker()
    except ToolchainError as e:
        return ToolCheck(target, "linker", problem=str(e))
    except OSError as e:  # an ld.lld that does not run: its --version
        return ToolCheck(target, "linker", problem=f"does not run ({e})")
    return ToolCheck(target, tool, f"{linker.kind} {linker.version} ({linker.path})")


def _cuda(target: str, tool: str, find) -> ToolCheck:
    try:
        path = find()
    except ToolchainError as e:
        return ToolCheck(target, tool, problem=str(e))
    why = _runs(path)
    if why:
        return ToolCheck(target, tool, problem=f"{why}: install it with `{NVIDIA_INSTALL}`")
    return ToolCheck(target, tool, str(path))


def check_target(target: str) -> tuple[ToolCheck, ...]:
    """Every tool a build of ``target`` needs, each found or with its problem."""
    from wgradcache.model.backends import backend_of

    return tuple(_CHECKS[tool](target) for tool in backend_of(target).tools)


# what each name in a backend's ``tools`` checks
_CHECKS = {"llvm": lambda t: _codegen(t, nvptx=False), "lld": _linker,
           "llvm-nvptx": lambda t: _codegen(t, nvptx=True),
           "ptxas": lambda t: _cuda(t, "ptxas", find_ptxas),
           "nvdisasm": lambda t: _cuda(t, "nvdisasm", find_nvdisasm)}


def require_tools(targets: Iterable[str]) -> None:
    """Raise ToolchainError with one line when a tool any of ``targets`` needs is missing
    or unusable (the first such, and how many more ``wgradcache toolchain`` lists); called
    by build, refresh, compile and reproduce before their first job."""
    problems = [c for t in dict.fromkeys(targets) for c in check_target(t) if not c.ok]
    if problems:
        more = (f" (and {len(problems) - 1} more: `wgradcache toolchain` lists them)"
                if len(problems) > 1 else "")
        raise ToolchainError(problems[0].line() + more)
