"""Read a linked AMDGPU code object: ELF header, symbols and the kernel's metadata note.

The cache records registers, spills, LDS and the kernel arguments of every entry, and
``verify`` checks a code object's structure; both read them here from the bytes, never from
the assembly text, so a cached blob can be re-read without the compiler. The metadata is the
msgpack ``NT_AMDGPU_METADATA`` note (type 32, owner ``AMDGPU``) in ``.note``
(llvm22-amdgpu-facts.md §5). An NVIDIA cubin is another backend's (``cubin.read_cubin``).
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass

import msgpack
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection

__all__ = ["EM_AMDGPU", "NT_AMDGPU_METADATA", "KernelArg", "CodeObjectInfo",
           "read_code_object"]

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
_EF_AMDGPU_MACH = 0xFF
# EI_ABIVERSION of an AMDHSA code object is its version minus 2 (v4=2, v5=3, v6=4).
_ABIVERSION_OFFSET = 2


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument as the metadata lists it; hidden arguments have no name."""

    name: str
    offset: int
    size: int
    value_kind: str

    @property
    def hidden(self) -> bool:
        return self.value_kind.startswith("hidden_")


@dataclass(frozen=True)
class CodeObjectInfo:
    """What a code object says about its one kernel, as the loader will see it."""

    e_flags: int
    mach: int  # EF_AMDGPU_MACH = e_flags & 0xff; equals targets.Target.e_mach
    target: str  # amdhsa.target, e.g. "amdgcn-amd-amdhsa--gfx1250"
    code_object_version: int
    symbol: str
    has_symbol: bool
    has_descriptor: bool  # "<symbol>.kd" is a dynamic symbol: the loader finds the kernel
    args: tuple[KernelArg, ...]
    vgpr_count: int
    agpr_count: int  # only gfx9xx report it; 0 elsewhere
    sgpr_count: int
    vgpr_spill_count: int
    sgpr_spill_count: int
    group_segment_fixed_size: int  # LDS bytes
    private_segment_fixed_size: int  # scratch bytes per lane
    wavefront_size: int
    max_flat_workgroup_size: int
    kernarg_segment_size: int
    text_bytes: int

    # The questions every stage asks of a code object of either vendor (``cubin.CubinInfo``
    # answers them in its fields), with the words its findings use.
    SHARED_WORD = "LDS"
    STACK_WORD = "scratch"
    THREADS_WORD = "max flat workgroup size"

    @property
    def wave_size(self) -> int:
        return self.wavefront_size

    @property
    def max_threads(self) -> int:
        return self.max_flat_workgroup_size

    @property
    def static_lds_bytes(self) -> int:
        return self.group_segment_fixed_size

    @property
    def stack_bytes(self) -> int:
        return self.private_segment_fixed_size

    @property
    def loads_as_kernel(self) -> bool:
        return self.has_symbol and self.has_descriptor

    @property
    def spills(self) -> str:
        """The spills in words, "" when there are none."""
        if not (self.vgpr_spill_count or self.sgpr_spill_count):
            return ""
        return f"{self.vgpr_spill_count} VGPR, {self.sgpr_spill_count} SGPR"

    @property
    def explicit_args(self) -> tuple[KernelArg, ...]:
        return tuple(a for a in self.args if not a.hidden)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["args"] = [asdict(a) for a in self.args]
        return d

    def record(self, facts) -> dict:
        """The entry's record: ``to_dict`` (``facts``, a ``wgrad.abi.RecordFacts``, adds
        nothing: the metadata names the arguments, and an AMD kernel's LDS is static)."""
        return self.to_dict()


def _elf(hsaco: bytes) -> ELFFile:
    if not isinstance(hsaco, (bytes, bytearray, memoryview)):
        raise ValueError(f"code object must be bytes, got {type(hsaco).__name__}")
    if bytes(hsaco[:4]) != b"\x7fELF":
        raise ValueError("not an ELF file (no \\x7fELF magic): not a code object")
    try:
        elf = ELFFile(io.BytesIO(bytes(hsaco)))
        machine = elf.header["e_machine"]
    except Exception as e:  # pyelftools reports bad headers as ELFError or construct errors
        raise ValueError(f"malformed ELF: {e}") from None
    if machine not in (EM_AMDGPU, "EM_AMDGPU"):
        raise ValueError(f"ELF e_machine is {machine}, not EM_AMDGPU ({EM_AMDGPU})")
    return elf


def _metadata(elf: ELFFile) -> dict:
    for sec in elf.iter_sections():
        if not isinstance(sec, NoteSection):
            continue
        for note in sec.iter_notes():
            if note["n_name"] == "AMDGPU" and note["n_type"] in (
                NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"
            ):
                desc = note["n_desc"]
                return msgpack.unpackb(desc if isinstance(desc, bytes) else desc.encode("latin-1"))
    raise ValueError("code object has no AMDGPU metadata note (NT_AMDGPU_METADATA)")


def _dynamic_symbols(elf: ELFFile) -> set[str]:
    sec = elf.get_section_by_name(".dynsym")
    if not isinstance(sec, SymbolTableSection):
        return set()
    return {s.name for s in sec.iter_symbols() if s.name}


def read_code_object(hsaco: bytes) -> CodeObjectInfo:
    """Parse a linked AMDGPU code object holding exactly one kernel.

    Raises ValueError for non-ELF or non-AMDGPU input, a missing metadata note, or a kernel
    count other than one (LLVM drops a kernel silently in some configurations, facts §1:
    an empty ``amdhsa.kernels`` must fail loudly here).
    """
    elf = _elf(hsaco)
    try:
        meta = _metadata(elf)
        dynsyms = _dynamic_symbols(elf)
        text = elf.get_section_by_name(".text")
        text_bytes = text.data_size if text is not None else 0
    except ValueError:
        raise
    except Exception as e:  # pyelftools reports truncation and garbage in many types
        raise ValueError(f"malformed code object: {type(e).__name__}: {e}") from None
    kernels = meta.get("amdhsa.kernels", [])
    if len(kernels) != 1:
        raise ValueError(f"code object lists {len(kernels)} kernels in amdhsa.kernels, "
                         "expected exactly 1")
    k = kernels[0]
    name = k[".name"]
    args = tuple(
        KernelArg(a.get(".name", ""), a[".offset"], a[".size"], a[".value_kind"])
        for a in k.get(".args", [])
    )
    flags = elf.header["e_flags"]
    return CodeObjectInfo(
        e_flags=flags,
        mach=flags & _EF_AMDGPU_MACH,
        target=meta.get("amdhsa.target", ""),
        code_object_version=elf.header["e_ident"]["EI_ABIVERSION"] + _ABIVERSION_OFFSET,
        symbol=name,
        has_symbol=name in dynsyms,
        has_descriptor=f"{name}.kd" in dynsyms,
        args=args,
        vgpr_count=k.get(".vgpr_count", 0),
        agpr_count=k.get(".agpr_count", 0),
        sgpr_count=k.get(".sgpr_count", 0),
        vgpr_spill_count=k.get(".vgpr_spill_count", 0),
        sgpr_spill_count=k.get(".sgpr_spill_count", 0),
        group_segment_fixed_size=k.get(".group_segment_fixed_size", 0),
        private_segment_fixed_size=k.get(".private_segment_fixed_size", 0),
        wavefront_size=k.get(".wavefront_size", 0),
        max_flat_workgroup_size=k.get(".max_flat_workgroup_size", 0),
        kernarg_segment_size=k.get(".kernarg_segment_size", 0),
        text_bytes=text_bytes,
    )
