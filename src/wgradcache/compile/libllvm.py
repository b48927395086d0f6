"""The system's shared libLLVM (>= 22) through its C API: codegen and disassembly in-process.

Why not llvmlite's LLVM for codegen: llvmlite's wheel is an assertions build
(``llvmlite.binding.llvm_assertions_state == "on"``); the same passes on the same IR cost
~1.6x the CPU there than in Debian's ``libLLVM-22``, which is what ``llc-22`` runs on, with
byte-identical objects (benchmarks/codegen.py; tested in tests/compile/test_codegen.py).
llvmlite also does not expose LLVM's disassembler. Debian's ``ld.lld-22`` depends on this
library (package ``libllvm22``), so it is there wherever our linker is.

Loading it beside llvmlite is safe: llvmlite's LLVM symbols are not exported, so the two
copies cannot bind to each other. One instance per process (``system_llvm``); every call
that creates LLVM objects creates and disposes them itself, except the target machines and
disassembler contexts, which are kept per (cpu, opt level, features).

LLVM still ends the process on some errors (an LDS overflow prints ``error: ...`` and exits,
``Cannot select`` aborts): callers that compile untrusted IR use ``isolate``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from wgradcache.compile.discovery import (
    CODEGEN_ENV,
    MIN_LLVM_MAJOR,
    ToolchainError,
    llvm_library_candidates,
)

__all__ = ["LLVMLibrary", "LLVMIRError", "system_llvm", "CODEGEN_BACKENDS", "codegen_backend"]

TRIPLE = b"amdgcn-amd-amdhsa"


def triple_for(cpu: str) -> bytes:
    """The triple of a target name, by its backend (NVPTX's or AMDGPU's)."""
    from wgradcache.model.backends import backend_of

    return backend_of(cpu).llvm_triple.encode()
_ASSEMBLY_FILE, _OBJECT_FILE = 0, 1
_RETURN_STATUS_ACTION = 2  # LLVMVerifierFailureAction: report, do not abort
_RELOC_DEFAULT = _CODE_MODEL_DEFAULT = 0

_vp, _cp, _int = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
_SIGNATURES = {
    "LLVMGetVersion": (None, [ctypes.POINTER(ctypes.c_uint)] * 3),
    "LLVMContextCreate": (_vp, []),
    "LLVMContextDispose": (None, [_vp]),
    "LLVMCreateMemoryBufferWithMemoryRangeCopy": (_vp, [_cp, ctypes.c_size_t, _cp]),
    "LLVMParseIRInContext": (_int, [_vp, _vp, ctypes.POINTER(_vp), ctypes.POINTER(_vp)]),
    "LLVMVerifyModule": (_int, [_vp, _int, ctypes.POINTER(_vp)]),
    "LLVMDisposeModule": (None, [_vp]),
    "LLVMDisposeMessage": (None, [_vp]),
    "LLVMGetTargetFromTriple": (_int, [_cp, ctypes.POINTER(_vp), ctypes.POINTER(_vp)]),
    "LLVMCreateTargetMachine": (_vp, [_vp, _cp, _cp, _cp, _int, _int, _int]),
    "LLVMTargetMachineEmitToMemoryBuffer": (_int, [_vp, _vp, _int, ctypes.POINTER(_vp),
                                                   ctypes.POINTER(_vp)]),
    "LLVMGetBufferStart": (_vp, [_vp]),
    "LLVMGetBufferSize": (ctypes.c_size_t, [_vp]),
    "LLVMDisposeMemoryBuffer": (None, [_vp]),
    "LLVMCreateDisasmCPUFeatures": (_vp, [_cp, _cp, _cp, _vp, _int, _vp, _vp]),
    "LLVMDisasmInstruction": (ctypes.c_size_t, [_vp, _vp, ctypes.c_uint64, ctypes.c_uint64,
                                                _cp, ctypes.c_size_t]),
}
_INITIALIZERS = ("TargetInfo", "Target", "TargetMC", "AsmPrinter", "AsmParser",
                 "Disassembler")
_NV_INITIALIZERS = ("TargetInfo", "Target", "TargetMC", "AsmPrinter")


class LLVMIRError(ValueError):
    """IR that does not parse or verify; the message is LLVM's."""


class LLVMLibrary:
    """One loaded libLLVM: version, AMDGPU target initialised, C API signatures declared."""

    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path))
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)  # AttributeError: not a usable libLLVM
            fn.restype, fn.argtypes = res, args
        v = [ctypes.c_uint() for _ in range(3)]
        lib.LLVMGetVersion(*(ctypes.byref(x) for x in v))
        if v[0].value < MIN_LLVM_MAJOR:
            raise OSError(f"{path} is LLVM {v[0].value}, need >= {MIN_LLVM_MAJOR}")
        for name in _INITIALIZERS:
            getattr(lib, f"LLVMInitializeAMDGPU{name}")()
        # NVPTX (sm_90) where the library has it (Debian's does; no asm parser or
        # disassembler there)
        self.nvptx = all(hasattr(lib, f"LLVMInitializeNVPTX{n}") for n in _NV_INITIALIZERS)
        if self.nvptx:
            for name in _NV_INITIALIZERS:
                getattr(lib, f"LLVMInitializeNVPTX{name}")()
        self.lib = lib
        self.path = path
        self.version = ".".join(str(x.value) for x in v)
        self.lock = threading.Lock()  # disassembler contexts are not thread-safe
        self._machines: dict[tuple[str, int, str], int] = {}
        self._disasm: dict[tuple[str, str], int] = {}

    def _message(self, ptr: ctypes.c_void_p) -> str:
        if not ptr.value:
            return ""
        text = ctypes.string_at(ptr.value).decode(errors="replace").strip()
        self.lib.LLVMDisposeMessage(ptr)
        return text

    def target_machine(self, cpu: str, opt_level: int, features: str) -> int:
        key = (cpu, opt_level, features)
        if key not in self._machines:
            target, err = ctypes.c_void_p(), ctypes.c_void_p()
            triple = triple_for(cpu)
            if self.lib.LLVMGetTargetFromTriple(triple, ctypes.byref(target),
                                                ctypes.byref(err)):
                raise RuntimeError(f"libLLVM has no {triple.decode()} target: "
                                   f"{self._message(err)}")
            tm = self.lib.LLVMCreateTargetMachine(target, triple, cpu.encode(),
                                                  features.encode(), opt_level,
                                                  _RELOC_DEFAULT, _CODE_MODEL_DEFAULT)
            if not tm:
                raise RuntimeError(f"libLLVM made no target machine for {cpu!r}")
            self._machines[key] = tm
        return self._machines[key]

    @contextlib.contextmanager
    def module(self, ir: str) -> Iterator[int]:
        """``ir`` parsed and verified in a fresh LLVMContext, disposed on exit (so a
        long-lived worker does not grow). Raises LLVMIRError with LLVM's message."""
        lib = self.lib
        ctx = lib.LLVMContextCreate()
        try:
            data = ir.encode()
            buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), b"ir")
            mod, err = ctypes.c_void_p(), ctypes.c_void_p()
            # The parser owns ``buf`` from here, whatever it returns.
            if lib.LLVMParseIRInContext(ctx, buf, ctypes.byref(mod), ctypes.byref(err)):
                raise LLVMIRError(f"LLVM IR does not parse: {self._message(err)}")
            try:
                broken = lib.LLVMVerifyModule(mod, _RETURN_STATUS_ACTION, ctypes.byref(err))
                message = self._message(err)
                if broken:
                    raise LLVMIRError(f"LLVM IR does not verify: {message}")
                yield mod.value
            finally:
                lib.LLVMDisposeModule(mod)
        finally:
            lib.LLVMContextDispose(ctx)

    def emit_module(self, mod: int, cpu: str, opt_level: int = 3, features: str = "",
                    assembly: bool = False) -> bytes:
        """Codegen of a parsed module: the relocatable object (or ``.s`` text) bytes.
        Codegen changes the module: emit each parsed module once."""
        lib, tm = self.lib, self.target_machine(cpu, opt_level, features)
        out, err = ctypes.c_void_p(), ctypes.c_void_p()
        if lib.LLVMTargetMachineEmitToMemoryBuffer(tm, mod,
                                                   _ASSEMBLY_FILE if assembly else _OBJECT_FILE,
                                                   ctypes.byref(err), ctypes.byref(out)):
            raise RuntimeError(f"LLVM codegen failed: {self._message(err)}")
        try:
            return ctypes.string_at(lib.LLVMGetBufferStart(out), lib.LLVMGetBufferSize(out))
        finally:
            lib.LLVMDisposeMemoryBuffer(out)

    def disasm_context(self, cpu: str, features: str) -> int:
        """A disassembler for ``cpu``; call under ``self.lock``."""
        key = (cpu, features)
        if key not in self._disasm:
            dc = self.lib.LLVMCreateDisasmCPUFeatures(TRIPLE, cpu.encode(), features.encode(),
                                                      None, 0, None, None)
            if not dc:
                raise ValueError(f"LLVM has no AMDGPU disassembler for {cpu!r} {features!r}")
            self._disasm[key] = dc
        return self._disasm[key]


@functools.lru_cache(maxsize=1)
def system_llvm() -> LLVMLibrary | None:
    """This process's libLLVM >= 22, loaded once: the first candidate that loads, is new
    enough and has the C API we call; None when there is none."""
    for path in llvm_library_candidates():
        try:
            return LLVMLibrary(path)
        except (OSError, AttributeError):
            continue
    return None


CODEGEN_BACKENDS = ("auto", "libllvm", "llvmlite", "llc")


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
    if system_llvm() is not None:
        return "libllvm"
    if want == "libllvm":
        raise ToolchainError(f"{CODEGEN_ENV}=libllvm but no libLLVM >= {MIN_LLVM_MAJOR} "
                             f"loads: install `llvm-{MIN_LLVM_MAJOR}` (`make deps`)")
    return "llvmlite"
