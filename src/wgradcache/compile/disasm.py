"""In-process AMDGPU disassembly through the C API of the system's libLLVM (``libllvm``).

Why: the ISA listing behind ``isa_stats`` is needed for every job. A second codegen costs as
much as the first, and ``llvm-objdump`` costs ~40 ms of process start-up per job (loading
libLLVM); with libLLVM loaded once per worker process, ``LLVMDisasmInstruction`` costs
~3 us per instruction. Calling it through ctypes once per instruction doubled that, so the
native helper (``native``) runs the loop: ~7.5 ms per walk kernel instead of ~14 (20 walk
jobs, ~1700 instructions each); the ctypes loop is the fallback, with the same text
(tested). llvmlite does not expose LLVM's disassembler (its library exports only
``LLVMPY_*``).

The listing has one line per instruction (``\\t<mnemonic> <operands>``), the kernel's
label, and ``L<n>:`` labels at branch targets with branches rewritten to name them (as
``llvm-objdump --symbolize-operands`` does), which is what ``isa.parse_listing`` reads.
"""

from __future__ import annotations

import ctypes
import io
import subprocess

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from wgradcache.compile.discovery import ToolchainError, find_disassembler
from wgradcache.compile.libllvm import LLVMLibrary, system_llvm
from wgradcache.compile.native import NativeHelper, native_library

__all__ = ["OBJDUMP_ARGS", "disassembler_available", "disassemble", "list_binary"]

_OUT_SIZE = 1024
_BRANCHES = ("s_branch ", "s_cbranch_")
# llvm-objdump's arguments for a listing ``isa.parse_listing`` reads (the binary on stdin)
OBJDUMP_ARGS = ("-d", "--symbolize-operands", "--no-show-raw-insn", "/dev/stdin")
_OBJDUMP_TIMEOUT = 120


def disassembler_available() -> bool:
    """True when a libLLVM >= 22 with the AMDGPU disassembler could be loaded."""
    return system_llvm() is not None


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
    """(name, offset in .text, size) of every FUNC symbol, whether object or linked.

    ValueError for a function that does not lie inside ``.text``: the decoder reads the
    range it is given, so a stored code object whose symbol table points past its code
    (a hostile or corrupt blob) must never reach it."""
    text = elf.get_section_by_name(".text")
    base, end = text["sh_addr"], text.data_size
    out = {}
    for name in (".symtab", ".dynsym"):
        sec = elf.get_section_by_name(name)
        if not isinstance(sec, SymbolTableSection):
            continue
        for s in sec.iter_symbols():
            if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 0:
                off, size = s["st_value"] - base, s["st_size"]
                if off < 0 or off + size > end:
                    raise ValueError(f"function {s.name[:60]!r} at .text+{off} ({size} bytes) "
                                     f"is outside .text ({end} bytes)")
                out[s.name] = (off, size)
    return sorted(((n, off, size) for n, (off, size) in out.items()), key=lambda f: f[1])


def _decode(lib: LLVMLibrary, dc: int, code: bytes, start: int,
            end: int) -> list[tuple[int, int, str]]:
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


def _decode_native(native: NativeHelper, dc: int, code: bytes, start: int,
                   end: int) -> list[tuple[int, int, str]]:
    """``_decode`` in one call to the native helper (same context, same text)."""
    lines = native.take_string(native.lib.wgradcache_disassemble(dc, code, start, end))
    out = []
    for line in lines.split("\n"):
        if line:
            pc, n, text = line.split("\t", 2)
            out.append((int(pc), int(n), text))
    return out


def disassemble(binary: bytes, cpu: str, features: str = "") -> str:
    """A listing of every function in ``binary`` (a relocatable object or a code object)."""
    return _disassemble(binary, cpu, features, native_library()[0])


def list_binary(binary: bytes, cpu: str, features: str = "") -> tuple[str, str]:
    """(listing, where from) of a linked code object, by the build's preference: the
    in-process disassembler ("llvm"), else an ``llvm-objdump`` process ("objdump"). Both
    give ``isa_stats`` the same figures as the listing the build recorded (tested). What
    ``verify`` derives a stored binary's ISA statistics from: the build's last resort, a
    second codegen of the IR, would list the IR, not the binary, so without either
    disassembler this raises ToolchainError. ValueError for bytes that are not an ELF
    with its functions inside ``.text``."""
    if disassembler_available():
        try:
            return disassemble(binary, cpu, features), "llvm"
        except (ValueError, RuntimeError):
            raise
        except Exception as e:  # pyelftools reports garbage in many types
            raise ValueError(f"malformed code object: {type(e).__name__}: {e}") from None
    objdump = find_disassembler()
    if objdump is None:
        raise ToolchainError("no libLLVM >= 22 nor llvm-objdump >= 22 to disassemble a "
                             "stored code object (install `llvm-22`)")
    try:
        proc = subprocess.run([str(objdump), *OBJDUMP_ARGS], input=binary,
                              capture_output=True, timeout=_OBJDUMP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ValueError(f"llvm-objdump timed out after {_OBJDUMP_TIMEOUT} s") from None
    if proc.returncode != 0:
        said = proc.stderr.decode(errors="replace").strip().splitlines()
        raise ValueError(f"llvm-objdump: {said[-1] if said else proc.returncode}")
    return proc.stdout.decode(errors="replace"), "objdump"


def _disassemble(binary: bytes, cpu: str, features: str, native: NativeHelper | None) -> str:
    """``disassemble``, decoding through the native helper when given, else per instruction
    through ctypes."""
    lib = system_llvm()
    if lib is None:
        raise RuntimeError("no libLLVM >= 22 with an AMDGPU disassembler was found")
    elf = ELFFile(io.BytesIO(binary))
    text = elf.get_section_by_name(".text")
    if text is None:
        raise ValueError("binary has no .text section")
    code = text.data()
    lines: list[str] = []
    with lib.lock:
        dc = lib.disasm_context(cpu, features)
        for name, start, size in _functions(elf):
            insns = (_decode_native(native, dc, code, start, start + size) if native
                     else _decode(lib, dc, code, start, start + size))
            targets: dict[int, str] = {}
            rendered = []
            for pc, n, text_ in insns:
                if text_.startswith(_BRANCHES):
                    mnemonic, _, operands = text_.partition(" ")
                    dest = _branch_target(pc, n, operands)
                    if dest is not None:
                        label = targets.setdefault(dest, f"L{len(targets)}")
                        rest = operands.partition(",")[2]
                        operands = label + (f",{rest}" if rest else "")
                    rendered.append((pc, f"\t{mnemonic} {operands}".rstrip()))
                else:
                    rendered.append((pc, "\t" + text_))
            lines.append(f"{name}:")
            for pc, line in rendered:
                if pc in targets:
                    lines.append(f"{targets[pc]}:")
                lines.append(line)
    return "\n".join(lines) + "\n"
