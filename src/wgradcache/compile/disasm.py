"""In-process AMDGPU disassembly through the LLVM C API of the system's ``libLLVM``.

Why: the ISA listing behind ``isa_stats`` is needed for every job. A second codegen costs as
much as the first, and ``llvm-objdump`` costs ~40 ms of process start-up per job (loading
libLLVM); loading libLLVM once per worker process and calling ``LLVMDisasmInstruction``
costs ~33 ms once, then ~2-10 ms per kernel. llvmlite does not expose LLVM's disassembler
(its library exports only ``LLVMPY_*``), so the system libLLVM 22 is used: Debian's
``ld.lld-22`` depends on it (package ``libllvm22``), so it is there wherever our linker is.
Loading it beside llvmlite is safe for the same reason: llvmlite's LLVM symbols are not
exported, so the two copies cannot bind to each other.

The listing has one line per instruction (``\\t<mnemonic> <operands>``), the kernel's
label, and ``L<n>:`` labels at branch targets with branches rewritten to name them (as
``llvm-objdump --symbolize-operands`` does), which is what ``isa.parse_listing`` reads.
"""

from __future__ import annotations

import ctypes
import functools
import io
import threading
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from wgradcache.compile.toolchain import MIN_LLVM_MAJOR, find_llvm_library

__all__ = ["disassembler_available", "disassemble"]

_TRIPLE = b"amdgcn-amd-amdhsa"
_OUT_SIZE = 1024
_LOCK = threading.Lock()  # a disassembler context is not thread-safe


class _Lib:
    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path))
        major, minor, patch = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
        lib.LLVMGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
        if major.value < MIN_LLVM_MAJOR:
            raise OSError(f"{path} is LLVM {major.value}, need >= {MIN_LLVM_MAJOR}")
        for init in ("LLVMInitializeAMDGPUTargetInfo", "LLVMInitializeAMDGPUTargetMC",
                     "LLVMInitializeAMDGPUDisassembler"):
            getattr(lib, init)()
        lib.LLVMCreateDisasmCPUFeatures.restype = ctypes.c_void_p
        lib.LLVMCreateDisasmCPUFeatures.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int,
            ctypes.c_void_p, ctypes.c_void_p]
        lib.LLVMDisasmInstruction.restype = ctypes.c_size_t
        lib.LLVMDisasmInstruction.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
            ctypes.c_char_p, ctypes.c_size_t]
        self.lib = lib
        self.path = path
        self.version = f"{major.value}.{minor.value}.{patch.value}"
        self._contexts: dict[tuple[str, str], int] = {}

    def context(self, cpu: str, features: str) -> int:
        key = (cpu, features)
        if key not in self._contexts:
            dc = self.lib.LLVMCreateDisasmCPUFeatures(
                _TRIPLE, cpu.encode(), features.encode(), None, 0, None, None)
            if not dc:
                raise ValueError(f"LLVM has no AMDGPU disassembler for {cpu!r} {features!r}")
            self._contexts[key] = dc
        return self._contexts[key]


@functools.lru_cache(maxsize=1)
def _lib() -> _Lib | None:
    path = find_llvm_library()
    if path is None:
        return None
    try:
        return _Lib(path)
    except (OSError, AttributeError):
        return None


def disassembler_available() -> bool:
    """True when a libLLVM >= 22 with the AMDGPU disassembler could be loaded."""
    return _lib() is not None


def _branch_target(pc: int, size: int, operands: str) -> int | None:
    """SOPP branches: target = next pc + 4 * simm16 (printed unsigned by the disassembler)."""
    try:
        imm = int(operands.split(",")[0].strip(), 0)
    except ValueError:
        return None
    if imm >= 0x8000:
        imm -= 0x10000
    return pc + size + 4 * imm


def _functions(elf: ELFFile) -> list[tuple[str, int, int]]:
    """(name, offset in .text, size) of every FUNC symbol, whether object or linked."""
    text = elf.get_section_by_name(".text")
    base = text["sh_addr"]
    out = {}
    for name in (".symtab", ".dynsym"):
        sec = elf.get_section_by_name(name)
        if not isinstance(sec, SymbolTableSection):
            continue
        for s in sec.iter_symbols():
            if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 0:
                out[s.name] = (s["st_value"] - base, s["st_size"])
    return sorted(((n, off, size) for n, (off, size) in out.items()), key=lambda f: f[1])


def _decode(lib: _Lib, dc: int, code: bytes, start: int, end: int) -> list[tuple[int, int, str]]:
    buf = ctypes.create_string_buffer(code, len(code))
    out = ctypes.create_string_buffer(_OUT_SIZE)
    base = ctypes.addressof(buf)
    insns = []
    pc = start
    while pc < end:
        n = lib.lib.LLVMDisasmInstruction(dc, base + pc, end - pc, pc, out, _OUT_SIZE)
        if n == 0:
            insns.append((pc, 4, "<unknown>"))
            n = 4
        else:
            insns.append((pc, n, out.value.decode().strip()))
        pc += n
    return insns


def disassemble(binary: bytes, cpu: str, features: str = "") -> str:
    """A listing of every function in ``binary`` (a relocatable object or a code object)."""
    lib = _lib()
    if lib is None:
        raise RuntimeError("no libLLVM >= 22 with an AMDGPU disassembler was found")
    elf = ELFFile(io.BytesIO(binary))
    text = elf.get_section_by_name(".text")
    if text is None:
        raise ValueError("binary has no .text section")
    code = text.data()
    lines: list[str] = []
    with _LOCK:
        dc = lib.context(cpu, features)
        for name, start, size in _functions(elf):
            insns = _decode(lib, dc, code, start, start + size)
            targets: dict[int, str] = {}
            rendered = []
            for pc, n, text_ in insns:
                mnemonic, _, operands = text_.partition(" ")
                if mnemonic == "s_branch" or mnemonic.startswith("s_cbranch_"):
                    dest = _branch_target(pc, n, operands)
                    if dest is not None:
                        label = targets.setdefault(dest, f"L{len(targets)}")
                        rest = operands.partition(",")[2]
                        operands = label + (f",{rest}" if rest else "")
                rendered.append((pc, f"\t{mnemonic} {operands}".rstrip()))
            lines.append(f"{name}:")
            for pc, line in rendered:
                if pc in targets:
                    lines.append(f"{targets[pc]}:")
                lines.append(line)
    return "\n".join(lines) + "\n"
