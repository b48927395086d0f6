"""AMD's backend: the AMDGPU lowering, codegen through libLLVM and LLD, ``.hsaco`` code
objects read from their ELF metadata note, ISA statistics of the disassembly, HIP."""

from __future__ import annotations

from wgradcache.model.backends import Backend, register

__all__ = ["AMDGPU", "RECORD_FIELDS"]

# ``compile.codeobject.CodeObjectInfo.to_dict``: the ELF note's words (a test keeps them equal)
RECORD_FIELDS: dict[str, type] = {
    "e_flags": int, "mach": int, "target": str, "code_object_version": int, "symbol": str,
    "has_symbol": bool, "has_descriptor": bool, "args": list, "vgpr_count": int,
    "agpr_count": int, "sgpr_count": int, "vgpr_spill_count": int, "sgpr_spill_count": int,
    "group_segment_fixed_size": int, "private_segment_fixed_size": int,
    "wavefront_size": int, "max_flat_workgroup_size": int, "kernarg_segment_size": int,
    "text_bytes": int,
}


class Amdgpu(Backend):
    name = "amdgpu"
    blob_suffix = ".hsaco"
    blob_magic = b"\x7fELF"
    runtime = "hip"
    own_toolchain = False  # the default identity: LLVM + LLD
    tools = ("llvm", "lld")
    one_wave_barrier = True
    record_fields = RECORD_FIELDS

    @property
    def llvm_triple(self) -> str:
        from wgradcache.kernel.lower_llvm import TRIPLE

        return TRIPLE

    def lower(self, kd, target: str) -> str:
        from wgradcache.kernel.lower_llvm import lower

        return lower(kd, target)

    def compile(self, ir_text: str, target: str, options, listing: str):
        from wgradcache.compile.codegen import compile_amdgpu

        return compile_amdgpu(ir_text, target, options, listing)

    def read_code_object(self, data: bytes):
        from wgradcache.compile.codeobject import read_code_object

        return read_code_object(data)

    def isa_stats(self, listing: str, kind: str = "disassembly") -> dict[str, int]:
        from wgradcache.compile.isa import isa_stats

        return isa_stats(listing)  # the assembly and the disassembly count alike

    def stored_listing(self, data: bytes, target: str) -> str:
        from wgradcache.compile.codegen import CodegenOptions
        from wgradcache.compile.disasm import list_binary

        return list_binary(data, target, CodegenOptions().features)[0]

    def disassembler_missing(self) -> str:
        from wgradcache.compile.disasm import disassembler_available
        from wgradcache.compile.discovery import find_disassembler

        if disassembler_available() or find_disassembler() is not None:
            return ""
        return ("no libLLVM >= 22 nor llvm-objdump >= 22 here: the ISA statistics of the "
                "stored binaries cannot be derived (install `llvm-22`)")

    def summary_line(self, co: dict, tail: str) -> str:
        return (f"vgpr {co['vgpr_count']} sgpr {co['sgpr_count']} "
                f"spills {co['vgpr_spill_count']}/{co['sgpr_spill_count']} "
                f"lds {co['group_segment_fixed_size']} B "
                f"scratch {co['private_segment_fixed_size']} B; {tail}")

    def resource_rows(self, co: dict) -> list[tuple[str, object]]:
        rows = (("vgpr", "vgpr_count"), ("sgpr", "sgpr_count"), ("agpr", "agpr_count"),
                ("vgpr spills", "vgpr_spill_count"), ("sgpr spills", "sgpr_spill_count"),
                ("LDS bytes", "group_segment_fixed_size"),
                ("scratch bytes", "private_segment_fixed_size"))
        return [(name, co[f]) for name, f in rows if co.get(f) is not None]

    def device_for(self, target: str):
        from wgradcache.runtime.hip import device_for

        return device_for(target)


AMDGPU = register(Amdgpu())
